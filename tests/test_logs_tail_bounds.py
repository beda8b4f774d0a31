"""`ftslurm logs -n` holds the lines it prints, not N: an N above the cap is refused before
anything is read, the tail of many logs holds a small block per log (`Follower.stream` reads the
tail as it is consumed), and a tail longer than the log is the whole log.

Memory is checked as the peak RSS of the command in its own process (tests/peak_rss.py),
against a cap of 200 MB."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from ftslurm import logtail
from tests.peak_rss import RSS_CAP_KB, measured

pytestmark = pytest.mark.timeout(120)


def blank_run(tmp_path: Path, lines: int, replicas: int = 1) -> Path:
    run = tmp_path / "torchft" / "tft-9"
    run.mkdir(parents=True)
    for i in range(replicas):
        (run / f"tft-9_{i}.out").write_bytes(b"\n" * lines)
    return run


def test_logs_with_a_huge_n_is_one_line_at_once(tmp_path: Path):
    """`-n 1000000000` over 2 million blank lines kept every line (~180 B each: 24 GB on
    300 MB); now N above the cap is refused before anything is read."""
    run = blank_run(tmp_path, 2_000_000)
    t = time.monotonic()
    rc, rss, out, err = measured(tmp_path, "logs", "--run-dir", str(run), "-n", "1000000000")
    assert rc == 2 and out.read_bytes() == b"", err
    assert err.startswith("Error: -n 1000000000: at most 100000 lines of each log")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert rss < RSS_CAP_KB and time.monotonic() - t < 30


def test_logs_memory_is_not_the_lines_it_prints(tmp_path: Path):
    """The largest tail of 16 logs of blank lines (1.6 million lines printed): every line was
    held until the merge (275 MB here); now a small block per log is (23 MB)."""
    run = blank_run(tmp_path, 100_000, replicas=16)
    rc, rss, out, err = measured(tmp_path, "logs", "--run-dir", str(run), "-n", "100000")
    assert rc == 0, err
    printed = out.read_bytes().splitlines()
    assert len(printed) == 1_600_000 and {p.split()[0] for p in printed} == {
        b"[r%d]" % i for i in range(16)}  # fmt: skip
    assert rss < RSS_CAP_KB, rss


def test_follower_stream_holds_a_block_not_the_tail(tmp_path: Path):
    """`Follower.stream` reads the tail as it is consumed: its peak Python memory for 100,000
    short lines is a few blocks (the list `start` builds held them all: ~30 MB)."""
    log = tmp_path / "tft-9_0.out"
    log.write_bytes(b"".join(b"2026-11-23T10:00:00.000 [INFO] step %d\n" % i
                             for i in range(120_000)))  # fmt: skip
    f = logtail.Follower(lambda: {"r0": log})
    tracemalloc.start()
    try:
        count, last = 0, None
        for e in f.stream(100_000):
            count, last = count + 1, e
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 100_000 and last is not None and last.text.endswith("step 119999")
    assert peak < 8 << 20, peak
    assert f.sources["r0"].offset == log.stat().st_size and f.poll() == []


def test_a_tail_longer_than_the_log_is_the_whole_log(tmp_path: Path):
    """150 lines with -n 200: all 150 (the tail was sliced with a negative start: 50)."""
    log = tmp_path / "tft-9_0.out"
    log.write_text("".join(f"2026-11-23T10:00:{i % 60:02d}.000 [INFO] line {i}\n"
                           for i in range(150)))  # fmt: skip
    lines = [e.text for e in logtail.Follower(lambda: {"r0": log}).start(200)]
    assert len(lines) == 150 and lines[0].endswith("line 0")
