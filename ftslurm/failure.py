"""Run a failure plan (`ftslurm.failure_plan`) against Slurm, guarded, and time the recovery;
find kill mode's workers on the local cluster; chaos (repeated failures).

The guard: a node a run took DOWN is RESUMEd, and processes it stopped (hang, freeze-node)
get SIGCONT, on every way out (normal end, error, Ctrl-C, SIGTERM, SIGHUP from a closed
terminal or a dropped ssh). A RESUME that fails is tried again;
when every try fails, the run says which node is still DOWN and the command that brings it
back, and exits 1. Every action is appended to the event log (`ftslurm.event_log`) so
`ftslurm report` knows when a failure was *caused*, not only when the logs noticed it.

Kill mode on the local cluster (every node shares this machine's /proc) selects the workers
by pid, in the node's UTS namespace and with the task's SLURM_JOB_ID in their environment, so
no other job or node is touched (`kill_selection`: when the plan's srun + pkill runs instead).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shlex
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftslurm import failure_modes, failure_plan, knobs, logvocab, procs
from ftslurm.errors import UserError
from ftslurm.failure_plan import Action, ActionKind, FailurePlan, KillSelection, Target
from ftslurm.replica.launcher import warm_restart
from ftslurm.runner import CommandError
from ftslurm.slurm import args as slurm_args
from ftslurm.slurm import client
from ftslurm.slurm.parse import JobInfo
from ftslurm.wait import WaitTimeout, wait_for

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --------------------------------------------------------------------------------------------
# Kill: finding the worker processes


def _environ(pid: int) -> dict[str, str]:
    return procs.environ(pid)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def local_node_ns(node: str) -> str | None:
    """The UTS namespace of `node` when it is a node of the local cluster we talk to, else
    None (a real cluster)."""
    from ftslurm.cluster import local

    spec = local.load_spec()
    if spec is None or node not in spec.node_names:
        return None
    conf = os.environ.get("SLURM_CONF")
    if conf and Path(conf).resolve() != Path(spec.conf_path).resolve():
        return None  # SLURM_CONF points at another cluster
    holder = procs.read_pidfile(spec.node_pidfile(node))
    if not holder or not procs.pid_alive(holder):
        return None
    ns = procs.uts_ns(holder)
    return ns if ns and ns != procs.uts_ns(os.getpid()) else None


def find_local_workers(
    ns: str, raw_job_id: int, regex: str = failure_plan.TRAIN_CMD_RE, rank: int | None = None
) -> KillSelection:
    """Training workers of Slurm job `raw_job_id` in the node namespace `ns`; with `rank`,
    only the one whose RANK is that (torchrun gives each worker its own)."""
    pids, described = [], []
    for pid in sorted(procs.pids_in_uts_ns(ns)):
        cmd = procs.cmdline(pid)
        if not failure_plan.is_training_worker(cmd, _comm(pid), regex):
            continue
        environ = _environ(pid)
        if environ.get("SLURM_JOB_ID") != str(raw_job_id):
            continue
        if rank is not None and environ.get("RANK") != str(rank):
            continue
        if warm_restart.waiting(environ):  # the replica's next run, not its training
            continue
        pids.append(pid)
        described.append(f"{pid}: {shlex.join(cmd)[:120]}")
    return KillSelection(local=True, pids=tuple(pids), described=tuple(described))


def freeze_selection(target: Target) -> KillSelection:
    """Every process of a node of the local cluster (its UTS namespace: slurmd, slurmstepd,
    the job's steps, the launcher, the workers); srun + pkill is no way to freeze a node."""
    srun = knobs.environ().FTSLURM_KILL_VIA == "srun"  # the real-cluster path
    ns = None if srun else local_node_ns(target.node)
    if ns is None:
        return KillSelection(local=False)
    pids = sorted(procs.pids_in_uts_ns(ns))
    described = [f"{pid}: {shlex.join(procs.cmdline(pid))[:60]}" for pid in pids]
    return KillSelection(local=True, pids=tuple(pids), described=tuple(described))


def selection(mode: str, target: Target) -> KillSelection | None:
    """The processes a mode signals (kill, hang, stall: the workers; freeze-node: the node's)."""
    signals = failure_modes.MODES[mode].signals
    if signals == "workers":
        return kill_selection(target)
    if signals == "main-threads":
        return stall_selection(target)
    if signals == "node":
        return freeze_selection(target)
    return None


def stall_selection(target: Target) -> KillSelection:
    """The workers whose main threads a stall stops, as kill mode finds them; on the local
    cluster refused (one line) before anything is stopped where this process may not ptrace
    them. Through srun the node checks that itself (`python -m ftslurm.stall check`)."""
    sel = kill_selection(target)
    if not sel.local:
        from ftslurm import paths

        return dataclasses.replace(sel, python=paths.job_python())
    if sel.pids and (why := procs.ptrace_refusal(sel.pids)):
        raise UserError(f"--mode stall: {why}")
    return sel


def kill_selection(target: Target) -> KillSelection:
    """Local pids on the local cluster; `srun` + `pkill` elsewhere, or anywhere with
    FTSLURM_KILL_VIA=srun (the real-cluster path, also right on the local cluster)."""
    via = knobs.environ().FTSLURM_KILL_VIA
    ns = None if via == "srun" else local_node_ns(target.node)
    if ns is None or target.raw_job_id is None:
        if via == "local":
            raise UserError(
                f"FTSLURM_KILL_VIA=local but {target.node} is not a node of the local cluster; "
                "unset it"
            )
        return KillSelection(local=False)
    return find_local_workers(ns, target.raw_job_id, rank=target.rank)


# --------------------------------------------------------------------------------------------
# The executor


# Ctrl-C, kill, and a closed terminal or a dropped ssh: each ends a run through the guard
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RESUME_WAITS_S = (0.5, 1.0, 2.0, 4.0)  # between the 5 tries of a RESUME: 7.5 s in all


class RecoveryTimeout(UserError, WaitTimeout):
    """The replica did not come back in time: a `WaitTimeout` that the CLI shows as a one-line
    error (not a usage mistake: exit code 1)."""

    exit_code = 1


class ResumeFailed(UserError):
    """Every try to RESUME a node this run took DOWN failed: it is still DOWN. Not a usage
    mistake (exit code 1); the message names the node and the command that brings it back."""

    exit_code = 1

    def __init__(self, node: str, tries: int, error: Exception):
        fix = shlex.join(["sudo", *slurm_args.node_update_cmd(node, "RESUME")])
        super().__init__(f"{node} is still DOWN: RESUME failed {tries} times (last: {error}); "
                         f"bring it back with: {fix}")  # fmt: skip


class Interrupted(Exception):
    """A signal of SIGNALS arrived during a failure; the guard resumes the node first."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


_deferred: list[list[int]] = []  # the signals noted by the open `atomic` blocks, innermost last


def _on_signal(signum: int, _frame: Any) -> None:
    if _deferred:
        _deferred[-1].append(signum)
    else:
        raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGNALS raise `Interrupted` (so `finally` blocks run), or after the `atomic` block they
    arrive in; the old handlers are restored after. One handler for the whole block, so there
    is no moment without one. A SIGHUP that is ignored (`nohup`) stays ignored: the run then
    goes on to its planned end."""
    old = {s: signal.getsignal(s) for s in SIGNALS}
    for s, h in old.items():
        if not (s == signal.SIGHUP and h == signal.SIG_IGN):
            signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def atomic() -> Iterator[list[int]]:
    """An action and its event-log line go together (a Ctrl-C between them would leave a
    DOWN node unrecorded), and a RESUME is not cut short: inside `signals_raise`, signals in
    the block are noted (the list it yields) and raised as `Interrupted` after it."""
    got: list[int] = []
    _deferred.append(got)
    try:
        yield got
    finally:
        _deferred.pop()
    if got:
        raise Interrupted(got[0])


@dataclass
class Phase:
    """A point of the recovery timeline: what happened, when (s since the start), and how
    long the phase that ended there took (s since the previous point)."""

    name: str
    at_s: float
    took_s: float


@dataclass
class Outcome:
    """What happened: the phases with durations, and whether the replica came back."""

    plan: FailurePlan
    phases: list[Phase] = field(default_factory=list)
    recovered: bool | None = None  # None: not waited for
    new_node: str | None = None
    restarts: int | None = None  # Slurm's restart count of the task
    in_place: bool = False  # the launcher restarted the training in its allocation

    def to_dict(self) -> dict[str, Any]:
        t = self.plan.target
        return {
            "mode": self.plan.mode, "node": t.node, "job": t.job, "replica": t.replica,
            **({"rank": t.rank} if t.rank is not None else {}), "phases": [
                {"what": p.name, "at_s": round(p.at_s, 2), "took_s": round(p.took_s, 2)}
                for p in self.phases
            ],
            "recovered": self.recovered, "new_node": self.new_node, "restarts": self.restarts,
            "restarted_in_place": self.in_place,
        }  # fmt: skip


def _state_text(j: JobInfo) -> str:
    return f"{j.state} {j.reason}" if j.reason and j.reason != "None" else j.state


class _Execution:
    """One run of a plan: a handler per action kind (`HANDLERS`), the recovery timeline, and
    whether the node this run took DOWN still needs its RESUME (the guard in `execute`)."""

    def __init__(self, plan: FailurePlan, wait_recovered: bool, timeout: float, say: Say,
                 events_path: Path | None, poll: float, log_path: Path | None):  # fmt: skip
        self.plan, self.t, self.out = plan, plan.target, Outcome(plan)
        self.watch = wait_recovered and plan.target.replica is not None
        self.timeout, self.say, self.events_path, self.poll = timeout, say, events_path, poll
        self.owes_resume = False
        self.count_as_bad = False  # events marked so: the launcher counts them (failure_history.py)
        self.stopped: tuple[int, ...] = ()  # pids this run SIGSTOPped: the guard SIGCONTs them
        self.owes_cont_srun: tuple[str, ...] = ()  # the srun that SIGCONTs them on a cluster
        self.stalls: list[procs.ThreadStop] = []  # threads this run holds: the guard lets go
        self.owes_unstall_srun: tuple[str, ...] = ()  # the srun that ends a stall on a node
        self.slurm = client.current()
        self.t0, self.last = time.monotonic(), 0.0
        self.running_again: JobInfo | None = None
        t = plan.target
        if log_path is None and t.job is not None and t.replica is not None:
            log_path = logvocab.replica_log(t.job, t.replica)
        self.log_path = log_path
        self.banners_before = logvocab.count_banners(log_path) if log_path else 0
        # a run with warm spares: what the task holds (its slots sit beside its logs)
        self.slot = slot_of(t.job, t.replica, log_path.parent if log_path else None)

    def record(self, action: str, detail: str) -> None:
        """Append one event (JSON line) to the event log that `ftslurm report` reads."""
        from ftslurm.event_log import InjectedEvent, append_event, now_iso

        t = self.t
        job = str(t.job) if t.job is not None else None
        replica = t.replica
        if self.slot is not None:  # the replica is the slot the task holds (slots.py)
            replica = int(self.slot) if self.slot.isdigit() else None
            held = f"holds slot {self.slot}" if replica is not None else "a warm spare"
            detail = f"{detail} (array task {t.replica}: {held})"
        append_event(InjectedEvent(now_iso(), action, replica, t.node, job, detail,
                                   self.count_as_bad, t.rank), self.events_path)  # fmt: skip

    def target_text(self) -> str:
        """The target as the narration says it: in a run with warm spares array task i need
        not be replica i, so it is called a task, with the slot it holds."""
        if self.slot is None:
            return self.t.describe()
        held = f"holds slot {self.slot}" if self.slot.isdigit() else "a warm spare"
        return f"{self.t.describe('array task')}: {held}"

    def phase(self, name: str) -> None:
        at = time.monotonic() - self.t0
        self.out.phases.append(Phase(name, at, at - self.last))
        self.last = at

    def task(self) -> JobInfo | None:
        return self.slurm.array_tasks(self.t.job).get(self.t.replica)  # type: ignore[arg-type]

    def back(self) -> JobInfo | None:
        """The task, once it runs again after this failure (a higher restart count)."""
        cur = self.task()
        return cur if cur and cur.state == "RUNNING" and cur.restarts > self.t.restarts else None

    def left_running(self) -> JobInfo | None:
        cur = self.task()
        if cur is None or cur.state != "RUNNING" or cur.restarts > self.t.restarts:
            return cur or JobInfo(0, self.t.job, self.t.replica, "UNKNOWN")
        return None

    def wait_until(self, cond: Callable[[], Any], limit: float, what: str) -> Any:
        try:
            return wait_for(cond, limit, self.poll, what)
        except WaitTimeout as e:
            raise RecoveryTimeout(str(e)) from None

    def wait_left_running(self) -> None:
        key = self.t.task_key
        cur = self.wait_until(self.left_running, min(self.timeout, 60), f"{key} to stop")
        self.phase(f"task {key} left RUNNING ({_state_text(cur)})")

    def note_back(self, cur: JobInfo) -> None:
        self.running_again = cur
        self.phase(f"task {self.t.task_key} RUNNING again on {cur.node} (restarts {cur.restarts})")

    def resume(self, why: str) -> None:
        """RESUME the node, tried again with backoff (a busy controller, a lost reply); signals
        wait until it is done. When every try fails the node stays DOWN: the event log and
        `ResumeFailed` say so, and nothing claims that it was RESUMEd."""
        node = self.t.node
        with atomic():
            for wait in (*RESUME_WAITS_S, None):
                try:
                    self.slurm.update_node(node, "RESUME")
                    break
                except Exception as e:  # noqa: BLE001 - whatever failed: try again, then say it
                    if wait is None:
                        self.owes_resume = False  # given up: ResumeFailed says it, once
                        self.record("resume-failed", f"{why}: {e}")
                        raise ResumeFailed(node, len(RESUME_WAITS_S) + 1, e) from e
                    self.say(f"RESUME {node} failed ({e}); trying again in {wait:g} s")
                    time.sleep(wait)
            self.owes_resume = False
            self.record("resume", why)
            self.say(f"RESUMEd {node}" + (f" ({why})" if why != "planned" else ""))

    # ---- one handler per action kind

    def down(self, _: Action) -> None:
        t = self.t
        with atomic() as got:
            self.owes_resume = True  # before the call: a Ctrl-C may stop scontrol after DOWN
            try:
                self.slurm.update_node(t.node, "DOWN", self.plan.reason)
            except Exception:
                self.owes_resume = bool(got)  # scontrol refused (no root): nothing to undo
                raise
            self.record("node-down", f"State=DOWN Reason={self.plan.reason}")
            self.say(f"{t.node} set DOWN ({self.target_text()})")
        self.phase(f"DOWN {t.node}")
        if self.watch:
            self.wait_left_running()

    def wait(self, a: Action) -> None:
        end = time.monotonic() + a.seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
            for stop in self.stalls:  # a held worker that died: its parent must learn it
                procs.ptrace_poll(stop)
            if self.stalls and all(stop.exited for stop in self.stalls):
                self.say("every stalled worker exited (its launcher's watchdog ended it): "
                         "the stall is over")  # fmt: skip
                break
            if end - time.monotonic() <= 0:
                break  # time's up: an squeue now would only delay the RESUME
            if self.watch and self.running_again is None and (cur := self.back()):
                self.note_back(cur)  # back on a spare node while this one is DOWN

    def planned_resume(self, _: Action) -> None:
        self.resume("planned")
        self.phase(f"RESUME {self.t.node}")

    def requeue(self, a: Action) -> None:
        with atomic():
            self.slurm.requeue(a.argv[-1])
            self.record("requeue", shlex.join(a.argv))
            self.say(f"requeued {a.argv[-1]} ({self.target_text()})")
        self.phase(f"requeue {a.argv[-1]}")

    def kill_local(self, a: Action) -> None:
        with atomic():
            procs.kill_pids(list(a.pids), signal.SIGKILL)
            rank = f" (rank {self.t.rank})" if self.t.rank is not None else ""
            self.record("kill", f"SIGKILL to worker pid(s) {list(a.pids)}{rank}")
            self.say(f"SIGKILLed training worker pid(s) {list(a.pids)} ({self.target_text()})")
        self.phase(f"SIGKILL pid(s) {' '.join(map(str, a.pids))}")

    def kill_srun(self, a: Action) -> None:
        with atomic():
            try:
                self.slurm.call(a.argv, timeout=60)
            except CommandError as e:
                if e.returncode != 1:
                    raise
                rank = f" of rank {self.t.rank}" if self.t.rank is not None else ""
                raise UserError(  # pkill's exit code 1: nothing matched
                    f"no training worker{rank} matched on the node (starting or restarting?"
                    f"{' no such rank?' if rank else ''}); nothing was killed"
                ) from e
            self.record("kill", shlex.join(a.argv))
            self.say(f"SIGKILLed training worker(s) through srun ({self.target_text()})")
        self.phase("SIGKILL through srun")

    def stop_local(self, a: Action) -> None:
        with atomic():
            self.stopped = a.pids  # before the signal: a Ctrl-C right after it still undoes it
            procs.kill_pids(list(a.pids), signal.SIGSTOP)
            node = failure_modes.MODES[self.plan.mode].signals == "node"
            what = "every process of the node" if node else "training worker"
            self.record(self.plan.mode, f"SIGSTOP to {what} pid(s) {list(a.pids)}")
            self.say(f"SIGSTOPped {what} pid(s) {list(a.pids)} ({self.target_text()})")
        self.phase(f"SIGSTOP pid(s) {' '.join(map(str, a.pids))}")

    def cont_local(self, _: Action | None = None, why: str = "planned") -> None:
        with atomic():
            pids, self.stopped = self.stopped, ()
            procs.kill_pids(list(pids), signal.SIGCONT)  # the gone ones (the watchdog) skipped
            self.record("cont", f"SIGCONT to pid(s) {list(pids)} ({why})")
            self.say(f"SIGCONTed pid(s) {list(pids)}" + (f" ({why})" if why != "planned" else ""))
        if why == "planned":
            self.phase("SIGCONT")

    def stop_srun(self, a: Action) -> None:
        with atomic():
            self.slurm.call(a.argv, timeout=60)
            self.owes_cont_srun = next(b.argv for b in self.plan.actions if b.kind == "cont-srun")
            self.record(self.plan.mode, shlex.join(a.argv))
            self.say(f"SIGSTOPped training worker(s) through srun ({self.target_text()})")
        self.phase("SIGSTOP through srun")

    def cont_srun(self, _: Action | None = None, why: str = "planned") -> None:
        with atomic():
            argv, self.owes_cont_srun = self.owes_cont_srun, ()
            self.slurm.call(list(argv), timeout=60)
            self.record("cont", f"{shlex.join(argv)} ({why})")
            self.say("SIGCONTed training worker(s) through srun"
                     + (f" ({why})" if why != "planned" else ""))
        if why == "planned":
            self.phase("SIGCONT through srun")

    def stall_local(self, a: Action) -> None:
        """Stop the main thread of each worker (ptrace from this thread, which holds them
        until `unstall_local`); every other thread of the workers runs on."""
        with atomic():
            try:
                for pid in a.pids:
                    if (stop := procs.ptrace_stop(pid)) is not None:
                        self.stalls.append(stop)  # at once: the guard lets it go
            except OSError as e:  # EPERM past the check: a debugger attached already?
                stops, self.stalls = self.stalls, []  # none recorded: let them go unrecorded
                for stop in stops:
                    procs.ptrace_release(stop)
                raise UserError(f"--mode stall: {e}") from e
            if not self.stalls:
                raise UserError(f"the training worker(s) {list(a.pids)} exited before the "
                                "stall; nothing was stopped")  # fmt: skip
            tids = [s.tid for s in self.stalls]
            self.record("stall", f"ptrace stop of the main thread of training worker pid(s) "
                        f"{tids} (its other threads run on)")  # fmt: skip
            self.say(f"stopped the main thread of training worker pid(s) {tids} with ptrace "
                     f"({self.target_text()})")  # fmt: skip
        self.phase(f"ptrace stop of pid(s) {' '.join(map(str, tids))}")

    def unstall_local(self, _: Action | None = None, why: str = "planned") -> None:
        with atomic():
            stops, self.stalls = self.stalls, []
            gone = [s.tid for s in stops if not procs.ptrace_release(s)]
            went_on = [s.tid for s in stops if s.tid not in gone]
            exited = f"; exited while stalled: {gone}" if gone else ""
            self.record("cont", f"PTRACE_DETACH of pid(s) {went_on}{exited} ({why})")
            self.say(f"let the main thread of pid(s) {went_on} go on{exited}"
                     + (f" ({why})" if why != "planned" else ""))
        if why == "planned":
            self.phase("PTRACE_DETACH")

    def _stall_step(self, argv: tuple[str, ...], timeout: float) -> str:
        """An srun of `python -m ftslurm.stall` on the node: its stdout, or a UserError with
        its one line when it found no worker (exit 1) or may not ptrace them (exit 2)."""
        try:
            return self.slurm.call(argv, timeout=timeout).stdout
        except CommandError as e:
            if e.returncode == 1:
                raise UserError("no training worker matched on the node (starting or "
                                "restarting?); nothing was stalled") from e
            if e.returncode == 2:
                raise UserError(e.stderr.strip().splitlines()[-1] if e.stderr.strip()
                                else str(e)) from e  # fmt: skip
            raise

    def stall_check_srun(self, a: Action) -> None:
        out = self._stall_step(a.argv, 60)
        self.say(f"on the node: {out.strip()}")

    def stall_srun(self, a: Action) -> None:
        """The step that holds the stall (as long as it lasts): recorded as it starts, so a
        launcher that sees its worker die meanwhile knows the failure was injected."""
        with atomic():
            self.owes_unstall_srun = next(b.argv for b in self.plan.actions
                                          if b.kind == "unstall-srun")  # fmt: skip
            self.record("stall", shlex.join(a.argv))
            self.say(f"stopping the training worker(s)' main threads through srun for "
                     f"{self.plan.down_for:g} s ({self.target_text()})")  # fmt: skip
        self.phase("ptrace stop through srun")
        try:
            out = self._stall_step(a.argv, self.plan.down_for + 60)
        except UserError:
            self.unstall_srun(why="nothing was stalled")
            raise
        self.say(f"on the node: {'; '.join(out.strip().splitlines())}")

    def unstall_srun(self, _: Action | None = None, why: str = "planned") -> None:
        with atomic():
            argv, self.owes_unstall_srun = self.owes_unstall_srun, ()
            self.slurm.call(list(argv), timeout=60, check=False)  # exit 1: none was left
            self.record("cont", f"{shlex.join(argv)} ({why})")
            self.say("the stall on the node is over" + (f" ({why})" if why != "planned" else ""))
        if why == "planned":
            self.phase("stall over")

    def undo_stop(self) -> None:
        """The guard's half for stopped processes: SIGCONT them on every way out (threads a
        stall holds: let them go)."""
        if self.stopped:
            self.cont_local(why="guard: interrupted or failed")
        if self.owes_cont_srun:
            self.cont_srun(why="guard: interrupted or failed")
        if self.stalls:
            self.unstall_local(why="guard: interrupted or failed")
        if self.owes_unstall_srun:
            self.unstall_srun(why="guard: interrupted or failed")

    def in_place(self) -> JobInfo | None:
        """The task, once its launcher restarted the training in its allocation (job.py,
        FT_MAX_RESTARTS): still RUNNING, the same restart count, a new banner in its log."""
        log = self.log_path
        if log is None or logvocab.count_banners(log) <= self.banners_before:
            return None
        cur = self.task()
        good = cur and cur.state == "RUNNING" and cur.restarts == self.t.restarts
        return cur if good else None

    def recover(self) -> None:
        """Wait until the task runs again (restart count above the one seen at resolve time,
        state RUNNING, or restarted in place in its allocation) and, when its log is known,
        until its new attempt's launching line."""
        if self.plan.mode != "node-down":
            key = self.t.task_key

            def either() -> tuple[str, JobInfo] | None:
                if cur := self.in_place():
                    return "in place", cur
                return ("left", cur) if (cur := self.left_running()) else None

            how, cur = self.wait_until(either, min(self.timeout, 60),
                                       f"{key} to stop or restart in place")  # fmt: skip
            if how == "in place":  # no Slurm restart follows
                self.running_again, self.out.in_place = cur, True
                self.phase(f"task {key} restarted in place on {cur.node}")
            else:
                self.phase(f"task {key} left RUNNING ({_state_text(cur)})")
        if self.running_again is None:
            what = f"task {self.t.task_key} RUNNING again"
            self.note_back(self.wait_until(self.back, self.timeout, what))
        assert self.running_again is not None
        self.out.new_node, self.out.restarts = self.running_again.node, self.running_again.restarts
        log = self.log_path
        if log is not None and log.parent.exists():
            self.wait_until(lambda: logvocab.count_banners(log) > self.banners_before,
                            self.timeout, f"a new `launching` line in {log}")  # fmt: skip
            self.phase("new attempt's `launching replica` (or `launching spare`) line in its log")
        self.out.recovered = True


def slot_of(job: object, task: int | None, run_dir: Path | None = None) -> str | None:
    """What array `task` of a run with warm spares holds ("1", or "spare"); None otherwise.
    `run_dir`: the run's log folder [the default outputs' `tft-<job>`]."""
    if job is None or task is None:
        return None
    from ftslurm.replica import slots

    held = slots.task_slots(slots.slots_dir(run_dir or logvocab.run_dir(job)))
    return None if held is None else held.get(task, "spare")


HANDLERS: dict[ActionKind, Callable[[_Execution, Action], None]] = {
    "down": _Execution.down, "wait": _Execution.wait, "resume": _Execution.planned_resume,
    "requeue": _Execution.requeue, "kill-local": _Execution.kill_local,
    "kill-srun": _Execution.kill_srun, "stop-local": _Execution.stop_local,
    "cont-local": _Execution.cont_local, "stop-srun": _Execution.stop_srun,
    "cont-srun": _Execution.cont_srun, "stall-local": _Execution.stall_local,
    "unstall-local": _Execution.unstall_local, "stall-check-srun": _Execution.stall_check_srun,
    "stall-srun": _Execution.stall_srun, "unstall-srun": _Execution.unstall_srun,
}  # fmt: skip


def execute(
    plan: FailurePlan,
    *,
    wait_recovered: bool = False,
    timeout: float = 300.0,
    say: Say = _quiet,
    events_path: Path | None = None,
    poll: float = 0.25,
    log_path: Path | None = None,
    count_as_bad: bool = False,
) -> Outcome:
    """Run the plan. A node taken DOWN is RESUMEd on every way out (or `ResumeFailed` says it
    is not); each action is logged.

    With `wait_recovered`, wait until the task runs again and, when its log is known, until
    its new attempt's launching line appears. Each step is put on a timeline
    (`Outcome.phases`)."""
    run = _Execution(plan, wait_recovered, timeout, say, events_path, poll, log_path)
    run.count_as_bad = count_as_bad  # the FT launcher may hold it against the node
    with signals_raise():
        try:
            for a in plan.actions:
                HANDLERS[a.kind](run, a)
            if run.watch:
                run.recover()
        finally:
            try:
                run.undo_stop()  # the guard: every way out
            finally:
                if run.owes_resume:
                    run.resume("guard: interrupted or failed")
    return run.out


# --------------------------------------------------------------------------------------------
# Chaos


@dataclass
class ChaosSummary:
    events: list[Outcome] = field(default_factory=list)
    skipped: int = 0
    signum: int | None = None  # the signal that stopped it

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": [o.to_dict() for o in self.events],
            "skipped": self.skipped,
            "interrupted": self.signum is not None,
        }


