"""What a failure does, decided before anything runs: the target it hits, the exact actions
in order, and chaos mode's choice of replica. Pure: a function of what the caller passes
(squeue's jobs, sinfo's nodes, the workers found on the node), so it is tested on recorded
output; `ftslurm.failure` runs the plan.

Why a plan first: `--dry-run` must print exactly what a real run does, so the commands of a
failure are computed once (`make_plan`) and the executor only runs them.

Kill mode and process trees: torchrun starts its worker with start_new_session=True, so a
process-group kill misses the worker. We select processes by what they run instead: the
python interpreter running the training module (TRAIN_CMD_RE), never torchrun, the launcher,
slurmd or slurmstepd; on a real cluster through `pkill` on the node (PKILL_ON_NODE).
"""

from __future__ import annotations

import getpass
import os
import random
import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from ftslurm import failure_modes
from ftslurm.errors import UserError
from ftslurm.resources import FT_JOB_NAME
from ftslurm.slurm import args as slurm_args
from ftslurm.slurm.parse import JobInfo, array_tasks

MODES = failure_modes.NAMES
SILENT_MODES = failure_modes.SILENT
ActionKind = Literal["down", "wait", "resume", "requeue", "kill-local", "kill-srun",
                     "stop-local", "cont-local", "stop-srun", "cont-srun", "stall-local",
                     "unstall-local", "stall-check-srun", "stall-srun", "unstall-srun"]  # fmt: skip
# The training worker, as torchrun starts it (`python -u -m <module> ...`), or the tiny
# preset's worker. Anchored on the interpreter followed only by options, so torchrun's own
# command line (`python .../torchrun ... -m ftslurm.replica.worker.train`) does not match. POSIX
# ERE: also valid for pkill -f.
TRAIN_CMD_RE = (r"(^|/)python[0-9.]*( -[^ ]+)* -m "
                r"(ftslurm\.replica\.worker\.(train|tiny)|torchtitan\.train)( |$)")
NEVER_KILL = ("slurmd", "slurmstepd", "slurmctld", "munged")


@dataclass(frozen=True)
class Target:
    """What a failure hits: a node, and the FT array task running there (if any)."""

    node: str
    job: int | None = None  # the array job id
    replica: int | None = None  # the array task id
    raw_job_id: int | None = None  # Slurm's own id of that task (srun --jobid)
    restarts: int = 0  # the task's restart count when resolved
    rank: int | None = None  # kill mode: only the worker of this rank of the replica (RANK)

    @property
    def task_key(self) -> str | None:
        if self.job is None or self.replica is None:
            return None
        return f"{self.job}_{self.replica}"

    def describe(self, noun: str = "replica") -> str:
        """`noun`: "array task" in a run with warm spares, where task i need not be replica i."""
        if self.replica is None:
            return f"node {self.node}"
        rank = f"rank {self.rank} of " if self.rank is not None else ""
        return f"{rank}{noun} {self.replica} of job {self.job} on {self.node}"


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


def ft_job(jobs: list[JobInfo], user: str | None = None) -> int:
    """`newest_ft_job`, or a UserError saying to name the job."""
    job = newest_ft_job(jobs, user)
    if job is None:
        raise UserError(f"no running FT job array found (job name {FT_JOB_NAME}): pass --job ID")
    return job


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
    if job is None:  # a node is enough without a job
        job = newest_ft_job(jobs, user) if replica is None else ft_job(jobs, user)
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


LOCAL_SIGNALS = {"kill-local": "KILL", "stop-local": "STOP", "cont-local": "CONT"}
# stall on the local cluster: ptrace(2) from this process, on the workers' main threads
LOCAL_PTRACE = {"stall-local": "PTRACE_SEIZE+PTRACE_INTERRUPT", "unstall-local": "PTRACE_DETACH"}


@dataclass(frozen=True)
class Action:
    """One step of a failure: a command to run, a wait, or a signal to processes."""

    kind: ActionKind
    argv: tuple[str, ...] = ()
    seconds: float = 0.0
    pids: tuple[int, ...] = ()
    note: str = ""

    def line(self) -> str:
        """The action as the user would type it (dry run)."""
        if self.kind == "wait":
            return f"sleep {self.seconds:g}"
        if self.kind in LOCAL_SIGNALS:
            text = f"kill -{LOCAL_SIGNALS[self.kind]} " + " ".join(str(p) for p in self.pids)
        elif self.kind in LOCAL_PTRACE:
            text = f"ptrace {LOCAL_PTRACE[self.kind]} " + " ".join(str(p) for p in self.pids)
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
            **({"rank": t.rank} if t.rank is not None else {}),  # --rank: one rank's worker
            "down_for": self.down_for, "reason": self.reason, "commands": self.lines(),
        }  # fmt: skip


