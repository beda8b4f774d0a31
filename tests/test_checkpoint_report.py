"""`ftslurm report` on restarts from a model checkpoint (report/restarts.py): the steps lost by
a restart of every replica (at most the interval) and by the time limit (0 after the final
checkpoint), and a healed replica (its peer's steps) not listed. The logs are built from the
launcher's own line formatters (logvocab) and torchtitan's step lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.report import build_report

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _step(n: int) -> str:
    return (f"[titan] 2026-11-27 10:00:{n % 60:02d},000 - root - INFO - step: {n}  loss:  7.5  "
            "grad_norm:  0.7  memory:  1.00GiB(4.20%)  tps: 2,000")  # fmt: skip


def _log(tmp: Path, replica: int, lines: list[str]) -> Path:
    p = tmp / f"tft-7_{replica}.out"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_lost_steps_for_a_failure_of_all_the_time_limit_and_a_heal(tmp_path: Path) -> None:
    # replica 0: trains 1..8 (checkpoint at 5), every replica killed; resumes at 6; trains to 9,
    # the time limit: final checkpoint at 9; resumes at 10
    r0 = [logvocab.resume_line(0, -1, None), *map(_step, range(1, 9)),
          logvocab.resume_line(0, 5, 5), *map(_step, range(6, 10)),
          logvocab.final_checkpoint_line(9, "saved"),
          "[2026-11-27 10:01:00]  " + logvocab.time_limit_line("7_0", None),
          logvocab.resume_line(0, 9, 9), _step(10)]  # fmt: skip
    # replica 1: killed alone at 4, healed from replica 0 at step 7 (no restart from disk)
    r1 = [logvocab.resume_line(1, -1, None), *map(_step, range(1, 5)),
          logvocab.resume_line(1, 0, None), _step(7)]  # fmt: skip
    files = [_log(tmp_path, 0, r0), _log(tmp_path, 1, r1)]
    rows = build_report([str(f) for f in files]).restarts
    assert rows == [
        {"replica": 0, "kind": "restart", "last_step": 8, "resumed_from": 5, "lost_steps": 3},
        {"replica": 0, "kind": "time limit", "last_step": 9, "resumed_from": 9, "lost_steps": 0},
    ]
    text = build_report([str(f) for f in files]).to_text()
    assert "replica 0: restart, resumed at step 6 from checkpoint step-5" in text
    assert "steps lost 3" in text
    assert "replica 0: time limit -> checkpoint -> requeue, resumed at step 10" in text
    assert "steps lost 0" in text


def test_the_report_reads_each_replica_log_once_even_after_a_restart_from_a_checkpoint(
        monkeypatch) -> None:  # fmt: skip
    """The restarts are found in the report's one pass (a restarts.Tracker per replica log):
    no log is opened twice (recorded runs: slurm-tft-11 has no restart; slurm-restart-in-place's
    replica 1 restarted, which restarts.py once read again)."""
    from collections import Counter

    from ftslurm import logfile
    from ftslurm.report import reader

    fixtures = Path(__file__).parent / "fixtures" / "report"
    opened: Counter[str] = Counter()

    def counting(path: Path):
        opened[Path(path).name] += 1
        return logfile.open_log(path)

    monkeypatch.setattr(reader, "open_log", counting)
    for run, want in (("slurm-tft-11", {"tft-11_0.out.gz": 1, "tft-11_1.out.gz": 1}),
                      ("slurm-restart-in-place", {"tft-1_0.out.gz": 1, "tft-1_1.out.gz": 1})):
        opened.clear()
        build_report(str(fixtures / run))
        assert {n: k for n, k in opened.items() if logvocab.parse_log_name(n)} == want, run


def _line_by_line(data: bytes, replica: int) -> list[dict]:
    from ftslurm.report.restarts import Tracker

    t = Tracker(replica)
    for line in data.split(b"\n"):
        t.line(line)
    return t.rows


@pytest.mark.parametrize("seed", range(8))
def test_the_restart_rows_do_not_depend_on_where_the_pass_cuts_the_log(tmp_path: Path,
                                                                       seed: int) -> None:
    """The one pass reads a log in chunks; only chunks with a resume or final-checkpoint line
    (or after a resume, until its first step) are read line by line, the others give only
    their last step. Cut anywhere at a line's end, the rows are those of a line-by-line read."""
    import gzip
    import random

    from ftslurm.report.restarts import Tracker

    fixtures = Path(__file__).parent / "fixtures" / "report" / "slurm-restart-in-place"
    r0 = [logvocab.resume_line(0, -1, None), *map(_step, range(1, 9)),
          logvocab.resume_line(0, 5, 5), *map(_step, range(6, 10)),
          logvocab.final_checkpoint_line(9, "saved"), logvocab.resume_line(0, 9, 9),
          _step(10), "noise loss: none", _step(11)]  # fmt: skip
    logs = [("\n".join(r0) + "\n").encode(), gzip.decompress(
        (fixtures / "tft-1_1.out.gz").read_bytes())]
    rng = random.Random(seed)
    for data in logs:
        want = _line_by_line(data, 1)
        ends = sorted(rng.sample([i + 1 for i, b in enumerate(data) if b == 10],
                                 k=min(6, data.count(b"\n"))))  # fmt: skip
        t, start = Tracker(1), 0
        for end in [*ends, len(data)]:
            t.chunk(data[start:end], end - start)
            start = end
        assert t.rows == want
    assert len(_line_by_line(logs[0], 1)) == 2  # the built log's restart and time limit
