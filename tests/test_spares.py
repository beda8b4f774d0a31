"""Warm spares outside the worker: the launcher's slot decision, the banner and its parser,
`ftslurm status`'s slot column, `submit --spares`, the plan's layout and the demo plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import logvocab, submission
from ftslurm import status as st
from ftslurm.commands import submit
from ftslurm.demo import DemoConfig, _replica_env, plan_lines
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from ftslurm.replica import slots
from ftslurm.replica.launcher import job
from ftslurm.slurm.parse import JobInfo
from tests.clirun import ftslurm
from tests.ftjob import KNOB_ENV_RE

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _env(tmp_path: Path, task: int, count: int = 3, spares: str = "1") -> dict[str, str]:
    return {"SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_ARRAY_TASK_COUNT": str(count), "FT_SPARES": spares, "DEVICE": "cpu",
            "FTSLURM_OUTPUTS": str(tmp_path),
            "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1"}  # fmt: skip


def test_slot_layout_group_is_the_array_minus_the_spares(tmp_path: Path) -> None:
    assert planlib.slot_layout(_env(tmp_path, 2)) == (2, 2, 1)
    assert planlib.slot_layout(_env(tmp_path, 0, spares="0")) is None
    with pytest.raises(UserError, match="FT_SPARES=3 leaves no replica to train in an array of 3"):
        planlib.slot_layout(_env(tmp_path, 0, spares="3"))
    # SkyPilot: the YAML says the group size (nodes - spares) and the task (node rank)
    sky = {"FT_SPARES": "1", "FTSLURM_TASK": "2", "FTSLURM_GROUP_SIZE": "2"}
    assert planlib.slot_layout(sky) == (2, 2, 1)


def test_slot_env_claims_home_slots_then_spares_and_a_fenced_task_claims_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout0 = planlib.slot_layout(_env(tmp_path, 0))
    e0 = job.slot_env(_env(tmp_path, 0), tmp_path, layout0)
    assert (e0["FTSLURM_REPLICA_ID"], e0["FTSLURM_SLOT_EPOCH"], e0["FTSLURM_TASK"]) == (
        "0", "0", "0")  # fmt: skip
    assert e0["FTSLURM_SLOTS_DIR"] == str(tmp_path / "torchft" / "tft-42" / "slots")
    e2 = job.slot_env(_env(tmp_path, 2), tmp_path, planlib.slot_layout(_env(tmp_path, 2)))
    assert e2["FTSLURM_SPARE"] == "1" and "FTSLURM_SLOT_EPOCH" not in e2
    said = capsys.readouterr().out
    assert "slots: task 2 is beyond the group size 2: starting as a spare" in said
    # the requeued task 0 takes its slot back at the next epoch
    again = job.slot_env(_env(tmp_path, 0), tmp_path, layout0)
    assert again["FTSLURM_SLOT_EPOCH"] == "1"
    # fenced: waits as a spare without claiming
    fenced = job.slot_env(_env(tmp_path, 0), tmp_path, layout0, spare_only=True)
    assert fenced["FTSLURM_SPARE"] == "1"
    assert slots.epochs(Path(e0["FTSLURM_SLOTS_DIR"]), 0) == [0, 1]


def test_plan_and_banner_of_a_spare_and_of_a_slot_holder(tmp_path: Path) -> None:
    spare = planlib.build_ft_plan({**_env(tmp_path, 2), "FTSLURM_TASK": "2", "FTSLURM_SPARE": "1",
                                   "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "2"},
                                  tmp_path)  # fmt: skip
    assert spare.spare and spare.task == 2 and spare.env["FTSLURM_SPARE"] == "1"
    # the rendezvous id is the task's, not the slot's (a spare and a holder may share a node):
    # torchrun's --rdzv_id, or its env when the launcher runs the one rank itself
    assert spare.env["TORCHELASTIC_RUN_ID"] == "tft_42_task2"
    with_torchrun = planlib.build_ft_plan(
        {**_env(tmp_path, 2), "FTSLURM_TASK": "2", "FTSLURM_SPARE": "1", "FTSLURM_REPLICA_ID": "0",
         "FTSLURM_GROUP_SIZE": "2", "FTSLURM_SKIP_TORCHRUN": "0"}, tmp_path)  # fmt: skip
    assert "--rdzv_id=tft_42_task2" in with_torchrun.argv
    line = logvocab.banner("2026-11-25 18:00:00", spare, "worker-2")
    assert line == "[2026-11-25 18:00:00]  launching spare (attempt 0) on worker-2 as task 2"
    assert logvocab.parse_line(line.encode()) is None  # not a replica's attempt for the report
    holder = planlib.build_ft_plan({**_env(tmp_path, 2), "FTSLURM_TASK": "2",
                                    "FTSLURM_REPLICA_ID": "1", "FTSLURM_SLOT_EPOCH": "3",
                                    "FTSLURM_GROUP_SIZE": "2"}, tmp_path)  # fmt: skip
    line = logvocab.banner("2026-11-25 18:00:00", holder, "worker-2")
    assert line.endswith("launching replica 1 (attempt 0) on worker-2 as task 2 (slot epoch 3)")


def test_the_claim_banner_names_slot_task_and_previous_task() -> None:
    line = logvocab.slot_banner("2026-11-25 18:00:35", 1, 0, "worker-2", 2, 1, taken_from=1)
    assert line == ("[2026-11-25 18:00:35]  launching replica 1 (attempt 0) on worker-2 as task 2 "
                    "(slot epoch 1, taken from task 1)")  # fmt: skip
    ev = logvocab.parse_line(line.encode())
    assert ev is not None and ev.kind == logvocab.LAUNCH
    assert (ev.replica, ev.rank, ev.node) == ("1", 0, "worker-2")
    assert ev.detail == "task 2 epoch 1 taken from task 1"
    # the old shape still parses as before
    old = logvocab.parse_line(b"[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on w-0")
    assert old is not None and (old.replica, old.rank, old.detail) == ("1", 1, "")


def test_count_banners_counts_a_spare_start_as_an_attempt(tmp_path: Path) -> None:
    log = tmp_path / "tft-1_1.out"
    log.write_text("[2026-11-25 18:00:15]  launching replica 1 (attempt 0) on w-1 as task 1 "
                   "(slot epoch 0)\nstep: 1  loss: 8.0\n"
                   "[2026-11-25 18:00:38]  launching spare (attempt 1) on w-1 as task 1\n"
                   )  # fmt: skip
    assert logvocab.count_banners(log) == 2


def _job(task: int, state: str = "RUNNING") -> JobInfo:
    return JobInfo(100 + task, 7, task, state, node=f"worker-{task}")


def test_status_shows_the_slot_column_only_for_runs_with_spares() -> None:
    jobs = [_job(0), _job(1), _job(2)]
    rows = st.build_rows(jobs, 7, {}, 0.0, {0: "0", 1: "spare", 2: "1"})
    assert [r.slot for r in rows] == ["0", "spare", "1"]
    table = st.render_table(7, rows, None).splitlines()
    assert table[1].split()[:3] == ["TASK", "SLOT", "STATE"]
    assert table[3].split()[:3] == ["1", "spare", "RUNNING"]
    assert st.to_json(7, rows, None)["tasks"][2]["slot"] == "1"
    plain = st.build_rows(jobs, 7, {}, 0.0)
    assert st.render_table(7, plain, None).splitlines()[1].split()[0] == "REPLICA"
    assert "slot" not in st.to_json(7, plain, None)["tasks"][0]
    # a task that never claimed (a spare from the start) is a spare
    assert st.build_rows(jobs, 7, {}, 0.0, {0: "0", 1: "1"})[2].slot == "spare"


def test_task_slots_and_claim_lines(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "w-0", 1, 1.0)
    slots.try_claim(root, 1, 0, 1, "w-1", 1, 1.0)
    slots.try_claim(root, 1, 1, 2, "w-2", 1, 2.0, previous_task=1)
    assert slots.task_slots(root) == {0: "0", 1: "spare", 2: "1"}
    assert slots.task_slots(tmp_path / "none") is None
    lines = slots.claim_lines(slots.history(root, 2))
    assert lines[-1].startswith("claim: slot 1 epoch 1 by task 2 on w-2 at ")
    assert lines[-1].endswith(", taken from task 1")


def test_submit_refuses_spares_that_leave_no_replica() -> None:
    assert submit.array_size(["--array=0-2"]) == 3
    assert submit.array_size(["--array", "0,1,5%2"]) == 3
    assert submit.array_size(["--array=0-9:2"]) is None
    submission.check_spares(["--array=0-2"], 1)
    with pytest.raises(UserError, match="--spares 2 with an array of 2 task"):
        submission.check_spares(["--array=0-1"], 2)


@pytest.mark.process
def test_submit_spares_mistake_is_one_error_line(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parent.parent / "llama3.1-8b-pretraining-torchft.sh"
    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    r = ftslurm("submit", "--spares", "2", "--array=0-1", str(script), cwd=tmp_path,
                env={**env, "FTSLURM_OUTPUTS": str(tmp_path / "out"),
                     "PYTHONPATH": str(script.parent)}, inherit=False)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "Error: --spares 2 with an array of 2 task(s) leaves no replica to train: use "
        "--array=0-<N-1+2> (N replicas plus 2 spare(s))"]  # fmt: skip


def test_demo_plan_with_spares() -> None:
    lines = plan_lines(DemoConfig(spares=1, backend="slurm", failures=1))
    assert "ftslurm cluster up --nodes 3   (local Slurm: slurmctld + 3 slurmd nodes)" in lines
    assert any("ftslurm submit --spares 1 --array=0-2" in x for x in lines)
    assert any("a warm spare claims the slot and heals" in x for x in lines)
    with pytest.raises(UserError, match="--spares must be 0 or more"):
        DemoConfig(spares=-1, backend="local").validate()


def test_demo_lighthouse_needs_a_majority_from_three_replicas() -> None:
    """The demo's Lighthouse follows docs/cluster.md's advice: --min-replicas above half from 3
    replicas (3 and 2 spares: 2), the default 1 for 2; the failure line counts survivors."""
    from ftslurm.lighthouse.config import safe_min_replicas

    assert [safe_min_replicas(n) for n in (1, 2, 3, 4, 5, 8, 64)] == [1, 1, 2, 3, 3, 5, 33]
    two = plan_lines(DemoConfig(backend="slurm", failures=1))
    assert "--min-replicas" not in two[2] and "; survivor commits alone; " in two[5], two
    three = plan_lines(DemoConfig(replicas=3, spares=2, backend="slurm", failures=1))
    assert three[2].endswith("(its own state dir) --min-replicas 2"), three
    assert "; the other 2 commit without it; " in three[5], three


def test_demo_modes_pacing_and_heartbeat_in_the_plan() -> None:
    cfg = DemoConfig(backend="slurm", failures=3, modes=("kill", "requeue", "node-down"),
                     every=60, heartbeat_timeout_ms=2000, down_for=5)  # fmt: skip
    cfg.validate()
    lines = plan_lines(cfg)
    assert [cfg.mode(k) for k in range(4)] == ["kill", "requeue", "node-down", "kill"]
    fails = [x for x in lines if x.startswith("failure ")]
    assert fails[0].startswith("failure 1/3: ftslurm simulate-failure --replica 1 --mode kill;")
    assert fails[1].startswith("failure 2/3 (at least 60 s after the previous one's turn): "
                               "ftslurm simulate-failure --replica 1 --mode requeue;")
    assert "--mode node-down --down-for 5;" in fails[2]
    assert any(x.endswith("--heartbeat-timeout-ms 2000") for x in lines)
    assert _replica_env(cfg, "http://x:1")["FT_MAX_REQUEUES"] == "5"  # the knob's default
    assert _replica_env(DemoConfig(failures=30), "http://x:1")["FT_MAX_REQUEUES"] == "31"
    assert DemoConfig(backend="slurm").mode(0) == "node-down"
    assert DemoConfig(backend="local").mode(0) == "kill"
    with pytest.raises(UserError, match="unknown failure mode 'reboot'"):
        DemoConfig(backend="slurm", modes=("reboot",)).validate()
    with pytest.raises(UserError, match="the local backend fails a replica one way, kill"):
        DemoConfig(backend="local", modes=("kill", "requeue")).validate()
    with pytest.raises(UserError, match="--every"):
        DemoConfig(backend="local", every=-1).validate()


@pytest.mark.process
def test_demo_spares_from_ft_spares_and_mode_errors(tmp_path: Path) -> None:
    """FT_SPARES in the shell sizes the demo (it was passed to the replicas while the demo
    planned none: every replica log said 'array task is unknown'); a mode the local backend
    cannot do is one line, exit 2."""
    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    env.update(FT_SPARES="1", FTSLURM_OUTPUTS=str(tmp_path))
    r = ftslurm("demo", "--backend", "local", "--dry-run", env=env, inherit=False)
    assert r.returncode == 0, r.stderr
    assert "3 x python -m ftslurm.replica job  (DEVICE=cpu, FT_SPARES=1," in r.stdout
    r = ftslurm("demo", "--backend", "local", "--mode", "node-down", "--dry-run", env=env,
                inherit=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "Error: the local backend fails a replica one way, kill; --backend slurm for "
        "node-down, requeue, hang, stall and freeze-node"]  # fmt: skip
    assert not any(tmp_path.iterdir())


@pytest.mark.process
def test_a_holder_whose_slot_was_taken_is_fenced_before_its_next_quorum(tmp_path: Path) -> None:
    """A frozen node's worker resumes in the middle of a step, after a spare claimed its slot:
    in DiLoCo the next quorum comes inside that step, before the per-step check, and the
    Lighthouse would take it as a third member beside the spare (seen in a freeze-node bench
    run: a quorum of torchtitan_ft_0, torchtitan_ft_1:<spare>, torchtitan_ft_1:<old>). The
    quorum call is fenced too: exit 75 and the fenced file, before the Lighthouse is asked."""
    from ftslurm.replica import slots

    root = tmp_path / "slots"
    for epoch, task in ((0, 1), (1, 2)):
        assert slots.try_claim(root, 1, epoch, task, "worker-1", 1, 1.0) is not None
    fenced = tmp_path / "fenced"
    code = ("from ftslurm.replica.worker import standby; print(standby.install()); "
            "from torchft.manager import Manager; Manager.start_quorum(object()); "
            "print('asked the Lighthouse')")  # fmt: skip
    env = {**os.environ, "FTSLURM_SLOTS_DIR": str(root), "FTSLURM_REPLICA_ID": "1",
           "FTSLURM_SLOT_EPOCH": "0", "FTSLURM_FENCED_FILE": str(fenced)}  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 75, r.stdout + r.stderr
    assert ("fenced: slot 1 epoch 0 was claimed by task 2 (epoch 1); stopping before its next "
            "quorum") in r.stdout  # fmt: skip
    assert "asked the Lighthouse" not in r.stdout
    assert json.loads(fenced.read_text())["task"] == 2
