"""The run model's incremental readers (ftslurm/run/): a log read in pieces as it grows says
what one read of the whole says; truncation, rotation and requeued attempts appended to the
same file; only the new bytes are read."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest

from ftslurm import logvocab, paths
from ftslurm.run.cursor import LogCursor
from ftslurm.run.model import Run
from ftslurm.run.progress import (
    ProgressReader,
    StepReader,
    read_summary,
    split_attempts,
    steps_in,
    summarize_tail,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FIX = Path(__file__).parent / "fixtures"
LOGS = sorted(FIX.glob("**/tft-*_*.out*"))
BANNER0 = "[2026-11-23 10:00:00]  launching replica 1 (attempt 0) on w\n"
BANNER1 = "[2026-11-23 10:01:00]  launching replica 1 (attempt 1) on w\n"


def _text(p: Path) -> bytes:
    data = p.read_bytes()
    return gzip.decompress(data) if p.suffix == ".gz" else data


def _append(path: Path, data: str | bytes) -> None:
    with path.open("ab") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def _key(s):
    return (s.exists, s.last_step, str(s.last_loss), s.attempt, s.commits, s.torchft, s.ranks,
            s.ranks_alive)  # fmt: skip


@pytest.mark.parametrize("fixture", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_log_read_in_pieces_says_what_one_read_says(tmp_path, fixture):
    """Every recorded replica log, written in random pieces (cut mid-line) and read after
    each: the last read equals the pure fold of the whole text and the one-shot tail read."""
    data = _text(fixture)
    log = tmp_path / "tft-1_0.out"
    log.touch()
    reader = ProgressReader(log)
    rng = random.Random(fixture.name)
    at = 0
    while at < len(data):
        n = rng.randint(1, max(1, len(data) // 7))
        _append(log, data[at : at + n])
        at += n
        reader.read()
    whole = summarize_tail(data.decode(errors="replace"))
    assert _key(reader.read(partial=True)) == _key(whole)
    if len(data) <= 256 * 1024:  # the tail read sees the whole log
        assert _key(read_summary(log)) == _key(whole)


def test_only_the_new_bytes_are_read(tmp_path):
    log = tmp_path / "x.out"
    cur = LogCursor(log)
    assert cur.lines() == []  # not there yet
    _append(log, b"one\ntw")
    assert cur.lines() == [b"one"] and cur.offset == 6
    assert cur.lines() == []  # nothing new: nothing read
    _append(log, b"o\nthree\n")
    assert cur.lines() == [b"two", b"three"] and cur.restarts == 0


def test_a_requeued_attempt_appended_to_the_same_log(tmp_path):
    log = tmp_path / "tft-1_1.out"
    reader = ProgressReader(log)
    _append(log, BANNER0 + "step: 17  loss: 6.3\n")
    s = reader.read()
    assert (s.attempt, s.last_step, s.last_loss) == (0, 17, 6.3)
    _append(log, BANNER1 + "loading...\n")
    s = reader.read()
    assert (s.attempt, s.last_step, s.last_loss) == (1, None, None)  # not training yet
    _append(log, "step: 18  loss: 6.1\n")
    assert (reader.read().attempt, reader.read().last_step) == (1, 18)


def test_truncated_and_rotated_logs_are_read_again_from_their_start(tmp_path):
    log = tmp_path / "tft-1_1.out"
    reader = ProgressReader(log)
    steps = StepReader(log)
    _append(log, BANNER0 + "".join(f"step: {i}  loss: 5.0\n" for i in range(1, 40)))
    assert reader.read().last_step == 39 and len(steps.read()) == 39
    log.write_text(BANNER1 + "step: 2  loss: 7.0\n")  # truncated, then written again
    s = reader.read()
    assert (s.attempt, s.last_step) == (1, 2)
    assert [r.step for r in steps.read()] == [2]
    log.write_text("")  # truncated to nothing: nothing of the old text is left
    s = reader.read()
    assert (s.exists, s.attempt, s.last_step) == (True, None, None) and steps.read() == []
    log.rename(tmp_path / "old.out")  # rotated: a new file (a new inode) under the name
    log.write_text(BANNER0 + "step: 9  loss: 1.5\n" + "x" * 200 + "\n")
    s = reader.read()
    assert (s.attempt, s.last_step, s.last_loss) == (0, 9, 1.5)
    assert [r.step for r in steps.read()] == [9]


def test_the_unfinished_last_line_counts_only_when_asked(tmp_path):
    log = tmp_path / "tft-1_1.out"
    reader = ProgressReader(log)
    _append(log, BANNER0 + "step: 1  loss: 2.0\nstep: 2  loss: 1.5")
    assert reader.read().last_step == 1
    assert reader.read(partial=True).last_step == 2
    assert reader.read().last_step == 1  # not folded for the next read
    _append(log, "\n")
    assert reader.read().last_step == 2


def test_what_is_not_a_regular_file_has_no_summary(tmp_path):
    (tmp_path / "dir.out").mkdir()
    os.mkfifo(tmp_path / "fifo.out")
    for p in (tmp_path / "dir.out", tmp_path / "fifo.out", tmp_path / "gone.out"):
        assert not read_summary(p).exists and not ProgressReader(p).read().exists
        assert LogCursor(p).lines() == []


def test_the_tail_read_drops_the_line_it_cuts(tmp_path):
    log = tmp_path / "tft-1_1.out"
    log.write_text(BANNER0 + "step: 1  loss: 2.0\n" + "y" * 100 + "step: 5  loss: 1.0\n")
    assert read_summary(log, tail_bytes=50).last_step is None  # the step line was cut
    assert read_summary(log, tail_bytes=4096).last_step == 5


def test_step_records_carry_time_attempt_and_memory():
    text = (BANNER1 + "[titan] 2026-11-23 10:34:45,050 - root - INFO - \x1b[31mstep:  3  "
            "\x1b[32mloss:  8.1  memory:  1.00GiB(4.26%)  tps: 1,146\nstep: 4  loss: nan\n")
    a, b = steps_in(text)
    assert (a.attempt, a.step, a.loss_value, a.memory_gib, a.memory_pct, a.tps) == (
        1, 3, 8.1, 1.0, 4.26, 1146)  # fmt: skip
    assert a.time == logvocab.parse_time(b"2026-11-23 10:34:45,050")
    assert b.time is None and b.memory_gib is None and b.loss == "nan"
    assert split_attempts("junk\n" + BANNER0 + "a\n" + BANNER1 + "b\n") == [
        BANNER0 + "a\n", BANNER1 + "b\n"]  # fmt: skip


def test_a_run_is_found_where_the_outputs_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    run = Run.of(12)
    assert run.folder == paths.torchft_runs_dir() / "tft-12"
    assert run.log(1) == logvocab.replica_log(12, 1) == run.folder / "tft-12_1.out"
    assert Run.of(12, folder=tmp_path).log(0) == tmp_path / "tft-12_0.out"
    assert run.reader(1) is run.reader(1) and run.steps(1) is run.steps(1)  # one per log
    run.folder.mkdir(parents=True)
    run.log(0).write_text(BANNER0 + "step: 3  loss: 2.0\n")
    assert run.summaries([0, 1]) == {0: run.summary(0), 1: run.summary(1)}
    assert run.summaries([0])[0].last_step == 3 and not run.summary(1).exists
