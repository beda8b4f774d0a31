"""Unit tests of simulate-failure: target resolution and refusals on recorded real `squeue
--json` output, the plan (dry-run text), the worker matcher on real command lines, the
guarded executor with fake Slurm calls (RESUME on error and on SIGINT), chaos, and the CLI
(CliRunner and the real console script for exit codes and "no traceback")."""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import failure, failure_plan
from ftslurm.cli import cli
from ftslurm.errors import UserError
from ftslurm.event_log import parse_event_line
from ftslurm.runner import Completed
from ftslurm.slurm import args
from ftslurm.slurm.parse import JobInfo, parse_squeue_json
from tests.fakeslurm import FakeSlurm

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "failure"
NODES = {"worker-0": "allocated", "worker-1": "allocated", "worker-2": "idle"}


def recorded(name: str) -> list[JobInfo]:
    return parse_squeue_json((FIX / f"{name}.json").read_text())


def resolve(jobs=None, **kw) -> failure_plan.Target:
    kw.setdefault("replica", None)
    kw.setdefault("node", None)
    kw.setdefault("job", None)
    kw.setdefault("here", "login-0")
    jobs = recorded("squeue_running") if jobs is None else jobs
    return failure_plan.resolve_target(jobs, NODES, **kw)


# ---------------------------------------------------------------- resolution (recorded output)


def test_newest_ft_job_on_recorded_squeue():
    jobs = recorded("squeue_running")
    # array task 0 is Slurm job 13, task 1 is job 12: the array id is 12
    assert {(j.array_task_id, j.job_id) for j in jobs} == {(0, 13), (1, 12)}
    assert failure_plan.newest_ft_job(jobs) == 12
    assert failure_plan.newest_ft_job(jobs, user="someone-else") is None
    older = JobInfo(5, 5, 0, "RUNNING", name="tft_replica", user="root")
    other = JobInfo(40, 40, 0, "RUNNING", name="classic", user="root")  # not FT
    done = JobInfo(30, 30, 0, "COMPLETED", name="tft_replica", user="root")
    by_path = JobInfo(20, 20, 1, "PENDING", name="x", stdout="/o/torchft/slurm-%A_%a.out")
    assert failure_plan.newest_ft_job([*jobs, older, other, done, by_path]) == 20


def test_replica_resolves_to_its_node_and_raw_job_id():
    t = resolve(replica=1)
    assert (t.node, t.job, t.replica, t.raw_job_id, t.restarts) == ("worker-1", 12, 1, 12, 0)
    assert t.task_key == "12_1"
    t0 = resolve(replica=0, job=12)
    assert (t0.node, t0.raw_job_id) == ("worker-0", 13)
    assert resolve(node="worker-0").replica == 0


def test_pending_replica_cannot_be_hit():
    with pytest.raises(UserError, match="replica 1 of job 12 is PENDING \\(BeginTime\\)"):
        resolve(recorded("squeue_node_down_pending"), replica=1)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"node": "worker-9"}, "not in the cluster"),
        ({"node": "login-0"}, "login node"),
        ({"node": "worker-2"}, "runs no task of job 12"),
        ({"node": "worker-1", "here": "worker-1.cluster.local"}, "this command runs on it"),
        ({"replica": 4}, "has no array task 4"),
        ({"replica": 1, "node": "worker-1"}, "exactly one of"),
        ({}, "exactly one of"),
    ],
)
def test_refusals(kw, message):
    with pytest.raises(UserError, match=message):
        resolve(**kw)


def test_force_allows_an_idle_node_and_no_job_means_refusal():
    assert resolve(node="worker-2", force=True) == failure_plan.Target("worker-2", job=12)
    with pytest.raises(UserError, match="runs no task of any FT job"):
        resolve([], node="worker-0")
    with pytest.raises(UserError, match="pass --job ID"):
        resolve([], replica=0)


# ---------------------------------------------------------------- the plan


