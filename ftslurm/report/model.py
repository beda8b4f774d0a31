"""The report's data model: what `timeline.py` builds and `render.py` reads.

Plain dataclasses with no behaviour beyond derived figures, so that the state machine and the
renderers depend on this module and never on each other (the renderings of a Report are in
`render.py`; `ftslurm.report.build_report` returns a `render.RenderedReport`, a Report with
them as methods). Times are the logs' wall clock in seconds since the epoch (see `logvocab.Event`);
replica keys are `<prefix>_<i>` unless a field says it holds the full `<prefix>_<i>:<uuid>` id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftslurm.logvocab import split_replica_id
from ftslurm.report.reader import ParseStats

# one quorum change of the logs; its home is the run model's quorum types
from ftslurm.run.quorum import QuorumChange as Quorum


def replica_key(rid: str) -> tuple[str, str]:
    """Full (`prefix_i:uuid`) or Rust-side (`prefix_i`) id -> (`prefix_i`, index `"i"`); an
    id without an index is both."""
    prefix, index, _ = split_replica_id(rid)
    if index is None:
        return rid, rid
    return f"{prefix}_{index}", str(index)


def elapsed(start: float | None, end: float | None) -> float | None:
    """`end - start`, never below 0; None when either is unknown.

    The two times often come from different clocks (the event log's controller, the
    Lighthouse's node, a replica's node) that disagree by seconds, or from one clock that was
    set back: a negative difference is such a disagreement, not a duration. The report says
    where it happened (`Report.clock_back`) and counts the duration as 0.
    """
    if start is None or end is None:
        return None
    return max(0.0, end - start)


def went_back(start: float | None, end: float | None) -> float:
    """How far `end` is before `start` (0 when it is not, or a time is unknown)."""
    if start is None or end is None or end >= start:
        return 0.0
    return start - end


@dataclass
class Failure:
    """A replica that left a quorum or came back under a new uuid; `time_source` says how its
    time is known, since logs show only when the failure was noticed."""

    time: float | None
    replica: str  # index
    replica_id: str
    step: int | None
    kind: str  # injected action, "left-quorum", "restarted"
    time_source: str  # "injected" | "commit-failure" | "quorum-change" | "injected-only"
    detected_time: float | None = None
    last_seen_time: float | None = None
    quorum_id: int | None = None
    node: str = ""
    next_commit_time: float | None = None
    next_commit_step: int | None = None
    survivor: str | None = None
    quorum_pair: tuple[int, int] | None = field(default=None, repr=False)  # (prev, new) index
    survivors: int | None = None  # members of the quorum that showed it
    full_quorum_time: float | None = None  # the next quorum at the group size (from that one)
    full_strength_time: float | None = None  # the failed slot's first commit in that quorum
    false_drop: bool = False  # left the quorum, yet the same process (uuid) came back
    rank: int | None = None  # the one rank of the replica an injected kill hit, if one

    @property
    def to_next_commit_s(self) -> float | None:
        """From the failure to the survivor's next committed step (>= 0, see `elapsed`)."""
        return elapsed(self.time, self.next_commit_time)

    @property
    def detected_end(self) -> float | None:
        """Where detection ends: the survivors' next commit, or the quorum back at the group
        size if that came first (a warm spare in the quorum before the survivors committed
        again): the three phases then do not overlap, and add up to the time to full
        strength."""
        ends = [t for t in (self.next_commit_time, self.full_quorum_time) if t is not None]
        if self.next_commit_time is None:
            return None
        return min(ends)

    @property
    def detection_s(self) -> float | None:
        """Failure -> survivors' next commit (or the group whole again, if sooner): what the
        heartbeat timeout costs."""
        return elapsed(self.time, self.detected_end)

    @property
    def degraded_s(self) -> float | None:
        """End of detection -> the quorum is back at the group size."""
        return elapsed(self.detected_end, self.full_quorum_time)

    @property
    def healing_s(self) -> float | None:
        """Quorum back at the group size -> the replica in the failed slot has committed."""
        return elapsed(self.full_quorum_time, self.full_strength_time)

    @property
    def time_to_full_strength_s(self) -> float | None:
        """Failure -> the quorum is back at the group size and the healed replica has
        committed a step (= detection + degraded + healing where the clocks agree)."""
        return elapsed(self.time, self.full_strength_time)


@dataclass
class CommitFailure:
    """A step a replica failed to commit (what a survivor sees first of a peer's failure)."""

    time: float | None
    replica: str
    replica_id: str
    step: int
    detail: str


