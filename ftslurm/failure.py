"""Inject failures into a running FT job array: take a replica's node down, kill its training
worker, or requeue its task; then bring everything back and say how long recovery took.

Why a plan first: `--dry-run` must print exactly what a real run does, so the commands of a
failure are computed once (`make_plan`, pure once the target is resolved) and the executor
(`execute`) only runs them. The executor is guarded: a node it took DOWN is RESUMEd on every
way out (normal end, error, Ctrl-C, SIGTERM), and every action is appended to the event log
(`ftslurm.report.events`) so `ftslurm report` knows when a failure was *caused*, not only
when the logs noticed it.

Kill mode and process trees: torchrun starts its worker with start_new_session=True, so a
process-group kill misses the worker. We select processes by what they run instead: the
python interpreter running the training module (`python -u -m ftslurm.replica.train`, also
`torchtitan.train`), never torchrun, the launcher, slurmd or slurmstepd. On the local cluster
(every node shares this machine's /proc) the selection is also restricted to the node's UTS
namespace and to processes whose environment has the task's SLURM_JOB_ID, so no other job or
node is touched; on a real cluster the same regex goes to `pkill` through
`srun --overlap` on the node (the allocation is exclusive, so the node runs only this job),
limited to the node's UTS namespace; FTSLURM_KILL_VIA=srun takes that path on the local
cluster too, where the namespace limit keeps it on the node (a test does).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import re
import shlex
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftslurm import knobs, paths, procs
from ftslurm.errors import UserError
from ftslurm.resources import FT_JOB_NAME
from ftslurm.runner import CommandError
from ftslurm.slurm import args as slurm_args
from ftslurm.slurm import client
from ftslurm.slurm.parse import JobInfo, array_tasks

MODES = ("node-down", "kill", "requeue")
# The training worker, as torchrun starts it (`python -u -m <module> ...`). Anchored on the
# interpreter followed only by options, so torchrun's own command line (`python .../torchrun
# ... -m ftslurm.replica.train`) does not match. POSIX ERE: also valid for pkill -f.
TRAIN_CMD_RE = r"(^|/)python[0-9.]*( -[^ ]+)* -m (ftslurm\.replica\.train|torchtitan\.train)( |$)"
NEVER_KILL = ("slurmd", "slurmstepd", "slurmctld", "munged")

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --------------------------------------------------------------------------------------------
# Target resolution (pure)


@dataclass(frozen=True)
class Target:
    """What a failure hits: a node, and the FT array task running there (if any)."""

    node: str
    job: int | None = None  # the array job id
    replica: int | None = None  # the array task id
    raw_job_id: int | None = None  # Slurm's own id of that task (srun --jobid)
    restarts: int = 0  # the task's restart count when resolved

    @property
    def task_key(self) -> str | None:
        if self.job is None or self.replica is None:
            return None
        return f"{self.job}_{self.replica}"

    def describe(self) -> str:
        if self.replica is None:
            return f"node {self.node}"
        return f"replica {self.replica} of job {self.job} on {self.node}"


def is_ft_array_task(j: JobInfo) -> bool:
    """An array task of the FT script: its job name, or a stdout path under `torchft`."""
    return j.array_task_id is not None and (j.name == FT_JOB_NAME or "torchft" in j.stdout)


def newest_ft_job(jobs: list[JobInfo], user: str | None = None) -> int | None:
    """The newest (highest id) FT array with a task RUNNING or PENDING, of `user` if given."""
    ids = [
        j.array_job_id
        for j in jobs
        if is_ft_array_task(j)
        and j.array_job_id is not None
        and j.state in ("RUNNING", "PENDING")
        and (not user or not j.user or j.user == user)
    ]
    return max(ids) if ids else None


def _short(host: str) -> str:
    return host.split(".", 1)[0]


def check_node(
    node: str,
    cluster_nodes: dict[str, str],
    here: str,
    tasks_on_node: list[JobInfo],
    job: int | None,
    force: bool,
) -> None:
    """Refuse nodes a failure must not hit (UserError, one line): unknown ones, a login node,
    the node this command runs on, and (without --force) a node running no task of the job."""
    if _short(node).startswith("login"):
        raise UserError(f"refusing {node}: it is a login node")
    if node not in cluster_nodes:
        known = ", ".join(sorted(cluster_nodes)) or "none"
        raise UserError(f"node {node!r} is not in the cluster (nodes: {known})")
    if _short(node) == _short(here):
        raise UserError(f"refusing {node}: this command runs on it")
    if not tasks_on_node and not force:
        what = f"job {job}" if job is not None else "any FT job"
        raise UserError(
            f"refusing {node}: it runs no task of {what} (use --force to take it down anyway)"
        )


def resolve_target(
    jobs: list[JobInfo],
    cluster_nodes: dict[str, str],
    *,
    replica: int | None,
    node: str | None,
    job: int | None,
    here: str,
    user: str | None = None,
    force: bool = False,
) -> Target:
    """--replica I (the node running array task I of the job) or --node NAME -> Target, with
    every refusal checked. Pure: the caller passes squeue's jobs and sinfo's nodes."""
    if (replica is None) == (node is None):
        raise UserError("give exactly one of --replica I or --node NAME")
    if job is None:
        job = newest_ft_job(jobs, user)
        if job is None and replica is not None:
            raise UserError(
                f"no running FT job array found (job name {FT_JOB_NAME}): pass --job ID"
            )
    tasks = array_tasks(jobs, job) if job is not None else {}
    if replica is not None:
        t = tasks.get(replica)
        if t is None:
            have = ", ".join(str(i) for i in sorted(tasks)) or "none"
            raise UserError(f"job {job} has no array task {replica} (tasks: {have})")
        if t.state != "RUNNING" or not t.node:
            raise UserError(
                f"replica {replica} of job {job} is {t.state}"
                + (f" ({t.reason})" if t.reason else "")
                + ", not running on a node"
            )
        node = t.node
    assert node is not None
    on_node = [t for t in tasks.values() if t.state == "RUNNING" and t.node == node]
    check_node(node, cluster_nodes, here, on_node, job, force)
    if not on_node:
        return Target(node=node, job=job)
    t = on_node[0]
    return Target(
        node=node, job=job, replica=t.array_task_id, raw_job_id=t.job_id, restarts=t.restarts
    )


# --------------------------------------------------------------------------------------------
# The plan (pure)


@dataclass(frozen=True)
class Action:
    """One step of a failure: a command to run, a wait, or a signal to processes."""

    kind: str  # 'down' | 'resume' | 'wait' | 'requeue' | 'kill-local' | 'kill-srun'
    argv: tuple[str, ...] = ()
    seconds: float = 0.0
    pids: tuple[int, ...] = ()
    note: str = ""

    def line(self) -> str:
        """The action as the user would type it (dry run)."""
        if self.kind == "wait":
            return f"sleep {self.seconds:g}"
        if self.kind == "kill-local":
            text = "kill -KILL " + " ".join(str(p) for p in self.pids)
        else:
            text = shlex.join(self.argv)
        return f"{text}    # {self.note}" if self.note else text


@dataclass(frozen=True)
class FailurePlan:
    """A failure, resolved: the target and the exact actions, in order."""

    mode: str
    target: Target
    actions: tuple[Action, ...]
    down_for: float = 0.0
    reason: str = ""

    def lines(self) -> list[str]:
        return [a.line() for a in self.actions]

    def to_dict(self) -> dict[str, Any]:
        """The plan for `--dry-run --json`: the target and the exact commands, in order."""
        t = self.target
        return {
            "mode": self.mode, "node": t.node, "job": t.job, "replica": t.replica,
            "down_for": self.down_for, "reason": self.reason, "commands": self.lines(),
        }  # fmt: skip


def default_reason(mode: str) -> str:
    return f"ftslurm simulate-failure {mode} by {getpass.getuser()}"


@dataclass(frozen=True)
class KillSelection:
    """How kill mode finds the worker: local pids (local cluster) or srun + pkill."""

    local: bool
    pids: tuple[int, ...] = ()
    described: tuple[str, ...] = ()  # 'pid: cmdline' of what would be killed


# Run by `sh -c` on the node, as a step of the job (`srun --overlap`: works where the node runs
# only this job, an exclusive allocation): pkill limited to the UTS namespace of the step itself
# ($$, then pkill after exec), i.e. to the node. On a real node every process shares it; on a
# node of the local cluster (its own UTS namespace, but one /proc for all) it keeps pkill off
# the other nodes' replicas, so the very command a real cluster gets is tested here.
PKILL_ON_NODE = 'exec pkill --ns "$$" --nslist uts -KILL -f -- "$1"'


def make_plan(
    mode: str,
    target: Target,
    *,
    down_for: float = 30.0,
    reason: str | None = None,
    kill: KillSelection | None = None,
) -> FailurePlan:
    """The exact actions of one failure."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    reason = reason or default_reason(mode)
    acts: list[Action] = []
    if mode == "node-down":
        acts = [
            Action("down", tuple(slurm_args.node_update_cmd(target.node, "DOWN", reason))),
            Action("wait", seconds=down_for, note=f"{target.node} stays DOWN"),
            Action("resume", tuple(slurm_args.node_update_cmd(target.node, "RESUME"))),
        ]
    elif mode == "requeue":
        if target.task_key is None:
            raise UserError(f"--mode requeue needs a replica; {target.node} runs no task")
        acts = [Action("requeue", tuple(slurm_args.requeue_cmd(target.task_key)))]
    else:
        if target.raw_job_id is None:
            raise UserError(f"--mode kill needs a replica; {target.node} runs no task")
        kill = kill or KillSelection(local=False)
        if kill.local:
            if not kill.pids:
                raise UserError(
                    f"no training worker of job {target.task_key} found on {target.node} "
                    "(it may be starting or restarting; try again)"
                )
            acts = [
                Action(
                    "kill-local",
                    pids=kill.pids,
                    note="local cluster: training worker(s) " + "; ".join(kill.described)[:300],
                )
            ]
        else:
            acts = [
                Action(
                    "kill-srun",
                    tuple(slurm_args.srun_step_cmd(target.raw_job_id, target.node, [
                        "sh", "-c", PKILL_ON_NODE, "ftslurm-kill", TRAIN_CMD_RE])),
                    note="SIGKILL the training worker(s) on the node",
                )
            ]
    return FailurePlan(mode, target, tuple(acts), down_for if mode == "node-down" else 0, reason)


