"""The launcher passes its worker's output through the log filter (logfilter.py) on its way to
the replica's log: torchft's `got lighthouse quorum` line whole when the quorum changes and
short otherwise, everything else as written, the worker's last lines (a traceback) before the
launcher's `exited with code` line. A real launcher (`python -m ftslurm.replica job`) with a
stand-in for torchrun that prints real recorded torchft lines."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import executable

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "fixtures" / "report" / "slurm-tft-8" / "tft-8_0.out.gz"

pytestmark = pytest.mark.timeout(120)


def _quorum_lines() -> list[bytes]:
    """The first two `got lighthouse quorum` lines of a real run with the same quorum id."""
    lines = gzip.decompress(RECORDED.read_bytes()).splitlines(keepends=True)
    quorums = [ln for ln in lines if b"got lighthouse quorum" in ln]
    first = quorums[0]
    same = [ln for ln in quorums[1:] if ln.split(b"participants")[0].split(b"quorum_id")[1]
            == first.split(b"participants")[0].split(b"quorum_id")[1]]  # fmt: skip
    assert same, "the recording has no repeated quorum"
    return [first, same[0]]


def _run_launcher(tmp_path: Path, **env_extra: str) -> bytes:
    first, again = _quorum_lines()
    recorded = tmp_path / "lines"
    recorded.write_bytes(first + again + again)
    # torchrun's stand-in: the quorum lines on stderr (torchft's Rust logger writes there), a
    # traceback, an exit code 1
    fake = executable(tmp_path / "fake-torchrun", f"""#!/bin/sh
cat {recorded} >&2
echo 'Traceback (most recent call last):'
echo 'RuntimeError: the last line of the worker'
exit 1
""")
    tok = tmp_path / "tok"
    tok.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tok / name).write_text("{}")
    from tests.ftjob import KNOB_ENV_RE

    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    env.update(FTSLURM_PROJECT=str(tmp_path), FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
               FTSLURM_TORCHRUN=str(fake), FTSLURM_EXTRA_ARGS=f"--model.hf_assets_path={tok}",
               PYTHONPATH=str(REPO), FTSLURM_PREFLIGHT="0", **env_extra)  # fmt: skip
    log = tmp_path / "replica.out"
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-m", "ftslurm.replica", "job"], env=env, stdout=out,
                       stderr=subprocess.STDOUT, timeout=90, check=False)  # fmt: skip
    return log.read_bytes()


def test_a_repeated_quorum_is_short_and_the_last_lines_come_before_the_verdict(tmp_path):
    first, again = _quorum_lines()
    text = _run_launcher(tmp_path)
    assert text.count(first) == 1, text[-3000:]
    assert again not in text  # the same quorum again: not the whole member list
    assert len(text) < len(first) * 2 + 8000
    traceback = text.index(b"RuntimeError: the last line of the worker")
    assert traceback < text.index(b"exited with code 1"), text[-2000:]


def test_the_filter_off_keeps_every_line_whole(tmp_path):
    first, again = _quorum_lines()
    text = _run_launcher(tmp_path, FTSLURM_LOG_FILTER="0")
    assert text.count(first) == 1 and text.count(again) == 2, text[-3000:]



class _Breaks:
    """A filter with a bug: it raises on the first chunk."""

    def feed(self, chunk: bytes) -> bytes:
        raise ValueError("a bug in the filter")

    def flush(self) -> bytes:
        raise AssertionError("a dropped filter is not flushed")


@pytest.mark.unit
def test_a_filter_that_raises_is_dropped_and_the_output_goes_on() -> None:
    """The copier thread died with its filter: the worker's pipe then filled up and its next
    write blocked, training held by its own log. Now the output is copied as it comes."""
    import threading

    from ftslurm import runner

    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    os.write(src_w, b"one\ntwo\n")
    os.close(src_w)
    copier = threading.Thread(target=runner.filtered_output, args=(src_r, _Breaks(), dst_w))
    copier.start()
    copier.join(10)
    os.close(dst_w)
    with os.fdopen(dst_r, "rb") as reader:
        assert reader.read() == b"one\ntwo\n"