@dataclass
class Attempt:
    """One life of a replica process: the first, then one per restart (a new uuid)."""

    replica: str
    number: int  # 0 = first seen, then one per restart
    start_time: float | None
    source: str  # "launch" | "manager-start" | "first-seen"
    uuid: str | None = None
    node: str = ""
    restart_time: float | None = None  # injected resume/requeue/restart before it, if any
    restart_source: str = ""
    quorum_time: float | None = None  # first quorum with this uuid
    healed_step: int | None = None
    healed_time: float | None = None  # first committed step of this attempt
    manager_started: bool = False
    launch_number: int | None = None  # the launcher's own attempt number (Slurm restarts)
    restart: int = 0  # the launcher's restart in place within that attempt (not a requeue)
    # a warm spare's task that claimed the replica's slot (its banner's `taken from task U`):
    # this attempt began at the claim, on another node, not at a requeue of the failed task
    claimed: bool = False


@dataclass
class Recovery:
    """A heal: a restarted replica fetching the state from a peer at `step`."""

    time: float | None
    step: int
    source_replica: str | None
    target_replica: str
    source_id: str | None = None
    target_id: str | None = None
    healed_time: float | None = None
    requeue_to_healed_s: float | None = None
    requeue_to_quorum_s: float | None = None
    requeue_time: float | None = None  # injected resume/requeue/restart, else attempt start
    requeue_source: str = ""  # e.g. "injected restart", "launch", "manager-start"
    # False: a start-up sync (a replica that joined its first quorum a step late and took the
    # state from a peer), with no failure before it: counted apart from the recoveries
    after_failure: bool = True


@dataclass
class Degraded:
    """A stretch of quorums with fewer than `group_size` replicas."""

    start_step: int
    end_step: int | None
    start_time: float | None
    end_time: float | None
    replicas: int
    group_size: int
    open: bool = False  # the run's logs end while degraded

    @property
    def seconds(self) -> float | None:
        """How long it lasted (>= 0, see `elapsed`); None when a log without times leaves an
        end open."""
        return elapsed(self.start_time, self.end_time)


@dataclass
class ClockBack:
    """A time that went backwards: one log's clock set back between two of its lines, or a
    duration between two logs whose clocks disagree that came out negative (counted as 0)."""

    where: str  # a file name, or what the duration measures
    time: float | None  # the time before the jump / the duration's start
    back_s: float  # how far back
    in_file: bool = False  # True: one file's clock; False: a duration across two clocks


@dataclass
class Entry:
    """One line of the text timeline."""

    time: float | None
    kind: str
    text: str
    replica: str | None = None
    rid: str | None = None  # the full replica id it is about, when that decides if it is ours


@dataclass
class ReplicaSteps:
    """Per replica step counts, bounded in size (the reader counts commits in bulk)."""

    attempted: int = 0
    committed: int = 0
    last_step: int | None = None


@dataclass
class Baseline:
    """Where a goodput's failure-free rate (steps/s at full strength) comes from.

    `self`: the run's own full-strength stretches, round to round (`goodput.py`): anything
    that slows them (a warm spare sharing the cores) raises the run's goodput, so the count
    and length of the stretches are given with it. `control`: a failure-free run of the same
    settings on the same machine (`ftslurm report --baseline RUN`), measured the same way.
    """

    source: str  # "self" | "control"
    rate: float | None  # steps per second at full strength
    seconds: float  # length of the stretches the rate was measured over
    stretches: int  # how many
    run: str | None = None  # control: the run it was read from
    group_size: int | None = None  # control: its group size


