"""Logs without newlines (one line of many MiB): `logs`, the follower, the report's reader and
the merge cut the line and keep its time, in bounded memory (the report's first-lines read held
the whole line: 300 MB -> 649 MB RSS)."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from ftslurm import logtail, logvocab
from ftslurm.report import reader as R
from ftslurm.report import sources
from tests.log_inputs import STEP_LINE, env, run_dir

# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def _newline_free(path: Path, mib: int, tail: bytes = b"\n") -> Path:
    """One line of `mib` MiB (a timestamp, then x), written in blocks."""
    with open(path, "wb") as fh:
        fh.write(b"[titan] 2026-11-23 10:00:00,000 - " + b"x" * ((1 << 20) - 34))
        for _ in range(mib - 1):
            fh.write(b"x" * (1 << 20))
        fh.write(tail)
    return path


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_read_tail_of_a_newline_free_log_shows_it_cut_in_bounded_memory(tmp_path):
    p = _newline_free(tmp_path / "tft-7_0.out", 24)
    (lines, offset), peak = _peak(lambda: logtail.read_tail(p, 5))
    assert offset == p.stat().st_size
    [line] = lines
    assert line.startswith("[titan] 2026-11-23 10:00:00,000 - xxx")
    head, marker = line[: logtail.LINE_MAX], line[logtail.LINE_MAX :]
    assert set(head[40:]) == {"x"}
    assert marker == f" [... line cut: {(24 << 20) - logtail.LINE_MAX} more bytes]"
    assert peak < 6 * logtail.LINE_MAX, peak  # was 2-3 times the file
    # the same through the follower (the tail `logs` shows), and with normal lines after it
    with open(p, "ab") as fh:
        fh.write(b"".join(STEP_LINE.format(i=i).encode() + b"\n" for i in range(1, 4)))
    entries, peak = _peak(lambda: logtail.Follower(lambda: {"r0": p}).start(3))
    assert [e.text for e in entries] == [STEP_LINE.format(i=i) for i in range(1, 4)]
    assert peak < 6 * logtail.LINE_MAX, peak


def test_a_cut_line_keeps_its_time_in_the_merge(tmp_path):
    p = _newline_free(tmp_path / "tft-7_0.out", 3)
    [e] = logtail.Follower(lambda: {"r0": p}).start(1)
    assert e.key == logvocab.line_time("2026-11-23 10:00:00,000")
    assert e.text.endswith(f" [... line cut: {(3 << 20) - logtail.LINE_MAX} more bytes]")


def test_following_a_newline_free_writer_holds_one_cut_line(tmp_path):
    p = tmp_path / "tft-7_0.out"
    p.write_bytes(b"")
    f = logtail.Follower(lambda: {"r0": p})
    assert f.start(5) == []
    with open(p, "ab") as fh:
        for _ in range(6):
            fh.write(b"y" * (1 << 20))
            fh.flush()
            assert f.poll() == []
            assert len(f.sources["r0"].pending.head) <= logtail.LINE_MAX
        fh.write(b"\n" + STEP_LINE.format(i=1).encode() + b"\n")
    cut, after = f.poll()
    assert cut.text == "y" * logtail.LINE_MAX + f" [... line cut: {5 << 20} more bytes]"
    assert after.text == STEP_LINE.format(i=1)


def test_an_archived_newline_free_log_is_cut_too(tmp_path):
    import gzip

    raw = _newline_free(tmp_path / "raw", 24)
    gz = tmp_path / "tft-7_0.out.gz"
    gz.write_bytes(gzip.compress(raw.read_bytes(), 1))
    (lines, _), peak = _peak(lambda: logtail.read_tail(gz, 5))
    marker = f" [... line cut: {(24 << 20) - logtail.LINE_MAX} more bytes]"
    assert [len(x) for x in lines] == [logtail.LINE_MAX + len(marker)]
    assert lines[0].endswith(marker)
    assert peak < 8 * logtail.LINE_MAX, peak  # was twice the line


def test_report_of_a_newline_free_log_reads_in_bounded_memory(tmp_path):
    """clock_offset read the first lines with `for line in fh`: a newline-free log was one
    line in memory (300 MB -> 649 MB RSS); the reader counts the dropped line once."""
    p = _newline_free(tmp_path / "replica_0.log", 40, tail=b"")
    offset, peak = _peak(lambda: sources.clock_offset([p]))
    assert offset == 0.0 and peak < 3 * R.MAX_LINE, peak
    stats = R.ParseStats()
    assert list(R.iter_file_events(p, stats)) == [] and stats.overlong == 1


def _rss_of(args: list[str], tmp_path: Path) -> tuple[int, bytes, bytes]:
    """Peak RSS (KiB) of `ftslurm <args>` in a fresh interpreter, the end of its stdout and its
    stderr. VmHWM, not getrusage's ru_maxrss: Linux carries the parent's peak (this test
    process's) into an exec'd child's ru_maxrss, VmHWM belongs to the child's own memory."""
    code = (
        "import re, sys\n"
        "from ftslurm.cli import main\n"
        f"sys.argv = ['ftslurm', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stdout.flush()\n"
        "hwm = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print('RSS', hwm, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env(tmp_path),
                       cwd=tmp_path, timeout=120)  # fmt: skip
    err, rss = r.stderr.rsplit(b"RSS ", 1)
    return int(rss), r.stdout[-200:], err[-300:]


@pytest.mark.process
def test_logs_and_report_of_a_64_mib_newline_free_log_stay_small(tmp_path):
    """Peak RSS in a subprocess (resource.getrusage): before, `logs -n 5` took 4.5 times the
    file and `report` twice; now both stay near the interpreter's own size."""
    run = run_dir(tmp_path, {})
    _newline_free(run / "tft-7_0.out", 64)
    base, _, _ = _rss_of(["--help"], tmp_path)
    logs_rss, out, _ = _rss_of(["logs", "--run-dir", str(run), "-n", "5", "--no-color"], tmp_path)
    assert logs_rss - base < 32 << 10, (base, logs_rss)
    assert out.endswith(f"[... line cut: {(64 << 20) - logtail.LINE_MAX} more bytes]\n".encode())
    report_rss, _, err = _rss_of(["report", str(run)], tmp_path)
    assert report_rss - base < 32 << 10, (base, report_rss)
    assert b"nothing to report" in err
