"""What the launcher does when a training run ends: one decision, made by `decide`.

Why one function: the end of a run is read from several places (the worker's exit code, a
signal, Slurm's time-limit file and the worker's note that it stopped before STEPS, a newer
claim on the slot, torchtitan refusing its options, a failed pre-flight check), and the next
step depends on the failure history and on the node. Spread over the launcher's functions,
a finished run could be requeued as a time limit. Here every case is a row of one table
(tests/test_replica_lifecycle.py), in the order the launcher weighs them:

| what ended the run                               | action                 | exit code         |
|--------------------------------------------------|------------------------|-------------------|
| exit 0, time-limit signal, stopped before STEPS  | REQUEUE_AT_TIME_LIMIT  | exits.TIME_LIMIT  |
| a newer claim on the slot (fenced), no signal    | BECOME_SPARE           | exits.FENCED      |
| classic (not FT) job                             | STOP                   | the code, or 2    |
| exit 0 (training reached STEPS)                  | FINISH                 | 0                 |
| the history says no (signal, refused, a cap)     | STOP                   | the code, or 2    |
| not inside a Slurm job array                     | STOP                   | the code          |
| a crash, node usable, restarts left, no signal   | RESTART_IN_PLACE       | exits.RESTART_... |
| otherwise                                        | REQUEUE (avoid nodes)  | the code          |

The facts that cost something are asked for only when a row needs them: `verdict` records the
failure in the task's history and may take the node out (preflight.after_failure), so a run
that finished or stopped at the time limit records nothing; `in_place` asks Slurm for the
node's state (sinfo), only for a failure that could restart in place.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ftslurm.replica import exits, handoff


class Act(enum.Enum):
    FINISH = "finish"
    REQUEUE_AT_TIME_LIMIT = "requeue at the time limit"
    BECOME_SPARE = "become a spare"
    STOP = "stop"
    RESTART_IN_PLACE = "restart in place"
    REQUEUE = "requeue"


@dataclass(frozen=True)
class Ended:
    """How a training run ended, as the launcher saw it."""

    code: int  # the exit code (128 + N for a signal N)
    ft: bool = True  # a fault-tolerant replica (False: the classic multi-node job)
    cancelled: bool = False  # a stop signal came from Slurm or the user (forwarded)
    time_limit: bool = False  # Slurm's time-limit signal came (the launcher's file)
    stopped_early: bool = False  # the worker saved its final checkpoint before STEPS
    fenced: bool = False  # a newer claim took this replica's slot (standby.py)
    refused: str | None = None  # torchtitan refused its options (config_error.py)
    preflight: str | None = None  # the evidence of a failed pre-flight check


@dataclass
class Signals:
    """The signals that reached this launcher in its life (every run of it, restarts in place
    included), set by its handlers and read when a run ends: one object for what were flags in
    module-level lists of job.py."""

    # the first SIGTERM / SIGINT / SIGHUP's number (None: none came): Slurm is ending the
    # allocation (or a user is), so nothing restarts in it, also when it comes between two runs
    stopped: int | None = None
    # Slurm's time-limit signal (SIGUSR1) came before a run's own handler (during the pre-flight
    # check, the asset build or between two runs), or during a run: the next run saves and stops
    time_limit: bool = False

    def stop(self, signum: int) -> None:
        """A stop signal came; the first one's number is kept."""
        if self.stopped is None:
            self.stopped = signum

    def clear(self) -> None:
        self.stopped, self.time_limit = None, False


@dataclass(frozen=True)
class Notes:
    """The files a training run and its launcher leave each other, in the run's own folder
    (the attempt's temporary folder, or a warm next run's): torchtitan's refusal of its
    options (config_error.py), a newer claim that fenced the run (standby.py), the slot it
    holds, its progress (the watchdog reads it), and Slurm's time-limit signal (the launcher
    touches it; the worker says beside it that it stopped before STEPS, ft_checkpoints.py)."""

    folder: Path

    @property
    def config_error(self) -> Path:
        return self.folder / "config-error"

    @property
    def fenced(self) -> Path:
        return self.folder / "fenced"

    @property
    def slot(self) -> Path:
        return self.folder / "slot"

    @property
    def progress(self) -> Path:
        return self.folder / "progress"

    @property
    def time_limit(self) -> Path:
        return self.folder / "time-limit"

    @property
    def go(self) -> Path:
        """A warm next run waits for this file before torchft's Manager (warm_restart.py)."""
        return self.folder / "go"

    def ended(self, code: int, ft: bool, cancelled: bool, refused: str | None) -> Ended:
        """How the run ended, from its exit `code`, the signals and these files."""
        return Ended(code, ft=ft, cancelled=cancelled, time_limit=self.time_limit.exists(),
                     stopped_early=handoff.stopped_early_note(self.time_limit).exists(),
                     fenced=self.fenced.exists(), refused=refused)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """The failure history's answer (preflight.after_failure): requeue or not, why, and the
    nodes a requeue must avoid (a node taken out)."""

    requeue: bool
    why: str
    avoid: tuple[str, ...] = ()