@dataclass
class Goodput:
    """Replica-steps trained against what the run's wall time would give without failures.

    `committed`: commit decisions (`should_commit=True`, per replica and step); `trained`:
    those less one per heal whose target committed after it (`heal_steps`), since a healed
    replica's first step trains nothing of its own (torchft zeroes a healing replica's
    gradients and leaves it out of the participants): that step is charged to healing; and
    less the first quorum's step (`at_start`, the window's fencepost).
    `ideal` = group size x the baseline's rate x `window_s`. The `lost_*` shares are
    replica-seconds lost to each phase of the failures over group size x `window_s`, each
    within 0..1; `lost_other` is what is left (1 - goodput - the three), never below 0: where
    the phases add up to more than goodput leaves, `overcount` says by how much (replicas that
    stepped faster than the baseline rate while degraded: a lone survivor on a shared device).
    `unreadable`: why commits cannot be counted (then goodput is None, not 0).
    """

    rate: float | None  # steps per second at full strength (the baseline's)
    window_s: float | None  # first quorum -> end of the run
    full_strength_s: float  # seconds of the stretches the rate was measured over
    committed: int  # replica-steps committed
    ideal: float | None  # replica-steps the window would give at `rate`, all replicas in
    steps: int | None = None  # torchft steps the run advanced (first quorum -> last step)
    lost_detection: float = 0.0
    lost_degraded: float = 0.0
    lost_healing: float = 0.0
    heal_steps: int = 0  # heals whose first commit is charged to healing
    at_start: int = 0  # commits of the first quorum's step (see `trained`)
    baseline: Baseline | None = None
    unreadable: str | None = None
    device: str | None = None  # what the replica logs say they trained on (cpu, cuda, ...)

    @property
    def trained(self) -> int:
        """Replica-steps that trained in the window: commits less the heals' first commits,
        less the first quorum's members' commits of its step: the window runs from that
        quorum's round, and the rate counts steps between rounds (N steps, N + 1 commits),
        so without them a failure-free run would score (N + 1) / N."""
        return max(0, self.committed - self.heal_steps - self.at_start)

    @property
    def ratio(self) -> float | None:
        """trained / ideal, uncapped: above 1 when degraded steps ran faster than
        full-strength ones (replicas sharing a loaded device), or the rate's noise."""
        if not self.ideal or self.unreadable:
            return None
        return self.trained / self.ideal

    @property
    def goodput(self) -> float | None:
        """`ratio` within 0..1; None unknown."""
        r = self.ratio
        return None if r is None else max(0.0, min(1.0, r))

    @property
    def step_ratio_raw(self) -> float | None:
        """Steps advanced / steps the window would give at `rate`, uncapped."""
        if self.steps is None or not self.rate or not self.window_s or self.unreadable:
            return None
        return self.steps / (self.rate * self.window_s)

    @property
    def step_ratio(self) -> float | None:
        """`step_ratio_raw` within 0..1: the older measure, which counts a degraded step as
        a whole one."""
        r = self.step_ratio_raw
        return None if r is None else max(0.0, min(1.0, r))

    @property
    def _residual(self) -> float | None:
        g = self.goodput
        if g is None:
            return None
        return 1.0 - g - self.lost_detection - self.lost_degraded - self.lost_healing

    @property
    def lost_other(self) -> float | None:
        """What the phases do not place (overlapping failures, slower steps, the rate's
        noise), within 0..1."""
        r = self._residual
        return None if r is None else max(0.0, r)

    @property
    def overcount(self) -> float:
        """How far the phases add up past what goodput leaves (0 when they do not)."""
        r = self._residual
        return 0.0 if r is None else max(0.0, -r)


@dataclass
class LeftOut:
    """An event of the event log that the report did not take as the run's, and why."""

    time: float | None
    action: str
    replica: str | None
    node: str
    job: str
    why: str


@dataclass
class Report:
    """Everything `ftslurm report` prints; `render.to_json` is its stable, documented form."""

    quorums: list[Quorum]
    failures: list[Failure]
    commit_failures: list[CommitFailure]
    attempts: list[Attempt]
    recoveries: list[Recovery]
    degraded: list[Degraded]
    timeline: list[Entry]
    steps: dict[str, ReplicaSteps]
    group_size: int
    prefixes: list[str]
    stats: ParseStats
    first_time: float | None
    last_time: float | None
    max_step: int | None
    init_syncs: int = 0
    foreign_quorums: int = 0
    clock_back: list[ClockBack] = field(default_factory=list)
    implausible_times: int = 0  # of stats.malformed: times far from the run's (see clock.py)
    goodput: Goodput | None = None  # replica-step goodput (goodput.py), None: no quorum
    left_out: list[LeftOut] = field(default_factory=list)  # event-log lines not ours
    # nodes the run's launchers drained / avoided / kept (replica/launcher/preflight.py's
    # nodes.jsonl): node, action, time, reason, job, task, undo
    bad_nodes: list[dict[str, Any]] = field(default_factory=list)
    # restarts from a model checkpoint and the steps each lost (restarts.py)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def false_drops(self) -> int:
        """Replicas dropped from a quorum while their process was alive."""
        return sum(1 for f in self.failures if f.false_drop)

    @property
    def startup_syncs(self) -> int:
        """Heals with no failure before them: a replica that joined its first quorum late."""
        return sum(1 for r in self.recoveries if not r.after_failure)

    @property
    def requeues(self) -> int:
        """Attempts after the first of their replica: every restart, by Slurm or by hand, but
        not the launcher's restarts in place (`restarts_in_place`)."""
        return sum(1 for a in self.attempts if a.number > 0 and not a.restart)

    @property
    def restarts_in_place(self) -> int:
        """Trainings the launcher restarted in their allocation, without Slurm."""
        return sum(1 for a in self.attempts if a.restart)