def test_node_down_plan_is_printable():
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=5, reason="test it")
    assert plan.lines() == [
        "scontrol update NodeName=worker-1 State=DOWN 'Reason=test it'",
        "sleep 5",
        "scontrol update NodeName=worker-1 State=RESUME",
    ]


def test_requeue_and_kill_plans():
    t = resolve(replica=0)
    assert failure_plan.make_plan("requeue", t).lines() == ["scontrol requeue 12_0"]
    [srun] = failure_plan.make_plan("kill", t, kill=failure_plan.KillSelection(False)).actions
    assert srun.argv[:6] == ("srun", "--jobid=13", "--overlap", "--nodes=1", "--ntasks=1",
                             "--nodelist=worker-0")  # fmt: skip
    assert srun.argv[6:] == ("sh", "-c", failure_plan.PKILL_ON_NODE, "ftslurm-kill",
                             failure_plan.TRAIN_CMD_RE)  # fmt: skip
    local = failure_plan.make_plan(
        "kill", t, kill=failure_plan.KillSelection(True, (41, 42), ("41: python -u -m x",))
    )
    assert local.lines()[0].startswith("kill -KILL 41 42    # local cluster")
    with pytest.raises(UserError, match="no training worker"):
        failure_plan.make_plan("kill", t, kill=failure_plan.KillSelection(True, ()))
    idle = failure_plan.Target("worker-2", job=12)
    for mode in ("requeue", "kill"):
        with pytest.raises(UserError, match="needs a replica"):
            failure_plan.make_plan(mode, idle)


# Real command lines (from /proc of a CPU run on the local cluster)
WORKER = ["/root/.pyenv/versions/3.11.7/bin/python3", "-u", "-m", "ftslurm.replica.worker.train",
          "--job.config_file=/work/main/slurm/configs/debug_cpu.toml"]  # fmt: skip
TORCHRUN = ["/root/.pyenv/versions/3.11.7/bin/python3", "/root/.pyenv/versions/3.11.7/bin/torchrun",
            "--nnodes=1", "--nproc_per_node=1", "-m", "ftslurm.replica.worker.train"]  # fmt: skip
LAUNCHER = ["python3", "-m", "ftslurm.replica", "job"]


def test_worker_matcher_takes_workers_only():
    assert failure_plan.is_training_worker(WORKER)
    assert failure_plan.is_training_worker(["python", "-u", "-m", "torchtitan.train", "--x"])
    assert not failure_plan.is_training_worker(TORCHRUN)
    assert not failure_plan.is_training_worker(LAUNCHER)
    assert not failure_plan.is_training_worker(["slurmstepd: [12.batch]"], comm="slurmstepd")
    assert not failure_plan.is_training_worker(["/usr/sbin/slurmd", "-m",
                                                "ftslurm.replica.worker.train"])
    assert not failure_plan.is_training_worker(["python3", "-m", "ftslurm.replica.trainer"])
    assert not failure_plan.is_training_worker([])


