"""Replicas of two ranks on the real local Slurm with the real FT script (DEVICE=cpu
GPUS_PER_NODE=2: torchrun, the debug model FSDP-sharded across the ranks, torchft's Manager
on each rank, the real Lighthouse): replica 1 loses its node and heals, then one rank of
replica 0 is killed and that whole replica comes back and heals; after each heal the
replicas hold the same parameters rank k by rank k, and the report counts exactly one
failure and one recovery for each replica, however many ranks log torchft's lines.
Slow: marked `training`. Run under the heavy lock:
`flock /tmp/ftslurm-heavy.lock pytest tests/test_multirank_slurm.py`.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from ftslurm import lighthouse
from ftslurm.replica.worker import checksum
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.ftjob import ROOT, cancel, failure_excerpt, ft_test_env, resume_all_nodes, submit_ft

pytestmark = [pytest.mark.slurm, pytest.mark.training]

RANKS = 2
# a smaller batch than the preset's: four ranks share the machine's two cores
SMALL = "--training.local_batch_size=2 --training.seq_len=128"
COMMITTED = re.compile(r"/(\d+) - step \d+\] should_commit=True")  # torchft, each rank
STEP = re.compile(r"step:\s+(\d+)\s+loss:")
STARTUP_HEAL = re.compile(r" - step (\d+)\] Loaded state dict")


def _last_step(text: str) -> int:
    steps = STEP.findall(text)
    return int(steps[-1]) if steps else -1


def _identical_after(after: str, peer: str) -> list[checksum.Key] | None:
    """The (rank, step, scope) checksums the healed replica logged after `after`'s start and
    its peer logged too, once there are two for every rank; None before. Mismatches raise."""
    both, bad = checksum.compare(checksum.parse(after.splitlines()),
                                 checksum.parse(peer.splitlines()))  # fmt: skip
    assert not bad, f"replicas differ at (rank, step, scope) {bad}"
    per_rank = Counter(rank for rank, _, _ in both)
    return both if all(per_rank[r] >= 2 for r in range(RANKS)) else None


@pytest.mark.timeout(420)
def test_two_ranks_per_replica_heal_after_a_node_down_and_a_rank_kill(slurm_cluster, tmp_path):
    outputs, lh_dir, lh, events, env = ft_test_env(tmp_path)
    job = None
    try:
        job = submit_ft(outputs, lh, replicas=2, steps=100000, GPUS_PER_NODE=RANKS,
                        FT_MODE="per-step", FTSLURM_EXTRA_ARGS=SMALL)  # fmt: skip
        run_dir = outputs / "torchft" / f"tft-{job}"
        logs = [run_dir / f"tft-{job}_{i}.out" for i in (0, 1)]

        def text(i: int) -> str:
            return logs[i].read_text(errors="replace") if logs[i].exists() else ""

        def ranks_committed(i: int, after: str = "") -> set[int]:
            """The ranks of replica i with a committed step (after the line `after`)."""
            part = text(i).split(after, 1)[-1] if after else text(i)
            return {int(r) for r in COMMITTED.findall(part)}

        # 15 steps past a late joiner's start-up heal (one replica may form the first quorum
        # alone): the report tells a start-up sync from a recovery only when the heal is more
        # than its clock slack (5 s) before the failure
        def trained_together() -> bool:
            both = text(0) + text(1)
            start = max([0, *map(int, STARTUP_HEAL.findall(both))])
            return (all(ranks_committed(i) == set(range(RANKS)) for i in (0, 1))
                    and min(_last_step(text(0)), _last_step(text(1))) >= start + 15)

        wait_for(trained_together, 240, 1, "both ranks of both replicas training together")
        assert "[ftslurm] fix gloo_fsdp: ON" in text(0)
        assert f"--nproc_per_node={RANKS}" in text(0)

        # 1. replica 1's node goes DOWN: Slurm requeues it; it heals from replica 0
        r = ftslurm("simulate-failure", "--job", str(job), "--replica", "1", "--mode",
                    "node-down", "--down-for", "5", "--wait-recovered", "--timeout", "150",
                    "--json", env=env, inherit=False, cwd=ROOT, timeout=200)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(text(1))
        assert json.loads(r.stdout)["recovered"] is True
        healed_1 = "(attempt 1)"
        wait_for(lambda: healed_1 in text(1), 30, 1, "replica 1's attempt 1 banner")
        after_1 = lambda: text(1).split(healed_1, 1)[1]  # noqa: E731
        wait_for(lambda: _identical_after(after_1(), text(0)), 180, 1,
                 "replica 1 healed, two checksummed steps per rank equal to replica 0's")

        # 2. rank 1 of replica 0 is killed: torchrun ends rank 0 too, the launcher restarts the
        # replica whole (in place: its node is fine), and it heals from replica 1
        r = ftslurm("simulate-failure", "--job", str(job), "--replica", "0", "--mode", "kill",
                    "--rank", "1", "--wait-recovered", "--timeout", "150", "--json",
                    env=env, inherit=False, cwd=ROOT, timeout=200)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(text(0))
        out = json.loads(r.stdout)
        assert (out["recovered"], out["rank"]) == (True, 1), out
        restarted = "(attempt 0, restart 1)"
        wait_for(lambda: restarted in text(0), 30, 1, "replica 0's restart banner")
        after_0 = lambda: text(0).split(restarted, 1)[1]  # noqa: E731
        assert "exited with code" in text(0).split(restarted, 1)[0]  # the whole replica ended
        wait_for(lambda: _identical_after(after_0(), text(1)), 180, 1,
                 "replica 0 healed, two checksummed steps per rank equal to replica 1's")
        assert ranks_committed(0, restarted) == set(range(RANKS))  # back whole
        st = ftslurm("status", "--json", "--no-lighthouse", "--job", str(job), env=env,
                     inherit=False, cwd=ROOT, timeout=60)  # fmt: skip
        assert st.returncode == 0, st.stderr
        tasks = json.loads(st.stdout)["tasks"]
        assert [(t["ranks"], t["ranks_alive"]) for t in tasks] == [(RANKS, RANKS)] * 2, tasks

        rep = ftslurm("report", "--json", str(run_dir), env=env, inherit=False, cwd=ROOT,
                      timeout=120)  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        data = json.loads(rep.stdout)
        failures = sorted((f["replica"], f["kind"], f["rank"]) for f in data["failures"])
        assert failures == [("0", "kill", 1), ("1", "node-down", None)], data["failures"]
        healed = Counter(x["target_replica"] for x in data["recoveries"] if x["after_failure"])
        assert healed == {"0": 1, "1": 1}, data["recoveries"]
        assert data["summary"]["failures"] == 2 and data["summary"]["recoveries"] == 2
    finally:
        if job:
            cancel(job)
        resume_all_nodes()
        lighthouse.stop(lh_dir)