@dataclass(frozen=True)
class InPlace:
    """Whether this allocation may run the next attempt."""

    stop_signal: bool  # a stop signal came: Slurm ends the allocation
    time_limit_early: bool  # Slurm's time-limit signal came: the requeue goes on from there
    used: int  # restarts in place used (FTSLURM_RESTART)
    cap: int  # FT_MAX_RESTARTS
    node: str
    # the node's state as sinfo says (None: it does not know the node) and whether a run may
    # start in it; asked last, only when nothing else rules a restart in place out
    state: Callable[[], tuple[str | None, bool]]


@dataclass(frozen=True)
class Action:
    act: Act
    exit_code: int
    why: str = ""  # for the log
    avoid: tuple[str, ...] = ()  # REQUEUE: nodes the requeued task must not start on
    note: str = ""  # a line to say before the action's own, "" for none
    outside_array: bool = False  # STOP: a requeue was due, but not inside a Slurm job array
    where: InPlace | None = None  # RESTART_IN_PLACE: the allocation it restarts in
    state: str | None = None  # RESTART_IN_PLACE: the node's state


def _restart_in_place(where: InPlace) -> tuple[str | None, str]:
    """The node's state when the run restarts in this allocation (else None), and the line
    that says why not ("" when there is nothing to say: a stop signal, or restarts in place
    switched off)."""
    if where.stop_signal or not where.cap:
        return None, ""
    if where.time_limit_early:
        return None, "not restarting in place: Slurm's time-limit signal came; requeueing"
    if where.used >= where.cap:
        return None, (f"restarts in place used up ({where.used} of FT_MAX_RESTARTS="
                       f"{where.cap}): requeueing through Slurm")  # fmt: skip
    state, usable = where.state()
    if state is None or not usable:
        return None, f"not restarting in place: node {where.node} is {state or 'unknown to sinfo'}"
    return state, ""


FINISHED_AT_THE_LIMIT = (
    "training finished: Slurm's time-limit signal came during its last step, after which "
    "there is nothing to resume (not requeueing)"
)


def decide(ended: Ended, verdict: Callable[[], Verdict], in_array: bool,
           in_place: Callable[[], InPlace]) -> Action:  # fmt: skip
    """The launcher's next step after a training run ended (the table in the module's
    docstring). `verdict` and `in_place` are called only for the rows that need them."""
    code = ended.code
    signalled = ended.time_limit and not ended.cancelled
    if code == 0 and signalled and ended.stopped_early:
        return Action(Act.REQUEUE_AT_TIME_LIMIT, exits.TIME_LIMIT,
                      "Slurm's time-limit signal: final checkpoint saved before STEPS")  # fmt: skip
    note = FINISHED_AT_THE_LIMIT if code == 0 and signalled else ""
    if ended.fenced and not ended.cancelled:
        return Action(Act.BECOME_SPARE, exits.FENCED, "a newer claim took this replica's slot",
                      note=note)  # fmt: skip
    failed_code = exits.CONFIG_ERROR if ended.refused else code
    if not ended.ft:
        return Action(Act.FINISH if code == 0 else Act.STOP, failed_code, "classic job")
    judged = verdict()
    if not judged.requeue:
        return Action(Act.FINISH if code == 0 else Act.STOP, failed_code, judged.why,
                      note=note)  # fmt: skip
    if not in_array:
        return Action(Act.STOP, code, judged.why, outside_array=True)
    note = ""
    if ended.preflight is None and not judged.avoid:
        where = in_place()
        state, note = _restart_in_place(where)
        if state is not None:
            return Action(Act.RESTART_IN_PLACE, exits.RESTART_IN_PLACE, judged.why,
                          where=where, state=state)  # fmt: skip
    return Action(Act.REQUEUE, code, judged.why, judged.avoid, note)
