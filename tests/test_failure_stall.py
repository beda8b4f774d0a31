"""`simulate-failure --mode stall`: only the training thread stops (ptrace of each worker's
main thread), every other thread of the worker runs on, as under a CUDA kernel or an NCCL
call that never returns while torchft's heartbeat threads go on.

Unit: the mode in every list that names the modes, the plan (local cluster: ptrace from this
process; a real cluster: `python -m ftslurm.stall` on the node through srun), its refusals,
ptrace's rights, the executor's srun path with a fake Slurm (the guard on an interrupt), and
the report reading a stall's injection line as it reads a hang's. Process: a real child whose
main thread prints a counter every 50 ms while a second thread writes a file every 50 ms,
stalled through the node-side helper, the executor's local path and its srun path (a fake
srun that runs the step here): the counter stops, the writes go on, both run after; a child
killed meanwhile, and an injector ended by SIGINT or SIGTERM, let everything go."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ftslurm import failure, failure_plan, logvocab, procs
from ftslurm.errors import UserError
from ftslurm.event_log import FAILURE_ACTIONS, parse_event_line
from ftslurm.failure_plan import KillSelection, Target
from ftslurm.report import build_report
from ftslurm.runner import Completed
from ftslurm.wait import wait_for
from tests.clirun import invoke
from tests.fakeslurm import FakeSlurm
from tests.test_failure import dry_fake

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

TARGET = Target(node="worker-1", job=12, replica=1, raw_job_id=14)
LOCAL = KillSelection(local=True, pids=(101, 102), described=("101: python -m ftslurm.replica."
                                                              "train", "102: ..."))  # fmt: skip


# ---------------------------------------------------------------- the mode's lists and plan


def test_stall_is_a_silent_mode_in_every_list_of_modes() -> None:
    from ftslurm.commands.failure import _modes
    from ftslurm.demo import DemoConfig, plan_lines

    assert "stall" in failure_plan.MODES and "stall" in failure_plan.SILENT_MODES
    assert "stall" in logvocab.FAILURE_MODES and "stall" in FAILURE_ACTIONS
    assert _modes(None, None, "kill,stall") == ("kill", "stall")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="hang, stall and freeze-node"):
        DemoConfig(backend="local", modes=("stall",)).validate()
    lines = plan_lines(DemoConfig(backend="slurm", modes=("stall",), failures=1, down_for=7))
    assert any("simulate-failure --replica 1 --mode stall --down-for 7" in x for x in lines)


def test_the_local_plan_stops_the_main_threads_waits_and_lets_them_go() -> None:
    plan = failure_plan.make_plan("stall", TARGET, down_for=7, kill=LOCAL)
    assert [a.kind for a in plan.actions] == ["stall-local", "wait", "unstall-local"]
    lines = plan.lines()
    assert lines[0].startswith("ptrace PTRACE_SEIZE+PTRACE_INTERRUPT 101 102    # local")
    assert lines[1].startswith("sleep 7") and lines[2].startswith("ptrace PTRACE_DETACH 101 102")
    assert plan.down_for == 7 and plan.to_dict()["mode"] == "stall"


def test_on_a_cluster_the_node_runs_the_stall_through_srun() -> None:
    plan = failure_plan.make_plan("stall", TARGET, down_for=7,
                                  kill=KillSelection(local=False, python="/venv/bin/python"))
    check, stall, unstall = plan.actions
    assert (check.kind, stall.kind, unstall.kind) == ("stall-check-srun", "stall-srun",
                                                      "unstall-srun")  # fmt: skip
    for a in plan.actions:
        assert a.argv[:6] == ("srun", "--jobid=14", "--overlap", "--nodes=1", "--ntasks=1",
                              "--nodelist=worker-1")  # fmt: skip
    helper = ("sh", "-c", failure_plan.STALL_ON_NODE, "ftslurm-stall", failure_plan.TRAIN_CMD_RE,
              "/venv/bin/python")  # fmt: skip
    assert check.argv[6:] == (*helper, "check") and stall.argv[6:] == (*helper, "stall", "7")
    assert '-m ftslurm.stall "$3" "$p"' in failure_plan.STALL_ON_NODE
    assert unstall.argv[-1] == failure_plan.STALL_HELPER_RE and "-TERM" in unstall.argv[-3]
    # the patterns find the helper and the workers, never the scripts that carry them
    import re

    assert re.search(failure_plan.STALL_HELPER_RE, "/venv/bin/python -m ftslurm.stall stall 5 7")
    assert not re.search(failure_plan.STALL_HELPER_RE, " ".join(unstall.argv[6:]))
    assert not re.search(failure_plan.TRAIN_CMD_RE, " ".join(stall.argv[6:]))


def test_stall_refusals() -> None:
    with pytest.raises(UserError, match="no training worker of job 12_1 found on worker-1"):
        failure_plan.make_plan("stall", TARGET, kill=KillSelection(local=True))
    with pytest.raises(UserError, match="--rank 1: only with --mode kill"):
        failure_plan.make_plan("stall", Target("worker-1", 12, 1, 14, rank=1), kill=LOCAL)
    with pytest.raises(UserError, match="--mode stall needs a replica; worker-1 runs no task"):
        failure_plan.make_plan("stall", Target("worker-1"), kill=LOCAL)


@pytest.mark.parametrize(("rights", "uids", "descendant", "refused"), [
    ((3, True, 0), (0, 0, 0, 0), True, "kernel.yama.ptrace_scope=3"),
    ((2, False, 1000), (1000,) * 4, True, "ptrace_scope=2: only CAP_SYS_PTRACE"),
    ((2, True, 1000), (0,) * 4, False, None),
    ((1, False, 1000), (1000,) * 4, False, "ptrace_scope=1: pid 7 is no descendant"),
    ((1, False, 1000), (1000,) * 4, True, None),
    ((1, True, 0), (1000,) * 4, False, None),
    ((0, False, 1000), (1000,) * 4, False, None),
    ((None, False, 1000), (0, 0, 0, 0), False, "pid 7 runs as uid 0, this process as 1000"),
])  # fmt: skip
def test_ptrace_rights(rights, uids, descendant, refused) -> None:
    why = procs.PtraceRights(*rights).refusal(7, uids, descendant)
    assert (why is None) if refused is None else (refused in why and "\n" not in why)


def test_a_local_stall_is_refused_before_anything_where_ptrace_may_not(monkeypatch) -> None:
    monkeypatch.setattr(failure, "kill_selection", lambda t: LOCAL)
    monkeypatch.setattr(failure.procs, "ptrace_refusal", lambda pids: "kernel.yama.ptrace_scope=3")
    monkeypatch.setattr(failure.procs, "ptrace_stop", lambda tid: pytest.fail("stopped"))
    with pytest.raises(UserError, match=r"^--mode stall: kernel.yama.ptrace_scope=3$"):
        failure.selection("stall", TARGET)
    monkeypatch.setattr(failure, "kill_selection", lambda t: KillSelection(local=False))
    monkeypatch.setenv("FTSLURM_PYTHON", "/venv/bin/python")
    assert failure.selection("stall", TARGET).python == "/venv/bin/python"


def test_cli_stall_dry_run_through_srun(dry_slurm_fake, monkeypatch) -> None:
    monkeypatch.setenv("FTSLURM_KILL_VIA", "srun")
    monkeypatch.setenv("FTSLURM_PYTHON", "/venv/bin/python")
    r = invoke("simulate-failure", "--replica", "1", "--mode", "stall",
                                 "--down-for", "9", "--dry-run", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["mode"] == "stall" and plan["down_for"] == 9
    assert "/venv/bin/python check" in plan["commands"][0]
    assert "/venv/bin/python stall 9" in plan["commands"][1] and "-TERM" in plan["commands"][2]
    rank = invoke("simulate-failure", "--replica", "1", "--mode", "stall",
                                    "--rank", "0", "--dry-run")  # fmt: skip
    assert "--rank 0: only with --mode kill" in str(rank.exception)
    usage = invoke("simulate-failure", "--help").output
    assert "sudo ftslurm simulate-failure --replica 1 --mode stall" in usage


@pytest.fixture
def dry_slurm_fake(monkeypatch, tmp_path):
    dry_fake().install(monkeypatch)
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "ev.jsonl"))


def test_the_node_side_helper_refuses_in_one_line(capsys) -> None:
    from ftslurm import stall

    assert stall.main(["check", str(procs.PID_MAX)]) == 1  # no such process: nothing to stall
    assert "no training worker to stall among pid(s) 4194304" in capsys.readouterr().err
    for argv in (["stall", "5"], ["stall", "5,x", "1"], ["stall", "5", "-1"], ["nap", "5"]):
        with pytest.raises(SystemExit) as e:
            stall.main(argv)
        assert e.value.code == 2, argv
    assert "kernel.yama.ptrace_scope <= 1 with CAP_SYS_PTRACE" in stall.NEEDS


# ---------------------------------------------------------------- the executor, srun path


def _events(path: Path) -> list:
    return [parse_event_line(x) for x in path.read_text().splitlines()] if path.exists() else []


def _srun_plan(down_for: float = 5) -> failure_plan.FailurePlan:
    return failure_plan.make_plan("stall", TARGET, down_for=down_for,
                                  kill=KillSelection(local=False, python="/venv/bin/python"))


def _on_node(cmd: list[str]) -> str:
    """What the fake srun's step ran: check, stall or the unstall's pkill."""
    return "unstall" if "ftslurm-unstall" in cmd else cmd[-1] if cmd[-1] == "check" else cmd[-2]


def test_the_srun_path_checks_records_holds_and_ends(tmp_path, monkeypatch) -> None:
    answers = {"check": "pid(s) 5,6: ptrace may stall them\n",
               "stall": "stalled the main thread of pid(s) 5,6 for 5 s\nreleased pid(s) 5,6\n",
               "unstall": Completed([], 1, "", "")}  # fmt: skip
    fake = FakeSlurm().on(["srun"], lambda cmd: answers[_on_node(cmd)]).install(monkeypatch)
    said: list[str] = []
    failure.execute(_srun_plan(), events_path=tmp_path / "ev.jsonl", say=said.append)
    assert [_on_node(c) for c in fake.calls] == ["check", "stall", "unstall"]
    ev = _events(tmp_path / "ev.jsonl")
    assert [e.action for e in ev] == ["stall", "cont"]
    assert "ftslurm.stall" in ev[0].detail and "(planned)" in ev[1].detail
    assert any("released pid(s) 5,6" in line for line in said)


@pytest.mark.parametrize(("code", "message"), [
    (1, "no training worker matched on the node"),
    (2, "--mode stall: kernel.yama.ptrace_scope=2: only CAP_SYS_PTRACE may ptrace"),
])  # fmt: skip
def test_the_srun_path_refuses_before_recording_anything(tmp_path, monkeypatch, code,
                                                         message) -> None:  # fmt: skip
    stderr = f"{message} (ptrace needs ...)" if code == 2 else ""
    FakeSlurm().on(["srun"], Completed([], code, "", stderr)).install(monkeypatch)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        failure.execute(_srun_plan(), events_path=tmp_path / "ev.jsonl")
    assert _events(tmp_path / "ev.jsonl") == []


def test_an_interrupt_during_the_srun_stall_ends_it_on_the_node(tmp_path, monkeypatch) -> None:
    def node(cmd: list[str]) -> str | Completed:
        if _on_node(cmd) == "stall":  # the injector gets Ctrl-C while the step holds
            raise failure.Interrupted(signal.SIGINT)
        return "ok" if _on_node(cmd) == "check" else Completed([], 0, "", "")

    fake = FakeSlurm().on(["srun"], node).install(monkeypatch)
    with pytest.raises(failure.Interrupted):
        failure.execute(_srun_plan(60), events_path=tmp_path / "ev.jsonl")
    assert [_on_node(c) for c in fake.calls] == ["check", "stall", "unstall"]
    ev = _events(tmp_path / "ev.jsonl")
    assert [e.action for e in ev] == ["stall", "cont"] and "guard" in ev[1].detail


def test_a_local_stall_refused_midway_lets_the_stopped_threads_go(tmp_path, monkeypatch):
    """ptrace refuses the second worker (a debugger holds it): the first is let go, nothing
    is recorded, one line says why."""
    released: list[int] = []

    def stop(tid: int) -> procs.ThreadStop:
        if tid == 102:
            raise PermissionError(1, "PTRACE_SEIZE of thread 102: Operation not permitted")
        return procs.ThreadStop(tid, stopped=True)

    monkeypatch.setattr(failure.procs, "ptrace_stop", stop)
    monkeypatch.setattr(failure.procs, "ptrace_release", lambda s: released.append(s.tid) or 1)
    plan = failure_plan.make_plan("stall", TARGET, down_for=5, kill=LOCAL)
    with pytest.raises(UserError, match=r"^--mode stall: .*thread 102: Operation not permitted"):
        failure.execute(plan, events_path=tmp_path / "ev.jsonl")
    assert released == [101] and _events(tmp_path / "ev.jsonl") == []


# ---------------------------------------------------------------- the report


def test_the_report_reads_a_stall_injection_as_it_reads_a_hang(tmp_path) -> None:
    """The recorded CPU run's injected kill, written as a hang and as a stall: the same
    failure at the same time, from the event log, with its mode."""
    run1 = Path(__file__).parent / "fixtures" / "report" / "cpu-run1"
    reports = {}
    for mode in ("hang", "stall"):
        d = tmp_path / mode
        d.mkdir()
        for name in ("lighthouse", "replica_0", "replica_1"):
            (d / f"{name}.log").write_bytes(gzip.decompress((run1 / f"{name}.log.gz").read_bytes()))
        (d / "events.jsonl").write_text(
            (run1 / "events.jsonl").read_text().replace('"action": "kill"', f'"action": "{mode}"'))
        reports[mode] = build_report([d]).to_json()
    hang, stall = reports["hang"]["failures"], reports["stall"]["failures"]
    assert [f["kind"] for f in stall] == ["stall"] and stall[0]["time_source"] == "injected"
    assert [{**f, "kind": None} for f in stall] == [{**f, "kind": None} for f in hang]


# ---------------------------------------------------------------- a real child, stalled

CHILD = """
import sys, threading, time
def other():
    n = 0
    while True:
        with open(sys.argv[1], "a") as f:
            f.write(f"{n}\\n")
        n += 1
        time.sleep(0.05)
