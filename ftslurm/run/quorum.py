"""The quorum of a run, in the three views ftslurm has of it, in one home.

Why three types and not one: they answer different questions, and each one's JSON is a
published shape (`status --json`, `report --json`, the metrics) that must not change.
- `QuorumPage` (with `PageMember`, `Heartbeat`): what the Lighthouse's /status page says now;
  `lighthouse/status_page.py` parses it, `metrics` and `status` read it.
- `LighthouseQuorum`: `status`'s one line of it (is the Lighthouse up, which quorum, who is in
  it, how many heartbeat), made from the page by `from_page`, the one place that reduces it.
- `QuorumChange`: one quorum change the logs show (a new `quorum_id`, with its time and step),
  the report's timeline of them (`report/model.py` names it `Quorum`).
Every view names a member by its full replica id (`<prefix>_<i>:<uuid>`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PageMember:
    """A participant of the previous quorum, as the /status page shows it."""

    replica_id: str
    step: int | None = None
    manager: str | None = None
    store: str | None = None
    world_size: int | None = None
    recovering: bool = False


@dataclass
class Heartbeat:
    """A replica id the Lighthouse has heard from (dead ids stay listed, marked old)."""

    replica_id: str
    age_s: float | None
    old: bool = False


@dataclass
class QuorumPage:
    """What the Lighthouse's /status HTML fragment says.

    `rejected`: the pieces the parser found on the page but could not read (an item
    dropped, a number of too many digits left None); see `readable`."""

    quorum_id: int | None = None
    next_status: str | None = None
    previous_quorum_id: int | None = None
    num_participants: int | None = None
    quorum_age_s: float | None = None
    members: list[PageMember] = field(default_factory=list)
    heartbeats: list[Heartbeat] = field(default_factory=list)
    rejected: int = 0
    # seconds between the Lighthouse answering and the command reading this page: the
    # ages above are as of then (the launcher's copy; 0 when read from the Lighthouse)
    page_age_s: float = 0.0

    @property
    def live_heartbeats(self) -> list[Heartbeat]:
        return [h for h in self.heartbeats if not h.old]

    @property
    def readable(self) -> bool:
        """The page was the Lighthouse's (its quorum id read) and read whole (nothing
        rejected): what it lists is what the Lighthouse knows, so a replica missing from it
        is evidence. An unreadable page's items that were read are still true; what it
        leaves out says nothing."""
        return self.quorum_id is not None and self.rejected == 0


@dataclass
class LighthouseQuorum:
    """The Lighthouse's view, when a managed one runs (`status`'s `lighthouse` JSON)."""

    running: bool
    address: str | None = None
    quorum_id: int | None = None
    participants: list[str] = field(default_factory=list)
    status: str | None = None
    heartbeating: int | None = None
    error: str | None = None

    @classmethod
    def from_page(cls, address: str | None, error: str | None,
                  page: QuorumPage | None) -> LighthouseQuorum:  # fmt: skip
        """A running Lighthouse at `address` whose /status page said `page` (None: it did
        not answer; `error` says why)."""
        q = cls(running=True, address=address, error=error)
        if page is not None:
            q.quorum_id = page.quorum_id
            q.participants = [m.replica_id for m in page.members]
            q.status = page.next_status
            q.heartbeating = len(page.live_heartbeats)
        return q


@dataclass
class QuorumChange:
    """One quorum CHANGE (a new `quorum_id`); `Quorum!` repeats each round and is read once."""

    quorum_id: int
    time: float | None
    step: int
    participants: list[str]  # full replica ids, ordered by replica id (= quorum rank)
    commit_failures: dict[str, int] = field(default_factory=dict)
    last_seen_before: float | None = None  # time of the previous quorum's last round
    epoch: int = 0  # bumps when the Lighthouse restarts (quorum ids start again)