@dataclass(frozen=True)
class KillSelection:
    """How kill mode finds the worker: local pids (local cluster) or srun + pkill."""

    local: bool
    pids: tuple[int, ...] = ()
    described: tuple[str, ...] = ()  # 'pid: cmdline' of what would be killed
    python: str = "python3"  # stall through srun: the interpreter on the node (FTSLURM_PYTHON)


# Run by `sh -c` on the node, as a step of the job (`srun --overlap`: works where the node runs
# only this job, an exclusive allocation): pkill limited to the UTS namespace of the step itself
# ($$, then pkill after exec), i.e. to the node. On a real node every process shares it; on a
# node of the local cluster (its own UTS namespace, but one /proc for all) it keeps pkill off
# the other nodes' replicas, so the very command a real cluster gets is tested here.
PKILL_ON_NODE = 'exec pkill --ns "$$" --nslist uts -KILL -f -- "$1"'


# The same for one rank of the replica (`--rank K`): the workers matching "$1" whose
# environment holds RANK="$2" (each of torchrun's workers has its own; the rank within the
# replica, as torchft's `/<rank>` and the checksum lines say it). Exit 1 when none matched,
# as pkill's.
KILL_RANK_ON_NODE = ('k=1; for p in $(pgrep --ns "$$" --nslist uts -f -- "$1"); do '
                     'if tr "\\0" "\\n" < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; '
                     'then kill -KILL "$p" && k=0; fi; done; exit $k')


def pkill_on_node(sig: str) -> str:
    """PKILL_ON_NODE with another signal (STOP, CONT)."""
    return PKILL_ON_NODE.replace("-KILL", f"-{sig}")


# Stall on a real cluster: ptrace reaches only the processes of its own machine, so the node
# runs `python -m ftslurm.stall` ("$2": FTSLURM_PYTHON) on the training workers that match "$1"
# in the step's UTS namespace (as PKILL_ON_NODE finds them); "$3" check|stall, "$4" seconds.
# Exit 1 when none matched, as pkill's. The step lasts as long as the stall: the helper holds
# the threads, and its end, however it comes, lets them go.
STALL_ON_NODE = ('p=$(pgrep -d, --ns "$$" --nslist uts -f -- "$1") || exit 1; '
                 'exec "$2" -m ftslurm.stall "$3" "$p" ${4:+"$4"}')
# ... and its early end (an interrupted injector; the planned end finds none left): SIGTERM to
# the helpers on the node, which let the threads go. The pattern cannot match this script.
STALL_HELPER_RE = r" -m ftslurm\.stall stall "
UNSTALL_ON_NODE = pkill_on_node("TERM")


def _stall_actions(target: Target, down_for: float, kill: KillSelection | None) -> list[Action]:
    """stall: stop only the main thread of each training worker (ptrace), hold it
    `down_for` s, let it go. Its other threads run on: torchft's heartbeat to the
    Lighthouse, the process group's threads; what a CUDA kernel or an NCCL call that never
    returns leaves running. On the local cluster this process holds the threads; on a real
    one `python -m ftslurm.stall` does, on the node, for the length of an srun step."""
    if kill and kill.local:
        if not kill.pids:
            raise UserError(f"no training worker of job {target.task_key} found on "
                            f"{target.node} (it may be starting or restarting; try again)")
        note = "local cluster: the main thread of the training worker(s): " + \
            "; ".join(kill.described)[:300]
        return [Action("stall-local", pids=kill.pids, note=note),
                Action("wait", seconds=down_for, note="their main threads stay stopped, "
                       "their other threads run on"),
                Action("unstall-local", pids=kill.pids, note="undo: the main threads go on")]
    assert target.raw_job_id is not None
    python = kill.python if kill else "python3"

    def on_node(*script: str) -> tuple[str, ...]:
        return tuple(slurm_args.srun_step_cmd(target.raw_job_id, target.node, list(script)))

    helper = ("sh", "-c", STALL_ON_NODE, "ftslurm-stall", TRAIN_CMD_RE, python)
    return [
        Action("stall-check-srun", on_node(*helper, "check"),
               note="find the training worker(s) on the node; may ptrace stop them?"),
        Action("stall-srun", on_node(*helper, "stall", f"{down_for:g}"),
               note=f"stop their main threads, hold {down_for:g} s, let them go (the step "
               "lasts that long; their other threads run on)"),
        Action("unstall-srun", on_node("sh", "-c", UNSTALL_ON_NODE, "ftslurm-unstall",
                                       STALL_HELPER_RE),
               note="undo: end any stall helper left on the node (none, as planned)"),
    ]