def run_chaos(
    job: int,
    *,
    every: float,
    count: int,
    seed: int | None,
    make: Callable[[int], FailurePlan],
    say: Say = _quiet,
    events_path: Path | None = None,
    live: Callable[[dict[int, JobInfo]], set[int] | None] | None = None,
    wait_live: float = 0.0,
) -> ChaosSummary:
    """`count` failures, one every `every` seconds (the first at once, a later one no sooner
    than `every` after the previous), each on a random live replica. While fewer than two
    are live (`live(tasks)`: replicas training; None = Slurm's RUNNING only), it waits up to
    `wait_live` seconds, then skips the tick: the last live replica is never hit.
    `make(replica)` resolves and plans one failure (the command layer does the Slurm look-ups
    and safety checks). Each failure runs guarded by `execute`."""
    rng = random.Random(seed)
    summary = ChaosSummary()
    next_at = time.monotonic()

    def pick_now() -> tuple[int] | None:
        """A replica to fail now, in a tuple (replica 0 is falsy), or None."""
        tasks = client.current().array_tasks(job)
        pick = failure_plan.chaos_pick(tasks, rng, live(tasks) if live else None)
        return None if pick is None else (pick,)

    try:
        with signals_raise():
            for k in range(count):
                time.sleep(max(0.0, next_at - time.monotonic()))  # a signal raises in it
                t_tick = time.monotonic()
                try:
                    (pick,) = wait_for(pick_now, wait_live, 0.5, "2 live replicas")
                except WaitTimeout:
                    pick = None
                waited = time.monotonic() - t_tick
                stamp = time.strftime("%H:%M:%S")
                next_at = time.monotonic() + every
                if pick is None:
                    summary.skipped += 1
                    say(f"[{stamp}] event {k + 1}/{count}: skipped (fewer than 2 live replicas)")
                    continue
                try:
                    plan = make(pick)
                except UserError as e:
                    summary.skipped += 1
                    say(f"[{stamp}] event {k + 1}/{count}: skipped ({e})")
                    continue
                outcome = execute(plan, say=_quiet, events_path=events_path)
                summary.events.append(outcome)
                extra = failure_modes.MODES[plan.mode].held.format(s=f"{plan.down_for:g}")
                if waited >= 1:
                    extra += f" (waited {waited:.0f} s for 2 live replicas)"
                say(f"[{stamp}] event {k + 1}/{count}: {plan.mode} {plan.target.describe()}{extra}")
                next_at = max(next_at, time.monotonic())
    except Interrupted as e:
        summary.signum = e.signum
    return summary


def chaos_summary_line(summary: ChaosSummary) -> str:
    modes = Counter(o.plan.mode for o in summary.events)
    by_mode = ", ".join(f"{m} x{n}" for m, n in sorted(modes.items())) or "none"
    replicas = sorted(
        {o.plan.target.replica for o in summary.events if o.plan.target.replica is not None}
    )
    nodes = sorted({o.plan.target.node for o in summary.events if o.plan.mode == "node-down"})
    text = (
        f"chaos: {len(summary.events)} events ({by_mode}), {summary.skipped} skipped, "
        f"replicas hit: {replicas or 'none'}"
    )
    if nodes:
        text += f"; nodes resumed: {', '.join(nodes)}"
    if summary.signum is not None:
        text += " (interrupted)"
    return text


def hostname() -> str:
    """The node this command runs on (refused as a target)."""
    return socket.gethostname()