# --------------------------------------------------------------------------------------------
# Kill: finding the worker processes


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def is_training_worker(cmdline: list[str], comm: str = "", regex: str = TRAIN_CMD_RE) -> bool:
    """Pure: does this command line run the training module (not torchrun, not slurm)?"""
    if comm in NEVER_KILL or not cmdline:
        return False
    if os.path.basename(cmdline[0]) in NEVER_KILL:
        return False
    return re.search(regex, " ".join(cmdline)) is not None


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


def find_local_workers(ns: str, raw_job_id: int, regex: str = TRAIN_CMD_RE) -> KillSelection:
    """Training workers of Slurm job `raw_job_id` in the node namespace `ns`."""
    pids, described = [], []
    for pid in sorted(procs.pids_in_uts_ns(ns)):
        cmd = procs.cmdline(pid)
        if not is_training_worker(cmd, _comm(pid), regex):
            continue
        if _environ(pid).get("SLURM_JOB_ID") != str(raw_job_id):
            continue
        pids.append(pid)
        described.append(f"{pid}: {shlex.join(cmd)[:120]}")
    return KillSelection(local=True, pids=tuple(pids), described=tuple(described))


def kill_selection(target: Target) -> KillSelection:
    """Local pids on the local cluster; `srun` + `pkill` elsewhere, or anywhere with
    FTSLURM_KILL_VIA=srun (the real-cluster path, also right on the local cluster)."""
    via = knobs.get(os.environ, "FTSLURM_KILL_VIA")
    ns = None if via == "srun" else local_node_ns(target.node)
    if ns is None or target.raw_job_id is None:
        if via == "local":
            raise UserError(
                f"FTSLURM_KILL_VIA=local but {target.node} is not a node of the local cluster; "
                "unset it"
            )
        return KillSelection(local=False)
    return find_local_workers(ns, target.raw_job_id)


