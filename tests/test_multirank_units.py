"""Replicas of several ranks (GPUS_PER_NODE > 1 on CPU), without processes: the plan, the
FSDP-over-gloo fix, one rank's kill (plan, selection, event), status's ranks, checksums
compared rank by rank."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from ftslurm import event_log, failure, failure_plan
from ftslurm import status as st
from ftslurm.errors import UserError
from ftslurm.failure_plan import KillSelection, Target
from ftslurm.replica import plan as planlib
from ftslurm.replica.worker import checksum, fixes
from ftslurm.report import events
from tests.clirun import invoke

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
TWO_RANKS = {"DEVICE": "cpu", "GPUS_PER_NODE": "2", "FTSLURM_REPLICA_ID": "1",
             "FTSLURM_GROUP_SIZE": "2", "FTSLURM_RUN_ID": "r",
             "TORCHFT_LIGHTHOUSE": "http://login-0:29510"}  # fmt: skip


# ---------------------------------------------------------------- the plan


def test_cpu_replica_of_two_ranks_runs_torchrun_with_fsdp_across_them() -> None:
    p = planlib.build_ft_plan(TWO_RANKS, ROOT, ["torchrun"], python=["python3"])
    assert p.argv[:8] == ["torchrun", "--nnodes=1", "--nproc_per_node=2", "--rdzv_backend=c10d",
                          "--rdzv_endpoint=localhost:0", "--rdzv_id=tft_r_1", "-m",
                          planlib.TRAIN_MODULE]  # fmt: skip
    assert "--parallelism.data_parallel_shard_degree=2" in p.argv
    assert "--fault_tolerance.process_group=gloo" in p.argv
    # torchrun gives each rank its RANK / WORLD_SIZE: none of the one-rank env
    assert not {"RANK", "WORLD_SIZE", planlib.WORKER_STORE_ENV} & set(p.env)
    assert p.env["FTSLURM_DEVICE"] == "cpu" and p.env["OMP_NUM_THREADS"] == "1"


def test_one_rank_on_cpu_still_skips_torchrun() -> None:
    p = planlib.build_ft_plan({**TWO_RANKS, "GPUS_PER_NODE": "1"}, ROOT, ["torchrun"],
                              python=["python3"])  # fmt: skip
    assert p.argv[:4] == ["python3", "-u", "-m", planlib.TRAIN_MODULE]


def test_classic_cpu_job_and_tiny_preset_keep_one_rank() -> None:
    with pytest.raises(UserError, match="one rank per node"):
        planlib.build_classic_plan({"DEVICE": "cpu", "GPUS_PER_NODE": "2", "SLURM_NNODES": "2",
                                    "FTSLURM_RUN_ID": "c"}, ROOT, "head")  # fmt: skip
    with pytest.raises(UserError, match="unset GPUS_PER_NODE"):
        planlib.build_ft_plan({**TWO_RANKS, "FTSLURM_PRESET": "tiny"}, ROOT)


# ---------------------------------------------------------------- fix 10: FSDP over gloo


class _Sharded:
    def __init__(self) -> None:
        self.forced: list[bool] = []

    def set_force_sum_reduction_for_comms(self, on: bool) -> None:
        self.forced.append(on)


@pytest.mark.parametrize("device, forced", [("cpu", [True]), ("cuda", [])])
def test_fully_shard_forces_sum_only_on_a_cpu_mesh(device: str, forced: list[bool]) -> None:
    calls = []

    def fully_shard(module, **kwargs):
        calls.append((module, kwargs))
        return module

    wrapped = fixes.force_sum_on_cpu(fully_shard)
    module = _Sharded()
    mesh = types.SimpleNamespace(device_type=device)
    assert wrapped(module, mesh=mesh, reshard_after_forward=True) is module
    assert calls == [(module, {"mesh": mesh, "reshard_after_forward": True})]
    assert module.forced == forced
    assert fixes.force_sum_on_cpu(wrapped) is wrapped  # applied once


def test_gloo_fsdp_fix_reaches_torchtitans_own_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtitan imports `fully_shard` by name before the fixes are applied: the fix must
    replace that binding too, not only torch's."""
    import sys

    import torch.distributed.fsdp as fsdp

    upstream = fsdp.fully_shard
    fake = types.ModuleType("torchtitan.models.fake.parallelize")
    fake.fully_shard = upstream  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(fsdp, "fully_shard", upstream)
    fixes.fix_gloo_fsdp()
    assert fsdp.fully_shard is not upstream and fsdp.fully_shard.__wrapped__ is upstream
    assert fake.fully_shard is fsdp.fully_shard
    assert "gloo_fsdp" in fixes.SWITCHES and any(f.name == "gloo_fsdp" for f in fixes.FIXES)