def _silent_actions(mode: str, target: Target, down_for: float,
                    kill: KillSelection | None) -> list[Action]:  # fmt: skip
    """hang: SIGSTOP the replica's training workers (what a GPU or NCCL hang stops; the
    launcher and its watchdog run on), wait, SIGCONT. freeze-node: SIGSTOP every process of
    the node (slurmd, the job's steps, the launcher, the workers: Slurm stops hearing from
    it, as after a power loss or a kernel hang), wait, SIGCONT. Nothing closes a socket."""
    what = {"hang": "the training worker(s)", "freeze-node": f"every process of {target.node}"}
    if kill and kill.local:
        if not kill.pids:
            raise UserError(f"no process of job {target.task_key} found on {target.node} (it "
                            "may be starting or restarting; try again)")  # fmt: skip
        note = f"local cluster: {what[mode]}: " + "; ".join(kill.described)[:300]
        return [Action("stop-local", pids=kill.pids, note=note),
                Action("wait", seconds=down_for, note=f"{what[mode]} stay stopped"),
                Action("cont-local", pids=kill.pids, note="undo: every stopped process goes on")]
    if mode == "freeze-node":
        raise UserError(f"--mode freeze-node stops a node of the local cluster by pid; "
                        f"{target.node} is not one (on a real cluster, power the node off "
                        "through its BMC, or use --mode hang)")  # fmt: skip
    assert target.raw_job_id is not None
    argv = {sig: tuple(slurm_args.srun_step_cmd(
        target.raw_job_id, target.node,
        ["sh", "-c", pkill_on_node(sig), "ftslurm-hang", TRAIN_CMD_RE]))
        for sig in ("STOP", "CONT")}
    return [Action("stop-srun", argv["STOP"], note="SIGSTOP the training worker(s) on the node"),
            Action("wait", seconds=down_for, note=f"{what[mode]} stay stopped"),
            Action("cont-srun", argv["CONT"], note="undo: SIGCONT them")]


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
    if target.rank is not None and mode != "kill":
        raise UserError(f"--rank {target.rank}: only with --mode kill (one rank's worker; "
                        f"--mode {mode} hits the whole replica)")  # fmt: skip
    reason = reason or f"ftslurm simulate-failure {mode} by {getpass.getuser()}"
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
    elif mode == "freeze-node" and kill and kill.local:
        acts = _silent_actions(mode, target, down_for, kill)
    elif mode in SILENT_MODES and target.raw_job_id is None:
        raise UserError(f"--mode {mode} needs a replica; {target.node} runs no task")
    elif mode == "stall":
        acts = _stall_actions(target, down_for, kill)
    elif mode in SILENT_MODES:
        acts = _silent_actions(mode, target, down_for, kill)
    elif target.raw_job_id is None:
        raise UserError(f"--mode kill needs a replica; {target.node} runs no task")
    elif kill and kill.local:
        if not kill.pids:
            rank = f" of rank {target.rank}" if target.rank is not None else ""
            raise UserError(
                f"no training worker{rank} of job {target.task_key} found on {target.node} "
                "(it may be starting or restarting; try again)"
            )
        note = "local cluster: training worker(s) " + "; ".join(kill.described)[:300]
        acts = [Action("kill-local", pids=kill.pids, note=note)]
    elif target.rank is not None:
        script = ["sh", "-c", KILL_RANK_ON_NODE, "ftslurm-kill", TRAIN_CMD_RE, str(target.rank)]
        argv = tuple(slurm_args.srun_step_cmd(target.raw_job_id, target.node, script))
        acts = [Action("kill-srun", argv,
                       note=f"SIGKILL the training worker of rank {target.rank} on the node")]
    else:
        pkill = ["sh", "-c", PKILL_ON_NODE, "ftslurm-kill", TRAIN_CMD_RE]
        argv = tuple(slurm_args.srun_step_cmd(target.raw_job_id, target.node, pkill))
        acts = [Action("kill-srun", argv, note="SIGKILL the training worker(s) on the node")]
    timed = failure_modes.MODES[mode].timed
    return FailurePlan(mode, target, tuple(acts), down_for if timed else 0, reason)


def is_training_worker(cmdline: list[str], comm: str = "", regex: str = TRAIN_CMD_RE) -> bool:
    """Pure: does this command line run the training module (not torchrun, not slurm)?"""
    if comm in NEVER_KILL or not cmdline:
        return False
    if os.path.basename(cmdline[0]) in NEVER_KILL:
        return False
    return re.search(regex, " ".join(cmdline)) is not None


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