@pytest.mark.process
def test_pkill_regex_is_posix_ere_with_the_same_meaning():
    """What the real-cluster path sends to pkill must select the same processes: checked
    with grep -E, the same regex dialect as pkill -f."""
    lines = [" ".join(c) for c in (WORKER, TORCHRUN, LAUNCHER)]
    out = subprocess.run(
        ["grep", "-E", "--", failure_plan.TRAIN_CMD_RE], input="\n".join(lines) + "\n",
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.stdout.splitlines() == [lines[0]]


@pytest.mark.process
def test_local_workers_found_by_namespace_env_and_cmdline(monkeypatch):
    me = os.getpid()
    child = subprocess.Popen(
        [sys.executable, "-u", "-m", "torchtitan.train"],
        env={**os.environ, "PYTHONPATH": str(FIX / "fakepkg"), "SLURM_JOB_ID": "4242"},
        stdout=subprocess.DEVNULL,
    )
    try:
        other = subprocess.Popen(
            [sys.executable, "-u", "-m", "torchtitan.train"],
            env={**os.environ, "PYTHONPATH": str(FIX / "fakepkg"), "SLURM_JOB_ID": "7"},
            stdout=subprocess.DEVNULL,
        )
        try:
            from ftslurm import procs

            ns = procs.uts_ns(me)
            from ftslurm.wait import wait_for

            sel = wait_for(lambda: failure.find_local_workers(ns, 4242).pids, 10, 0.05)
            assert sel == (child.pid,)  # not the other job's worker, not pytest
        finally:
            other.kill()
            other.wait()
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- the executor


def squeue_json(*tasks: tuple[int, str, int, str]) -> str:
    """The recorded `squeue --json` of array 12 with (task, state, restarts, node) changed."""
    data = json.loads((FIX / "squeue_running.json").read_text())
    for task, state, restarts, node in tasks:
        j = next(j for j in data["jobs"] if j["array_task_id"] == task)
        j.update(job_state=state, restart_cnt=restarts, nodes=node, batch_host=node)
    return json.dumps(data)


class FakeArray:
    """Slurm as a little state machine behind the fake client (real argument lists, real
    `squeue --json` parser): DOWN or a requeue makes task 1 PENDING (restarts+1), RESUME makes
    it RUNNING again (on worker-2) on the next look. `fail_on`: that State= is refused as
    Slurm refuses a non-admin."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None):
        self.state, self.restarts, self.fail_on = "RUNNING", 0, fail_on
        self.fake = FakeSlurm().on(["scontrol", "update"], self.update)
        self.fake.on(["scontrol", "requeue"], self.requeue).on(["squeue", "--json"], self.squeue)
        self.fake.install(monkeypatch)

    def update(self, cmd: list[str]) -> str | Completed:
        state = cmd[3].removeprefix("State=")
        if state == self.fail_on:
            return Completed(cmd, 1, "", "slurm_update error: Invalid user id")
        if state == "DOWN":
            self.state, self.restarts = "PENDING", self.restarts + 1
        else:
            self.state = "RESUMED"
        return ""

    def requeue(self, cmd: list[str]) -> str:
        self.state, self.restarts = "PENDING", self.restarts + 1
        return ""

    def squeue(self, cmd: list[str]) -> str:
        if self.state == "RESUMED":
            self.state = "RUNNING"
        node = "" if self.state != "RUNNING" else "worker-2" if self.restarts else "worker-1"
        return squeue_json((1, self.state, self.restarts, node))

    @property
    def scontrol(self) -> list[tuple[str, ...]]:
        """The `scontrol` calls: ('update', node, state) or ('requeue', task)."""
        return [("update", c[2].removeprefix("NodeName="), c[3].removeprefix("State="))
                if c[1] == "update" else ("requeue", c[2])
                for c in self.fake.calls if c[0] == "scontrol"]  # fmt: skip


def events(path: Path) -> list:
    return [parse_event_line(x) for x in path.read_text().splitlines()]


def test_execute_node_down_with_recovery_timeline(tmp_path, monkeypatch):
    ops, ev = FakeArray(monkeypatch), tmp_path / "ev.jsonl"
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=0.2)
    out = failure.execute(
        plan, wait_recovered=True, timeout=5, events_path=ev, poll=0.01,
        log_path=tmp_path / "none" / "x.out",
    )  # fmt: skip
    assert ops.scontrol == [("update", "worker-1", "DOWN"), ("update", "worker-1", "RESUME")]
    assert out.recovered and out.restarts == 1 and out.new_node == "worker-2"
    names = [p.name for p in out.phases]
    assert names[0] == "DOWN worker-1" and names[1].startswith("task 12_1 left RUNNING (PENDING")
    assert names[2] == "RESUME worker-1" and names[3].startswith("task 12_1 RUNNING again")
    assert all(p.took_s >= 0 for p in out.phases) and out.phases[2].took_s >= 0.2
    e = events(ev)
    assert [x.action for x in e] == ["node-down", "resume"]
    assert (e[0].replica, e[0].node, e[0].job) == (1, "worker-1", "12")
    d = json.loads(json.dumps(out.to_dict()))  # JSON-clean, and says what happened
    assert {k: v for k, v in d.items() if k != "phases"} == {
        "mode": "node-down", "node": "worker-1", "job": 12, "replica": 1,
        "recovered": True, "new_node": "worker-2", "restarts": 1, "restarted_in_place": False,
    }  # fmt: skip
    assert [p["what"] for p in d["phases"]] == names
    assert d["phases"][2]["took_s"] >= 0.2


def test_execute_resumes_when_something_fails_in_the_middle(tmp_path, monkeypatch):
    class Broken(FakeArray):
        def squeue(self, cmd):
            raise RuntimeError("squeue exploded")

    ops, ev = Broken(monkeypatch), tmp_path / "ev.jsonl"
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=30)
    with pytest.raises(RuntimeError, match="exploded"):
        failure.execute(plan, wait_recovered=True, events_path=ev)
    assert ops.scontrol[-1] == ("update", "worker-1", "RESUME")
    assert events(ev)[-1].detail == "guard: interrupted or failed"


@pytest.fixture
def hup_fails_the_test():
    """SIGHUP with a handler that fails the test, whatever this process inherited (`nohup`
    ignores it): a run that does not handle SIGHUP fails the test instead of ending pytest."""

    def unhandled(signum, frame):
        raise AssertionError("SIGHUP reached the test's handler: the run did not take it")

    old = signal.signal(signal.SIGHUP, unhandled)
    yield
    signal.signal(signal.SIGHUP, old)


@pytest.mark.parametrize("during", ["wait", "down"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_execute_resumes_on_sigint_sigterm_and_sighup(tmp_path, monkeypatch, sig, during,
                                                      hup_fails_the_test):  # fmt: skip
    """The signal is sent from inside the run, deterministically: from the first sleep of the
    DOWN window, or from inside the `scontrol update ... DOWN` call (deferred until it ends).
    SIGHUP is a closed terminal or a dropped ssh."""
    real_sleep, sent = time.sleep, []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def send_once() -> None:
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)  # Python runs the handler in this thread, right here

    class SignalledOps(FakeArray):
        def update(self, cmd):
            out = super().update(cmd)
            if during == "down" and cmd[3] == "State=DOWN":
                send_once()
            return out

    def sleep(seconds: float) -> None:
        if during == "wait":
            send_once()
        real_sleep(min(seconds, 0.01))

    monkeypatch.setattr(failure.time, "sleep", sleep)
    ops, ev = SignalledOps(monkeypatch), tmp_path / "ev.jsonl"
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=30)
    with pytest.raises(failure.Interrupted) as e:
        failure.execute(plan, events_path=ev)
    assert sent == [sig] and e.value.signum == sig
    assert ops.scontrol == [("update", "worker-1", "DOWN"), ("update", "worker-1", "RESUME")]
    assert [e.action for e in events(ev)] == ["node-down", "resume"]
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored


def test_sighup_ignored_by_nohup_stays_ignored(tmp_path, monkeypatch):
    """`nohup ftslurm simulate-failure ...` asked to outlive the terminal: the run goes on to
    its planned end, RESUME included."""
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        os.kill(os.getpid(), signal.SIGHUP)
        real_sleep(min(seconds, 0.01))

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        monkeypatch.setattr(failure.time, "sleep", sleep)
        ops = FakeArray(monkeypatch)
        failure.execute(failure_plan.make_plan("node-down", resolve(replica=1), down_for=0.05),
                        events_path=tmp_path / "ev.jsonl")  # fmt: skip
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)
    assert ops.scontrol == [("update", "worker-1", "DOWN"), ("update", "worker-1", "RESUME")]


TIMED_OUT = "slurm_update error: Socket timed out on send/recv operation"


def test_a_failed_resume_is_tried_again(tmp_path, monkeypatch):
    class FirstResumeFails(FakeArray):
        def update(self, cmd):
            if self.scontrol.count(("update", "worker-1", "RESUME")) == 1:  # the first one
                return Completed(cmd, 1, "", TIMED_OUT)
            return super().update(cmd)

    sleeps: list[float] = []
    monkeypatch.setattr(failure.time, "sleep", lambda s: sleeps.append(s))
    ops, ev, lines = FirstResumeFails(monkeypatch), tmp_path / "ev.jsonl", []
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=0)
    failure.execute(plan, say=lines.append, events_path=ev)
    assert ops.scontrol == [("update", "worker-1", "DOWN")] + [("update", "worker-1", "RESUME")] * 2
    assert lines[1] == ("RESUME worker-1 failed (`scontrol update NodeName=worker-1 State=RESUME` "
                        f"failed (exit code 1): {TIMED_OUT}); trying again in 0.5 s")  # fmt: skip
    assert sleeps == [0.5] and lines[2] == "RESUMEd worker-1"
    assert [e.action for e in events(ev)] == ["node-down", "resume"]


@pytest.mark.parametrize("interrupted", [False, True])
def test_every_resume_failing_says_the_node_is_still_down(tmp_path, monkeypatch, capsys,
                                                          interrupted):  # fmt: skip
    """RESUME keeps failing (after the planned wait, or in the guard after a Ctrl-C): the
    console script says on stderr which node is still DOWN and the command that brings it
    back, exits 1, never claims it was RESUMEd, and the event log has the failed resume."""
    from ftslurm.cli import main

    resume = args.node_update_cmd("worker-1", "RESUME")
    fake = dry_fake().on(["scontrol", "update", "NodeName=worker-1", "State=DOWN"], "")
    fake.on(resume, Completed(resume, 1, "", TIMED_OUT)).install(monkeypatch)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        if interrupted and not sleeps:
            os.kill(os.getpid(), signal.SIGINT)  # in the DOWN window
        sleeps.append(seconds)

    monkeypatch.setattr(failure.time, "sleep", sleep)
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "ev.jsonl"))
    monkeypatch.setattr(sys, "argv", ["ftslurm", "simulate-failure", "--replica", "1",
                                      "--down-for", "30" if interrupted else "0"])  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    assert e.value.code == 1
    assert err.splitlines()[-1] == (
        f"Error: worker-1 is still DOWN: RESUME failed 5 times (last: `{shlex.join(resume)}` "
        f"failed (exit code 1): {TIMED_OUT}); bring it back with: sudo {shlex.join(resume)}"
    )
    assert "RESUMEd" not in out + err and "Traceback" not in err
    assert [c for c in fake.calls if c == resume] == [resume] * 5
    assert sleeps[-4:] == [0.5, 1.0, 2.0, 4.0]  # the backoff between the 5 tries
    evs = events(tmp_path / "ev.jsonl")
    assert [x.action for x in evs] == ["node-down", "resume-failed"]
    assert evs[-1].detail.startswith("guard: interrupted" if interrupted else "planned: ")


def test_needs_root_fails_before_anything_is_down(tmp_path, monkeypatch):
    ops, ev = FakeArray(monkeypatch, fail_on="DOWN"), tmp_path / "ev.jsonl"
    plan = failure_plan.make_plan("node-down", resolve(replica=1), down_for=1)
    with pytest.raises(UserError, match="run with sudo"):
        failure.execute(plan, events_path=ev)
    assert ops.scontrol == [("update", "worker-1", "DOWN")]  # nothing to undo
    assert not ev.exists()


def test_recovery_timeout_is_exit_code_1(tmp_path, monkeypatch):
    class Never(FakeArray):
        def squeue(self, cmd):
            return squeue_json((1, "PENDING", 1, ""))

    ops = Never(monkeypatch)
    plan = failure_plan.make_plan("requeue", resolve(replica=1))
    with pytest.raises(failure.RecoveryTimeout) as e:
        failure.execute(plan, wait_recovered=True, timeout=0.2, poll=0.01,
                        events_path=tmp_path / "e")  # fmt: skip
    assert e.value.exit_code == 1
    assert ops.scontrol == [("requeue", "12_1")]


# ---------------------------------------------------------------- chaos


def test_chaos_never_hits_the_last_running_replica():
    rng = random.Random(0)
    two = {0: JobInfo(1, 1, 0, "RUNNING", node="a"), 1: JobInfo(2, 1, 1, "RUNNING", node="b")}
    one = {0: JobInfo(1, 1, 0, "RUNNING", node="a"), 1: JobInfo(2, 1, 1, "PENDING")}
    assert {failure_plan.chaos_pick(two, rng) for _ in range(50)} == {0, 1}
    assert failure_plan.chaos_pick(one, rng) is None
    assert failure_plan.chaos_pick({}, rng) is None
    # RUNNING in Slurm but not training yet (restarted, healing): not live
    assert failure_plan.chaos_pick(two, rng, live={0}) is None
    assert failure_plan.chaos_pick(two, rng, live={0, 1}) in (0, 1)


def test_run_chaos_counts_events_and_skips(tmp_path, monkeypatch):
    class TwoTasks(FakeArray):
        ticks = 0

        def squeue(self, cmd):
            self.ticks += 1
            if self.ticks == 2:  # the 2nd tick: one left
                return squeue_json((1, "PENDING", 1, ""))
            return squeue_json()

    lines: list[str] = []

    def make(replica: int) -> failure_plan.FailurePlan:
        t = failure_plan.Target(f"worker-{replica}", 12, replica, replica + 1)
        return failure_plan.make_plan("node-down", t, down_for=0)

    ops = TwoTasks(monkeypatch)
    summary = failure.run_chaos(12, every=0.05, count=3, seed=1, make=make,
                                say=lines.append, events_path=tmp_path / "e")  # fmt: skip
    assert len(summary.events) == 2 and summary.skipped == 1
    assert "skipped (fewer than 2 live replicas)" in lines[1]
    text = failure.chaos_summary_line(summary)
    assert text.startswith("chaos: 2 events (node-down x2), 1 skipped")
    downs = [c for c in ops.scontrol if c[2] == "DOWN"]
    resumes = [c for c in ops.scontrol if c[2] == "RESUME"]
    assert len(downs) == len(resumes) == 2


# ---------------------------------------------------------------- CLI


def dry_fake(squeue: str = "squeue_running") -> FakeSlurm:
    """The recorded squeue of a 2-replica job, sinfo of its nodes; a node update fails the test."""
    sinfo = "".join(f"{n} {s}\n" for n, s in NODES.items())
    return (FakeSlurm().on(["squeue", "--json"], (FIX / f"{squeue}.json").read_text())
            .on(args.sinfo_nodes_cmd(), sinfo)
            .on(["scontrol", "update"], lambda cmd: pytest.fail(f"ran {cmd}")))  # fmt: skip


@pytest.fixture
def dry_slurm(monkeypatch, tmp_path):
    """`dry_fake` installed; the event log in tmp_path (a dry run must not write it)."""
    dry_fake().install(monkeypatch)
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "ev.jsonl"))


def test_cli_dry_run_prints_and_runs_nothing(dry_slurm, tmp_path):
    r = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--down-for", "5",
                                 "--dry-run"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "scontrol update NodeName=worker-1 State=DOWN" in r.output
    assert "# dry run: nothing was run" in r.output
    assert not (tmp_path / "ev.jsonl").exists()


def test_cli_with_spares_names_the_array_task_and_the_slot_it_holds(dry_slurm, tmp_path,
                                                                    monkeypatch):
    """With warm spares, array task 1 may hold slot 0: the narration must not call it
    replica 1 (the recorded squeue: job 12, task 1 on worker-1)."""
    from ftslurm.replica import slots

    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    root = slots.slots_dir(tmp_path / "torchft" / "tft-12")
    claims = [slots.Claim(0, 0, 0, "worker-0", 1, 1.0), slots.Claim(1, 0, 2, "worker-2", 1, 1.0),
              slots.Claim(0, 1, 1, "worker-1", 1, 2.0, previous_task=0)]  # fmt: skip
    for claim in claims:
        path = slots.claim_path(root, claim.slot, claim.epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(claim.to_json())
    r = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--down-for", "5",
                                 "--dry-run"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "# target: array task 1 of job 12 on worker-1, mode node-down" in r.output
    assert "# task 1: holds slot 0 (replica 0): a warm spare takes the slot over" in r.output
    assert "replica 1" not in r.output


def test_cli_job_as_squeue_shows_a_task(dry_slurm, tmp_path):
    """`--job 12_1` (pasted from squeue) is replica 1 of job 12; click's int() read it as
    job 121 (underscores are digit separators to Python) and would hit another job."""
    r = CliRunner().invoke(cli, ["simulate-failure", "--job", "12_1", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["job"], json.loads(r.stdout)["replica"]) == (12, 1)
    both = CliRunner().invoke(cli, ["simulate-failure", "--job", "12_1", "--replica", "0",
                                    "--dry-run"])  # fmt: skip
    assert "names replica 1: drop --replica" in str(both.exception)
    for bad in ("1_2_3", "²", "12_"):
        r = CliRunner().invoke(cli, ["simulate-failure", "--job", bad, "--dry-run"])
        assert r.exit_code == 2 and "is not a job id" in r.output, (bad, r.output)


def test_cli_dry_run_json_is_the_plan_and_only_json(dry_slurm, tmp_path):
    r = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--down-for", "5",
                                 "--dry-run", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["dry_run"] is True and (plan["node"], plan["job"], plan["replica"]) == (
        "worker-1", 12, 1)  # fmt: skip
    assert plan["commands"][0].startswith("scontrol update NodeName=worker-1 State=DOWN")
    assert plan["commands"][1:] == ["sleep 5", "scontrol update NodeName=worker-1 State=RESUME"]
    chaos = CliRunner().invoke(cli, ["simulate-failure", "--chaos", "--every", "20", "--seed",
                                     "1", "--dry-run", "--json"])  # fmt: skip
    assert chaos.exit_code == 0, chaos.output
    first = json.loads(chaos.stdout)
    assert first["dry_run"] is True and first["job"] == 12
    assert first["first"]["mode"] == "node-down" and first["first"]["commands"]
    assert "chaos on job 12" in chaos.stderr
    assert not (tmp_path / "ev.jsonl").exists()


def test_cli_refuses_the_node_it_runs_on(dry_slurm, monkeypatch):
    monkeypatch.setattr(failure, "hostname", lambda: "worker-0")
    r = CliRunner().invoke(cli, ["simulate-failure", "--node", "worker-0"])
    assert r.exit_code != 0 and "this command runs on it" in str(r.exception)


@pytest.mark.process
def test_console_script_errors_are_one_line(tmp_path):
    env = {**os.environ, "FTSLURM_EVENTS": str(tmp_path / "e")}
    cases = [
        (["simulate-failure", "--chaos"], "--chaos needs --every"),
        (["simulate-failure", "--every", "3", "--replica", "1"], "--every: only with --chaos"),
        (["simulate-failure", "--count", "2", "--seed", "1", "--replica", "1"],
         "--count --seed: only with --chaos"),
        (["simulate-failure", "--chaos", "--every", "9", "--replica", "0"],
         "--chaos picks the replicas itself"),
        (["simulate-failure", "--mode", "explode"], "Invalid value for '--mode'"),
    ]
    for argv, message in cases:
        r = subprocess.run([sys.executable, "-m", "ftslurm", *argv], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 2, (argv, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr


def test_help_has_examples():
    for cmd in ("simulate-failure", "status", "logs"):
        r = CliRunner().invoke(cli, [cmd, "--help"])
        assert r.exit_code == 0 and "Examples:" in r.output and "ftslurm " + cmd in r.output


def test_cli_chaos_dry_run(dry_slurm, monkeypatch, tmp_path):
    r = CliRunner().invoke(
        cli, ["simulate-failure", "--chaos", "--every", "20", "--count", "3", "--seed", "1",
              "--down-for", "5", "--dry-run"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.output.startswith("chaos on job 12: 3 x node-down every 20 s, seed 1")
    assert "State=DOWN" in r.output and "# dry run: nothing was run" in r.output
    dry_fake("squeue_node_down_pending").install(monkeypatch)
    pending = CliRunner().invoke(
        cli, ["simulate-failure", "--chaos", "--every", "5", "--job", "12", "--dry-run"]
    )
    assert "every event would be skipped" in pending.output
    assert not (tmp_path / "ev.jsonl").exists()


def test_cli_hang_dry_run_through_srun_and_mode_lists_only_with_chaos(dry_slurm, monkeypatch):
    """Off the local cluster a hang is `pkill -STOP` on the node through srun, then -CONT;
    freeze-node needs the local cluster; a list of modes is chaos's alone; a bad mode is one
    line naming the modes."""
    monkeypatch.setenv("FTSLURM_KILL_VIA", "srun")  # a real cluster's path, also beside one
    hang = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--mode", "hang",
                                    "--down-for", "9", "--dry-run", "--json"])  # fmt: skip
    assert hang.exit_code == 0, hang.output
    plan = json.loads(hang.stdout)
    assert plan["mode"] == "hang" and plan["down_for"] == 9
    assert "--overlap" in plan["commands"][0] and "-STOP" in plan["commands"][0]
    assert plan["commands"][1] == "sleep 9" and "-CONT" in plan["commands"][2]
    freeze = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--mode",
                                      "freeze-node", "--dry-run"])  # fmt: skip
    assert "not one (on a real cluster" in str(freeze.exception)  # a UserError: one line
    listed = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--mode",
                                      "kill,hang", "--dry-run"])  # fmt: skip
    assert "a list of modes only with --chaos" in str(listed.exception)
    bad = CliRunner().invoke(cli, ["simulate-failure", "--replica", "1", "--mode", "nap"])
    assert bad.exit_code == 2 and "use one of node-down, kill, requeue, hang" in bad.output
    chaos = CliRunner().invoke(cli, ["simulate-failure", "--chaos", "--every", "20", "--mode",
                                     "hang,kill", "--dry-run", "--json"])  # fmt: skip
    assert chaos.exit_code == 0, chaos.output
    assert json.loads(chaos.stdout)["first"]["mode"] == "hang"  # the modes in turn


def test_with_spares_the_narration_calls_the_target_an_array_task(tmp_path, monkeypatch):
    """In a run with warm spares array task 1 may hold slot 0: the action lines say `array
    task 1 ...: holds slot 0`, never `replica 1` (the demo printed `worker-2 set DOWN (replica
    2 of job 3 on worker-2)` one line after calling that task replica 1)."""
    from ftslurm.replica import slots

    ops = FakeArray(monkeypatch)
    root = slots.slots_dir(tmp_path / "run")
    for claim in (slots.Claim(0, 0, 0, "worker-0", 1, 1.0),
                  slots.Claim(1, 0, 2, "worker-2", 1, 1.0),
                  slots.Claim(0, 1, 1, "worker-1", 1, 2.0, previous_task=0)):  # fmt: skip
        path = slots.claim_path(root, claim.slot, claim.epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(claim.to_json())
    lines: list[str] = []
    plan = failure_plan.make_plan("requeue", resolve(replica=1))
    failure.execute(plan, say=lines.append, events_path=tmp_path / "e",
                    log_path=tmp_path / "run" / "tft-12_1.out")  # fmt: skip
    assert ops.scontrol == [("requeue", "12_1")]
    assert lines == ["requeued 12_1 (array task 1 of job 12 on worker-1: holds slot 0)"]