# ---------------------------------------------------------------- one rank's kill

TARGET = Target(node="worker-1", job=12, replica=1, raw_job_id=14, rank=1)


def test_rank_kill_on_a_cluster_selects_the_rank_by_its_environment() -> None:
    plan = failure_plan.make_plan("kill", TARGET, kill=KillSelection(local=False))
    [action] = plan.actions
    assert action.kind == "kill-srun"
    assert action.argv[-5:] == ("sh", "-c", failure_plan.KILL_RANK_ON_NODE, "ftslurm-kill",
                                failure_plan.TRAIN_CMD_RE)[-4:] + ("1",)  # fmt: skip
    assert 'grep -qx "RANK=$2"' in failure_plan.KILL_RANK_ON_NODE
    assert plan.to_dict()["rank"] == 1
    assert TARGET.describe() == "rank 1 of replica 1 of job 12 on worker-1"


@pytest.mark.parametrize("mode", ["node-down", "requeue", "hang", "freeze-node"])
def test_rank_is_refused_for_modes_that_hit_the_whole_replica(mode: str) -> None:
    with pytest.raises(UserError, match="only with --mode kill"):
        failure_plan.make_plan(mode, TARGET, kill=KillSelection(local=False))


def test_local_selection_takes_only_the_ranks_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = ["/usr/bin/python3", "-u", "-m", "ftslurm.replica.worker.train", "--x"]
    table = {101: (worker, {"SLURM_JOB_ID": "14", "RANK": "0"}),
             102: (worker, {"SLURM_JOB_ID": "14", "RANK": "1"}),
             103: (worker, {"SLURM_JOB_ID": "99", "RANK": "1"}),  # another job's
             104: (["torchrun", "-m", "ftslurm.replica.worker.train"], {"SLURM_JOB_ID": "14"})}
    monkeypatch.setattr(failure.procs, "pids_in_uts_ns", lambda ns: list(table))
    monkeypatch.setattr(failure.procs, "cmdline", lambda pid: table[pid][0])
    monkeypatch.setattr(failure, "_environ", lambda pid: table[pid][1])
    monkeypatch.setattr(failure, "_comm", lambda pid: "python3")
    assert failure.find_local_workers("ns", 14, rank=1).pids == (102,)
    assert failure.find_local_workers("ns", 14).pids == (101, 102)
    with pytest.raises(UserError, match="no training worker of rank 3 of job 12_1"):
        failure_plan.make_plan("kill", Target("worker-1", 12, 1, 14, rank=3),
                               kill=failure.find_local_workers("ns", 14, rank=3))


