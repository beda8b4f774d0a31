"""Replicas of two ranks with a warm spare, in DiLoCo, healing over HTTP, on the real local
Slurm with the real FT script (DEVICE=cpu GPUS_PER_NODE=2, FT_SPARES=1, FT_MODE=diloco,
FTSLURM_HEAL_TRANSPORT=http): the spare holds two warm ranks; one rank of replica 0 is killed,
the spare claims slot 0 with both its ranks and heals each rank's shard from the same rank of
replica 1, after which the two replicas hold the same parameters rank k by rank k. (Per-step FT
with the process-group transport and a restart in place: tests/test_multirank_slurm.py.)
Slow: marked `training`. Run under the heavy lock:
`flock /tmp/ftslurm-heavy.lock pytest tests/test_multirank_spare_slurm.py`.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest

from ftslurm import lighthouse, logvocab
from ftslurm.replica import slots
from ftslurm.replica.worker import checksum
from ftslurm.report import clock
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.ftjob import (
    ROOT,
    FTRun,
    cancel,
    failure_excerpt,
    ft_test_env,
    resume_all_nodes,
    submit_ft,
)

pytestmark = [pytest.mark.slurm, pytest.mark.training]

RANKS = 2
SMALL = "--training.local_batch_size=2 --training.seq_len=128"  # six ranks share two cores
COMMITTED = re.compile(r"/\d+ - step \d+\] should_commit=True")  # torchft, each rank
HEALED = re.compile(r"/(\d+) - step \d+\] Loaded state dict")  # torchft, the rank after "/"


def _heal_steps(text: str) -> set[int]:
    """The max_step of each `healing required` line (logvocab's parse, the report's)."""
    return {ev.step for line in text.splitlines()
            if (ev := logvocab.parse_line(line.encode())) is not None
            and ev.kind == logvocab.HEAL_REQUIRED and ev.step is not None}  # fmt: skip


def _cli(env: dict[str, str], *args: str, timeout: float = 200):
    return ftslurm(*args, env=env, inherit=False, cwd=ROOT, timeout=timeout)


@pytest.mark.timeout(480)
def test_a_spare_of_two_ranks_takes_a_rank_killed_replica_and_heals_each_shard_over_http(
        slurm_cluster, tmp_path):  # fmt: skip
    outputs, lh_dir, lh, events, env = ft_test_env(tmp_path)
    job = None
    try:
        job = submit_ft(outputs, lh, replicas=3, steps=100000, FT_SPARES=1,
                        GPUS_PER_NODE=RANKS, FT_MODE="diloco", FTSLURM_HEAL_TRANSPORT="http",
                        FTSLURM_EXTRA_ARGS=SMALL)  # fmt: skip
        run = FTRun(job, outputs, lh, lh_dir)
        root = slots.slots_dir(run.run_dir)
        # two outer syncs committed by both ranks of both replicas past any start-up heal (a
        # late joiner's first sync) before the failure: the spare then heals from a replica
        # past torchft step 0, as in a run under way, and the report does not take a start-up
        # heal within its clock slack of the failure for a recovery
        def synced() -> bool:
            def commits_after_heal(text: str) -> int:
                cut = max((m.end() for m in HEALED.finditer(text)), default=0)
                return len(COMMITTED.findall(text[cut:]))

            return all(commits_after_heal(run.text(i)) >= 2 * RANKS for i in (0, 1))

        wait_for(synced, 300, 1, "two committed outer syncs on both replicas")
        # the failure comes more than the report's clock slack after the start-up heals: the
        # report counts a heal within the slack before a failure as a recovery from it
        time.sleep(clock.SLACK_S + 0.5)
        wait_for(lambda: "spare (task 2): warm" in run.text(2), 180, 0.5, "the spare warm")
        assert f"--nproc_per_node={RANKS}" in run.text(2) and run.steps(2) == []

        survivor_at = len(run.text(1))
        r = _cli(env, "simulate-failure", "--job", str(job), "--replica", "0", "--mode", "kill",
                 "--rank", "1", "--wait-recovered", "--timeout", "150", "--json")  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(run.text(0))
        assert json.loads(r.stdout)["rank"] == 1

        def taken() -> slots.Claim | None:
            c = slots.current(root, 0)
            return c if c is not None and c.epoch == 1 else None

        claim = wait_for(taken, 120, 0.2, "a claim of slot 0 at epoch 1")
        assert (claim.task, claim.previous_task) == (2, 0)
        after = lambda: run.text(2).split("taken from task 0", 1)[-1]  # noqa: E731

        def identical() -> list[checksum.Key] | None:
            both, bad = checksum.compare(checksum.parse(after().splitlines()),
                                         checksum.parse(run.text(1).splitlines()))  # fmt: skip
            assert not bad, f"replicas differ at (rank, step, scope) {bad}"
            per_rank = Counter(rank for rank, _, _ in both)
            return both if all(per_rank[k] >= 2 for k in range(RANKS)) else None

        wait_for(identical, 240, 1, "the spare healed, two checksummed syncs per rank equal")
        assert "[ftslurm] heal transport: HTTPTransport" in run.text(2), run.text(2)[-2000:]
        # both of the spare's ranks heal their own shard from the peer
        assert {int(k) for k in HEALED.findall(after())} == set(range(RANKS))

        rep = _cli(env, "report", "--json", str(run.run_dir), timeout=120)
        assert rep.returncode == 0, rep.stderr
        data = json.loads(rep.stdout)
        assert [(f["replica"], f["kind"], f["rank"]) for f in data["failures"]] == [
            ("0", "kill", 1)], data["failures"]  # fmt: skip
        healed = Counter(x["target_replica"] for x in data["recoveries"] if x["after_failure"])
        # the survivor heals too where it did not commit a sync that the new replica committed
        # (a step it failed itself, e.g. `[ftslurm] peer watch: not committing`): the report
        # counts each such heal once, as its log says it, however many ranks logged it
        survivor = run.text(1)[survivor_at:]
        own = len(_heal_steps(survivor))
        expected = Counter({"0": 1, "1": own}) if own else Counter({"0": 1})
        why = [ln for ln in survivor.splitlines() if "healing required" in ln or "peer watch" in ln
               or "should_commit=False" in ln]  # fmt: skip
        assert healed == expected, (data["recoveries"], why[-20:])
    finally:
        if job:
            cancel(job)
        resume_all_nodes()
        lighthouse.stop(lh_dir)
