"""bench/scale.py's Lighthouse watcher reads quorums the way the report does (logvocab), from a
recorded Lighthouse log fed to it in pieces, as a growing file is; the run model's LogCursor
keeps an unfinished line until its newline comes, and the demo's replica fold, which reads
through it, starts over when the log is truncated."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.run.cursor import LogCursor

ROOT = Path(__file__).resolve().parents[1]
LH = ROOT / "tests" / "fixtures" / "report" / "slurm-tft-11" / "lighthouse.log.gz"
TFT11_1 = LH.with_name("tft-11_1.out.gz")

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_cursor_returns_only_complete_new_lines(tmp_path):
    f = tmp_path / "x.log"
    a = LogCursor(f)
    assert a.lines() == []  # not there yet
    f.write_bytes(b"one\ntw")
    assert a.lines() == [b"one"]
    with f.open("ab") as fh:
        fh.write(b"o\nthree\n")
    assert a.lines() == [b"two", b"three"]
    assert a.lines() == []


def test_demo_fold_starts_over_when_its_log_is_truncated(tmp_path):
    from ftslurm.demo import ReplicaLog

    data = gzip.decompress(TFT11_1.read_bytes())
    log = tmp_path / "tft-11_1.out"
    log.write_bytes(data)
    fold = ReplicaLog(log)
    fold.poll()
    assert (fold.attempt, fold.launches, fold.last_step) == (2, 3, 39)
    first = data[: data.index(b"\n", data.index(b"step:  1 ")) + 1]  # attempt 0 to its step 1
    log.write_bytes(first)  # shorter: read again from its start, the fold with it
    fold.poll()
    assert (fold.attempt, fold.launches, fold.last_step) == (0, 1, 1)
    assert fold.healed_step == {} and fold.appended.restarts == 1


def test_scale_watcher_sees_the_quorums_the_report_sees(tmp_path):
    data = gzip.decompress(LH.read_bytes())
    lines = data.split(b"\n")
    expected = [
        len({logvocab.split_replica_id(m.replica_id)[1] for m in q.members})
        for q in map(logvocab.parse_line, lines)
        if q is not None and q.kind == logvocab.QUORUM
    ]
    assert 2 in expected and 1 in expected  # the run lost a replica and got it back
    log = tmp_path / "lighthouse.log"
    watch = _scale().LighthouseLog(log)
    half = len(data) // 2
    log.write_bytes(data[:half])  # cut mid-line
    watch.poll(2)
    with log.open("ab") as fh:
        fh.write(data[half:])
    watch.poll(2)
    assert [k for k, _ in watch.sizes] == expected
    stamps = [s for s, _ in watch.full]
    assert len(stamps) == expected.count(2)
    first = next(ln for ln in lines if b"Quorum! Quorum {" in ln and b"torchtitan_ft_1" in ln)
    assert stamps[0] == first[:23].decode()  # the log's own time, as the report reads it
