"""The report's data model: what `timeline.py` builds and `render.py` reads.

Plain dataclasses with no behaviour beyond derived figures, so that the state machine and the
renderers depend on this module and never on each other (the renderings of a Report are in
`render.py`; `ftslurm.report.build_report` returns a `render.RenderedReport`, a Report with
them as methods). Times are the logs' wall clock in seconds since the epoch (see `lines.py`);
replica keys are `<prefix>_<i>` unless a field says it holds the full `<prefix>_<i>:<uuid>` id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftslurm.report.reader import ParseStats


@dataclass
class Quorum:
    """One quorum CHANGE (a new `quorum_id`); `Quorum!` repeats each round and is read once."""

    quorum_id: int
    time: float | None
    step: int
    participants: list[str]  # full replica ids, ordered by replica id (= quorum rank)
    commit_failures: dict[str, int] = field(default_factory=dict)
    last_seen_before: float | None = None  # time of the previous quorum's last round
    epoch: int = 0  # bumps when the Lighthouse restarts (quorum ids start again)


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
        """How long it lasted; None when a log without times leaves an end open."""
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time - self.start_time


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

    @property
    def requeues(self) -> int:
        """Attempts after the first of their replica: every restart, by Slurm or by hand."""
        return sum(1 for a in self.attempts if a.number > 0)