# --------------------------------------------------------------------------------------------
# The executor


class RecoveryTimeout(UserError):
    """The replica did not come back in time (not a usage mistake: exit code 1)."""

    exit_code = 1


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived during a failure; the guard resumes the node first."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT/SIGTERM raise `Interrupted` (so `finally` blocks run), restored after."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """While the guard resumes a node, a second Ctrl-C must not stop it: signals are noted
    and re-raised as `Interrupted` after the block."""
    got: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        got.append(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def atomic() -> Iterator[None]:
    """An action and its event-log line go together: a Ctrl-C between them would leave a
    DOWN node unrecorded. Signals in the block are re-raised as `Interrupted` after it."""
    with signals_deferred() as got:
        yield
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
    restarts: int | None = None
    killed: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        t = self.plan.target
        return {
            "mode": self.plan.mode, "node": t.node, "job": t.job, "replica": t.replica,
            "phases": [
                {"what": p.name, "at_s": round(p.at_s, 2), "took_s": round(p.took_s, 2)}
                for p in self.phases
            ],
            "recovered": self.recovered, "new_node": self.new_node, "restarts": self.restarts,
        }  # fmt: skip


def record(plan: FailurePlan, action: str, detail: str, events_path: Path | None = None) -> None:
    """Append one event (JSON line) to the event log that `ftslurm report` reads."""
    from ftslurm.report.events import InjectedEvent, append_event, now_iso

    t = plan.target
    append_event(
        InjectedEvent(
            time=now_iso(),
            action=action,
            replica=t.replica,
            node=t.node,
            job=str(t.job) if t.job is not None else None,
            detail=detail,
        ),
        events_path,
    )


def _log_path(job: int, replica: int) -> Path:
    return paths.torchft_runs_dir() / f"tft-{job}" / f"tft-{job}_{replica}.out"


def _attempt_banner_count(path: Path) -> int:
    """How many `launching replica` lines the log has (reads it in blocks, not at once)."""
    n = 0
    try:
        with open(path, "rb") as fh:
            carry = b""
            while chunk := fh.read(1 << 20):
                data = carry + chunk
                n += data.count(b"launching replica")
                carry = data[-32:]
                n -= carry.count(b"launching replica")
            n += carry.count(b"launching replica")
    except OSError:
        return 0
    return n


def _kill_through_srun(argv: tuple[str, ...]) -> None:
    try:
        client.call(argv, timeout=60)
    except CommandError as e:
        if e.returncode == 1:  # pkill: nothing matched
            raise UserError(
                "no training worker matched on the node (starting or restarting?); "
                "nothing was killed"
            ) from e
        raise


def _state_text(j: JobInfo) -> str:
    return f"{j.state} {j.reason}" if j.reason and j.reason != "None" else j.state


def execute(
    plan: FailurePlan,
    *,
    wait_recovered: bool = False,
    timeout: float = 300.0,
    say: Say = _quiet,
    events_path: Path | None = None,
    poll: float = 0.25,
    log_path: Path | None = None,
) -> Outcome:
    """Run the plan. A node taken DOWN is RESUMEd on every way out; each action is logged.

    With `wait_recovered`, wait until the task runs again (restart count above the one seen
    at resolve time, state RUNNING) and, when its log is known, until its new attempt's
    launching line appears. Each step is put on a timeline (`Outcome.phases`)."""
    t = plan.target
    out = Outcome(plan)
    down = False
    t0 = time.monotonic()
    last = 0.0
    running_again: JobInfo | None = None
    if log_path is None and t.job is not None and t.replica is not None:
        log_path = _log_path(t.job, t.replica)
    banners_before = _attempt_banner_count(log_path) if log_path else 0

    def phase(name: str) -> None:
        nonlocal last
        at = time.monotonic() - t0
        out.phases.append(Phase(name, at, at - last))
        last = at

    def back() -> JobInfo | None:
        cur = client.array_tasks(t.job).get(t.replica)  # type: ignore[arg-type]
        ok = cur and cur.state == "RUNNING" and cur.restarts > t.restarts
        return cur if ok else None

    def note_back(cur: JobInfo) -> None:
        nonlocal running_again
        running_again = cur
        phase(f"task {t.task_key} RUNNING again on {cur.node} (restarts {cur.restarts})")

    def left_running() -> JobInfo | None:
        if t.job is None or t.replica is None:
            return None
        cur = client.array_tasks(t.job).get(t.replica)
        if cur is None or cur.state != "RUNNING" or cur.restarts > t.restarts:
            return cur or JobInfo(0, t.job, t.replica, "UNKNOWN")
        return None

    def wait_until(cond: Callable[[], Any], limit: float, what: str) -> Any:
        deadline = time.monotonic() + limit
        while True:
            v = cond()
            if v:
                return v
            if time.monotonic() >= deadline:
                raise RecoveryTimeout(f"timed out after {limit:g} s waiting for {what}")
            time.sleep(poll)

    def resume(why: str) -> None:
        nonlocal down
        with signals_deferred() as got:
            client.update_node(t.node, "RESUME")
            down = False
            record(plan, "resume", why, events_path)
            say(f"RESUMEd {t.node}" + (f" ({why})" if why != "planned" else ""))
        if got:
            raise Interrupted(got[0])

    try:
        with signals_raise():
            for a in plan.actions:
                if a.kind == "down":
                    with signals_deferred() as got:
                        down = True  # before the call: a Ctrl-C may stop scontrol after DOWN
                        try:
                            client.update_node(t.node, "DOWN", plan.reason)
                        except Exception:
                            down = bool(got)  # scontrol refused (no root): nothing to undo
                            raise
                        record(plan, "node-down", f"State=DOWN Reason={plan.reason}", events_path)
                        say(f"{t.node} set DOWN ({t.describe()})")
                    if got:
                        raise Interrupted(got[0])
                    phase(f"DOWN {t.node}")
                    if wait_recovered and t.replica is not None:
                        cur = wait_until(left_running, min(timeout, 60), f"{t.task_key} to stop")
                        phase(f"task {t.task_key} left RUNNING ({_state_text(cur)})")
                elif a.kind == "wait":
                    end = time.monotonic() + a.seconds
                    while (left := end - time.monotonic()) > 0:
                        time.sleep(min(left, 0.5))
                        if end - time.monotonic() <= 0:
                            break  # time's up: an squeue now would only delay the RESUME
                        if wait_recovered and t.replica is not None and running_again is None:
                            if cur := back():  # back on a spare node while this one is DOWN
                                note_back(cur)
                elif a.kind == "resume":
                    resume("planned")
                    phase(f"RESUME {t.node}")
                elif a.kind == "requeue":
                    with atomic():
                        client.requeue(a.argv[-1])
                        record(plan, "requeue", shlex.join(a.argv), events_path)
                        say(f"requeued {a.argv[-1]} ({t.describe()})")
                    phase(f"requeue {a.argv[-1]}")
                elif a.kind == "kill-local":
                    with atomic():
                        procs.kill_pids(list(a.pids), signal.SIGKILL)
                        out.killed = a.pids
                        detail = f"SIGKILL to worker pid(s) {list(a.pids)}"
                        record(plan, "kill", detail, events_path)
                        say(f"SIGKILLed training worker pid(s) {list(a.pids)} ({t.describe()})")
                    phase(f"SIGKILL pid(s) {' '.join(map(str, a.pids))}")
                elif a.kind == "kill-srun":
                    with atomic():
                        _kill_through_srun(a.argv)
                        record(plan, "kill", shlex.join(a.argv), events_path)
                        say(f"SIGKILLed training worker(s) through srun ({t.describe()})")
                    phase("SIGKILL through srun")
            if wait_recovered and t.replica is not None:
                if plan.mode != "node-down":
                    cur = wait_until(left_running, min(timeout, 60), f"{t.task_key} to stop")
                    phase(f"task {t.task_key} left RUNNING ({_state_text(cur)})")
                if running_again is None:
                    note_back(wait_until(back, timeout, f"task {t.task_key} RUNNING again"))
                assert running_again is not None
                out.new_node, out.restarts = running_again.node, running_again.restarts
                if log_path is not None and log_path.parent.exists():
                    wait_until(
                        lambda: _attempt_banner_count(log_path) > banners_before,
                        timeout,
                        f"a new `launching replica` line in {log_path}",
                    )
                    phase("new attempt's `launching replica` line in its log")
                out.recovered = True
    finally:
        if down:
            try:
                resume("guard: interrupted or failed")
            except Interrupted:
                raise  # a second Ctrl-C after the node was resumed
            except Exception as e:  # noqa: BLE001 - say it, and let the first error through
                say(
                    f"WARNING: could not RESUME {t.node} ({e}); run by hand: "
                    + shlex.join(slurm_args.node_update_cmd(t.node, "RESUME"))
                )
    return out


# --------------------------------------------------------------------------------------------
# Chaos


@dataclass
class ChaosSummary:
    events: list[Outcome] = field(default_factory=list)
    skipped: int = 0
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": [o.to_dict() for o in self.events],
            "skipped": self.skipped,
            "interrupted": self.interrupted,
        }