def test_rank_kill_event_round_trips_and_bad_ranks_are_dropped(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    event_log.append_event(event_log.InjectedEvent("2026-11-27T18:00:00.000+00:00", "kill", 1,
                                             "worker-1", "12", "SIGKILL", rank=1), log)
    [line] = log.read_text().splitlines()
    assert json.loads(line)["rank"] == 1
    assert event_log.parse_event_line(line).rank == 1
    stats = events.ParseStats()
    [ev] = list(events.iter_event_log(log, stats))
    assert (ev.detail, ev.replica, ev.rank) == ("kill", "1", 1)
    for bad in ('"1"', "true", "-1", "1.5", "1" * 30):
        parsed = event_log.parse_event_line(line.replace('"rank": 1', f'"rank": {bad}'))
        assert parsed is not None and parsed.rank is None, bad
    # no rank: the whole replica, and no key written
    plain = event_log.InjectedEvent("2026-11-27T18:00:00.000+00:00", "kill", 1).to_json_line()
    assert "rank" not in json.loads(plain)


def test_cli_refuses_rank_without_kill() -> None:
    r = invoke("simulate-failure", "--replica", "1", "--rank", "1", "--mode", "node-down",
               "--dry-run")  # fmt: skip
    assert isinstance(r.exception, UserError) and r.exception.exit_code == 2  # main: one line
    assert "only with --mode kill" in str(r.exception)


# ---------------------------------------------------------------- status


BANNER = "[2026-11-27 18:00:00]  launching replica 1 (attempt 0) on worker-1\n"
COMMAND = "command: torchrun --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d -m x\n"


def _commit(rank: int, step: int) -> str:
    return (f"[titan] 2026-11-27 18:00:{step:02d},000 - torchft.manager - INFO - "
            f"[torchtitan_ft_1:ab-cd/{rank} - step {step}] should_commit=True "
            "enough_replicas=True, errored=None\n")  # fmt: skip


def test_status_counts_the_ranks_that_commit() -> None:
    both = BANNER + COMMAND + _commit(0, 5) + _commit(1, 5) + _commit(0, 6)
    s = st.summarize_tail(both)
    assert (s.ranks, s.ranks_alive) == (2, 2)  # rank 1 a step behind is alive
    assert st.summarize_tail(BANNER + COMMAND).ranks_alive is None  # not committed yet
    one = BANNER + COMMAND + _commit(0, 5) + _commit(1, 5) + _commit(0, 6) + _commit(0, 7)
    assert st.summarize_tail(one).ranks_alive == 1
    exited = both + "[2026-11-27 18:00:09]  torchrun exited with code 1\n"
    assert st.summarize_tail(exited).ranks_alive == 0
    # the banner out of the tail: the ranks seen say how many
    assert st.summarize_tail(_commit(0, 5) + _commit(1, 5)).ranks == 2


def test_status_table_shows_ranks_only_for_replicas_of_several() -> None:
    def row(ranks: int, alive: int | None) -> st.Row:
        return st.Row(0, "RUNNING", "", "worker-0", 0, 0, 5, 1.0, 1.0, 13, "", ranks=ranks,
                      ranks_alive=alive)  # fmt: skip

    lines = st.render_table(12, [row(2, 2), row(2, None)], None).splitlines()
    assert lines[1].split()[:3] == ["REPLICA", "STATE", "RANKS"]
    assert lines[2].split()[2] == "2/2" and lines[3].split()[2] == "-/2"
    assert "RANKS" not in st.render_table(12, [row(1, 1)], None)


# ---------------------------------------------------------------- checksums rank by rank


def test_checksums_are_compared_rank_k_with_rank_k() -> None:
    def line(replica: int, rank: int, sha: str) -> str:
        return checksum.format_line(replica, rank, 12, 12, "model", 30, sha * 64)

    a = list(checksum.parse([line(0, 0, "a"), line(0, 1, "b")]))
    same = list(checksum.parse([line(1, 1, "b"), line(1, 0, "a")]))
    swapped = list(checksum.parse([line(1, 0, "b"), line(1, 1, "a")]))
    assert checksum.compare(a, same) == ([(0, 12, "model"), (1, 12, "model")], [])
    pairs, bad = checksum.compare(a, swapped)
    assert len(pairs) == 2 and bad == [(0, 12, "model"), (1, 12, "model")]


@pytest.mark.process
def test_the_cluster_rank_kill_script_kills_only_that_rank() -> None:
    """KILL_RANK_ON_NODE as srun runs it on a node (`sh -c SCRIPT name REGEX RANK`), on two
    stand-in workers told apart only by their RANK; exit 1 when nothing matched."""
    import os
    import random
    import subprocess

    marker = f"{random.randrange(10**6, 10**7)}.5"  # a command line nothing else has
    workers = [subprocess.Popen(["sleep", marker], env={**os.environ, "RANK": str(r)})
               for r in (0, 1)]  # fmt: skip
    try:
        script = ["sh", "-c", failure_plan.KILL_RANK_ON_NODE, "ftslurm-kill",
                  rf"^sleep {marker}$"]  # fmt: skip
        assert subprocess.run([*script, "1"], timeout=30).returncode == 0
        assert workers[1].wait(timeout=10) == -9
        assert workers[0].poll() is None  # rank 0 untouched
        assert subprocess.run([*script, "7"], timeout=30).returncode == 1  # no rank 7
    finally:
        for w in workers:
            w.kill()
            w.wait()
