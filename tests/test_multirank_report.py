"""The report, status and checksums on the recorded logs of a real run of 2 replicas x 2 ranks
on the local Slurm (tests/fixtures/multirank/slurm-2x2-tft-1, README there): replica 1's node
went DOWN and it healed after a requeue; rank 1 of replica 0 was SIGKILLed and the whole
replica restarted in place and healed. Every rank logs its own torchft lines: the report must
count one failure and one recovery per replica whatever the order of the ranks' lines, and
however many ranks log them. The fixture is never edited; the variants are written to
tmp_path."""

from __future__ import annotations

import gzip
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ftslurm import status as st
from ftslurm.replica.worker import checksum
from ftslurm.report import build_report

pytestmark = pytest.mark.unit

RUN = Path(__file__).resolve().parent / "fixtures" / "multirank" / "slurm-2x2-tft-1"
LOGS = ("tft-1_0.out.gz", "tft-1_1.out.gz")
RANK_LINE = re.compile(r"(torchtitan_ft_\d+:[0-9a-f-]+)/(\d+) - step ")


def _lines(name: str) -> list[str]:
    with gzip.open(RUN / name, "rt", errors="replace") as fh:
        return fh.read().splitlines(keepends=True)


def _rank(line: str) -> int | None:
    m = RANK_LINE.search(line)
    return int(m.group(2)) if m else None


def _rank_1_first(lines: list[str]) -> list[str]:
    """Within each stretch of consecutive per-rank torchft lines, rank 1's lines come first
    (each rank's own order kept)."""
    out: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if _rank(line) is not None:
            run.append(line)
            continue
        out += sorted(run, key=lambda x: -(_rank(x) or 0))  # stable: each rank's order kept
        run = []
        out.append(line)
    return out[:-1]


def _rank_0_only(lines: list[str]) -> list[str]:
    """As a replica of one rank logs it: rank 1's torchft lines gone."""
    return [line for line in lines if _rank(line) != 1]


def _four_ranks(lines: list[str]) -> list[str]:
    """As a replica of four ranks logs it: after each rank-1 line, ranks 2 and 3 say the
    same."""
    out = []
    for line in lines:
        out.append(line)
        if _rank(line) == 1:
            out += [RANK_LINE.sub(lambda m, r=r: f"{m.group(1)}/{r} - step ", line)
                    for r in (2, 3)]  # fmt: skip
    return out


def _variant(tmp_path: Path, change: Callable[[list[str]], list[str]]) -> Path:
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    for name in LOGS:
        with gzip.open(run / name, "wt") as fh:
            fh.writelines(change(_lines(name)))
    return run


@pytest.mark.parametrize("change", [None, _rank_1_first, _rank_0_only, _four_ranks])
def test_one_failure_and_one_recovery_per_replica(tmp_path: Path, change) -> None:
    run = RUN if change is None else _variant(tmp_path, change)
    data = build_report(str(run)).to_json()
    failures = sorted((f["replica"], f["kind"], f["rank"]) for f in data["failures"])
    # replica 1's node went down (the whole replica); replica 0 lost its rank 1
    assert failures == [("0", "kill", 1), ("1", "node-down", None)], data["failures"]
    healed = Counter((r["target_replica"], r["source_replica"]) for r in data["recoveries"]
                     if r["after_failure"])  # fmt: skip
    assert healed == {("1", "0"): 1, ("0", "1"): 1}, data["recoveries"]
    summary = data["summary"]
    assert (summary["failures"], summary["recoveries"]) == (2, 2), summary
    assert (summary["requeues"], summary["restarts_in_place"]) == (1, 1), summary
    # each failure made the survivor fail one commit: logged by each of its ranks, one here
    assert summary["commit_failures"] == 2, summary
    # one commit decision per replica and step, however many ranks logged it
    assert (summary["steps_attempted"], summary["steps_committed"]) == (50, 50), summary
    assert summary["steps_by_replica"]["0"]["attempted"] == 34, summary["steps_by_replica"]


def test_the_report_text_says_which_rank_died() -> None:
    text = build_report(str(RUN)).to_text()
    assert "injected kill: rank 1 of replica 0 on worker-0" in text
    assert "replica 0 at step 31 (kill, rank 1)" in text
    assert "replica 1 at step 1 (node-down) at" in text


def test_replicas_agree_rank_by_rank_at_every_step_both_logged() -> None:
    a, b = (list(checksum.parse(_lines(name))) for name in LOGS)
    assert Counter(r.rank for r in a) == {0: 34, 1: 34}  # each rank its own shard's line
    both, bad = checksum.compare(a, b)
    assert len(both) == 12 and not bad, bad
    assert {rank for rank, _, _ in both} == {0, 1}
    # the ranks' shards differ: comparing across ranks would be wrong
    by_rank = checksum.by_key(a)
    step = max(s for r, s, _ in both if r == 0)
    assert by_rank[(0, step, "model")] != by_rank[(1, step, "model")]


@pytest.mark.parametrize("name", LOGS)
def test_status_reads_the_ranks_of_a_replica(name: str) -> None:
    s = st.summarize_tail("".join(_lines(name)))
    assert (s.ranks, s.ranks_alive) == (2, 2)  # the tail ends as the job was cancelled
    cut = "".join(_rank_0_only(_lines(name)))
    assert st.summarize_tail(cut).ranks_alive == 1  # rank 1 stopped committing