def chaos_pick(
    tasks: dict[int, JobInfo], rng: random.Random, live: set[int] | None = None
) -> int | None:
    """A random live replica, or None when fewer than two are live: the last live replica is
    never hit. Live = RUNNING in Slurm and, when `live` is given (replicas whose current
    attempt is training), also in that set: a task that Slurm just restarted is RUNNING but
    still loading or healing, and hitting the only trained replica then would lose the run."""
    alive = sorted(
        i for i, j in tasks.items() if j.state == "RUNNING" and (live is None or i in live)
    )
    return rng.choice(alive) if len(alive) >= 2 else None


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
    try:
        with signals_raise():
            for k in range(count):
                while (wait := next_at - time.monotonic()) > 0:
                    time.sleep(min(wait, 0.5))
                t_tick = time.monotonic()
                while True:
                    tasks = client.array_tasks(job)
                    pick = chaos_pick(tasks, rng, live(tasks) if live else None)
                    if pick is not None or time.monotonic() - t_tick >= wait_live:
                        break
                    time.sleep(0.5)
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
                extra = f", {plan.down_for:g} s down, resumed" if plan.mode == "node-down" else ""
                if waited >= 1:
                    extra += f" (waited {waited:.0f} s for 2 live replicas)"
                say(f"[{stamp}] event {k + 1}/{count}: {plan.mode} {plan.target.describe()}{extra}")
                next_at = max(next_at, time.monotonic())
    except Interrupted:
        summary.interrupted = True
    return summary


def chaos_summary_line(summary: ChaosSummary) -> str:
    modes: dict[str, int] = {}
    for o in summary.events:
        modes[o.plan.mode] = modes.get(o.plan.mode, 0) + 1
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
    if summary.interrupted:
        text += " (interrupted)"
    return text


def hostname() -> str:
    """The node this command runs on (refused as a target)."""
    return socket.gethostname()