threading.Thread(target=other, daemon=True).start()
c = 0
while True:
    print(c, flush=True)
    c += 1
    time.sleep(0.05)
"""

# the executor in a process of its own, as `simulate-failure` runs it: argv how (local|srun),
# pid, seconds, event log, the pattern that finds the worker on the "node"
INJECT = """
import sys
from pathlib import Path
from ftslurm import failure, failure_plan as fp
how, pid, seconds, events, pattern = sys.argv[1:6]
fp.TRAIN_CMD_RE = pattern
kill = (fp.KillSelection(True, pids=(int(pid),), described=(f"{pid}: the test's worker",))
        if how == "local" else fp.KillSelection(False, python=sys.executable))
plan = fp.make_plan("stall", fp.Target("node-x", raw_job_id=7), down_for=float(seconds),
                    kill=kill)
try:
    failure.execute(plan, say=lambda line: print(line, flush=True), events_path=Path(events))
except failure.Interrupted as e:
    sys.exit(128 + e.signum)
"""

# srun: its options dropped, the step's command run here; as a real srun's, the step outlives
# an srun that is killed (the injector's runner kills it when a signal interrupts the call)
FAKE_SRUN = ('while case "$1" in --*) true;; *) false;; esac; do shift; done\n'
             '"$@" & wait $!\n')


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@dataclass
class Child:
    """The test's worker: its main thread's counter on stdout (`out`), its other thread's
    writes in `other`; `token` in its command line alone."""

    proc: subprocess.Popen
    out: Path
    other: Path
    token: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def counts(self) -> tuple[int, int]:
        return _lines(self.out), _lines(self.other)

    def main_state(self) -> str:
        st = procs.proc_stat(self.pid)  # the process's own stat: its main thread's
        return st.state if st else "gone"

    def in_a_call(self) -> bool:
        """Stopped inside a system call (its sleep or write), not in Python code: so it does
        not hold the GIL, which a real training thread stuck in a CUDA call does not either
        (stopped holding it, the other thread would stop too: rare, ~1 in 1000)."""
        text = Path(f"/proc/{self.pid}/task/{self.pid}/syscall").read_text()
        return text.split()[0] not in ("-1", "running")

    def runs_on(self, main: bool, other: bool = True, by: int = 5) -> None:
        """Wait until the threads named advance by `by` lines."""
        m0, o0 = self.counts()
        wait_for(lambda: (not main or self.counts()[0] >= m0 + by)
                 and (not other or self.counts()[1] >= o0 + by), 10, 0.02,
                 f"the child's {'main thread' if main else ''} {'other thread' if other else ''}")


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    token = f"stall-test-{uuid.uuid4().hex[:12]}"
    out, other = tmp_path / "main.txt", tmp_path / "other.txt"
    with out.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(other), token], stdout=fh)
    c = Child(proc, out, other, token)
    try:
        c.runs_on(main=True, by=3)
        yield c
    finally:
        proc.kill()
        proc.wait(10)


def _skip_without_ptrace(pid: int) -> None:
    """The injectors here are siblings of the child, not its ancestors."""
    why = procs.PtraceRights.here().refusal(pid, procs.proc_uids(pid), descendant=False)
    if why:
        pytest.skip(f"ptrace: {why}")


def _injector(how: str, c: Child, seconds: float, tmp_path: Path) -> subprocess.Popen:
    if how == "helper":
        argv = [sys.executable, "-m", "ftslurm.stall", "stall", str(c.pid), f"{seconds:g}"]
    else:
        # a pattern that finds the child, and not the node script that carries it
        pattern = f"[{c.token[0]}]{c.token[1:]}"
        argv = [sys.executable, "-c", INJECT, how, str(c.pid), f"{seconds:g}",
                str(tmp_path / "ev.jsonl"), pattern]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def _stall(how: str, c: Child, seconds: float, tmp_path: Path) -> subprocess.Popen:
    """The injector, once the child's main thread is stopped inside a call (see
    `Child.in_a_call`; tried again the rare time it was not)."""
    for _ in range(3):
        inj = _injector(how, c, seconds, tmp_path)
        wait_for(lambda inj=inj: c.main_state() == "t" or inj.poll() is not None, 30, 0.01,
                 "the child's main thread in its ptrace stop")  # fmt: skip
        assert inj.poll() is None, inj.communicate()
        if c.in_a_call():
            return inj
        inj.send_signal(signal.SIGTERM)
        inj.communicate(timeout=30)
        (tmp_path / "ev.jsonl").unlink(missing_ok=True)
    pytest.fail("the child's main thread was never stopped inside a call")


@pytest.fixture
def fake_srun(fake_bin) -> None:
    fake_bin.add("srun", FAKE_SRUN)


HOWS = ["helper", "local", "srun"]


@pytest.mark.process
@pytest.mark.parametrize("how", HOWS)
def test_a_stall_stops_the_main_thread_alone_and_both_run_after(how, child, tmp_path,
                                                                fake_srun) -> None:  # fmt: skip
    _skip_without_ptrace(child.pid)
    inj = _stall(how, child, 1.5, tmp_path)
    main = child.counts()[0]
    child.runs_on(main=False, by=3)  # 150 ms of the other thread's writes...
    assert child.counts()[0] == main  # ... while the counter stood still
    out, err = inj.communicate(timeout=30)
    assert inj.returncode == 0, (out, err)
    assert child.main_state() not in ("t", "T", "gone")
    child.runs_on(main=True, other=True)
    if how != "helper":
        assert [e.action for e in _events(tmp_path / "ev.jsonl")] == ["stall", "cont"]


@pytest.mark.process
@pytest.mark.parametrize("how", HOWS)
def test_a_worker_killed_during_its_stall_is_no_error(how, child, tmp_path, fake_srun) -> None:
    _skip_without_ptrace(child.pid)
    inj = _stall(how, child, 3, tmp_path)
    child.proc.kill()  # its watchdog ends it
    assert child.proc.wait(10) == -signal.SIGKILL  # its parent learns it while it is held
    out, err = inj.communicate(timeout=30)
    assert inj.returncode == 0, (out, err)
    assert f"exited while stalled: {child.pid}" in out.replace("[", "").replace("]", "")
    assert "Traceback" not in err


@pytest.mark.process
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_injector_ended_by_a_signal_lets_the_thread_go(how, sig, child, tmp_path,
                                                          fake_srun) -> None:  # fmt: skip
    _skip_without_ptrace(child.pid)
    inj = _stall(how, child, 60, tmp_path)
    child.runs_on(main=False, by=3)
    inj.send_signal(sig)
    out, err = inj.communicate(timeout=30)
    assert inj.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err
    child.runs_on(main=True, other=True)
    if how != "helper":
        ev = _events(tmp_path / "ev.jsonl")
        assert [e.action for e in ev] == ["stall", "cont"] and "guard" in ev[1].detail
