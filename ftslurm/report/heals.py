"""The two sides of each heal, paired without their times.

A heal is logged twice, on two nodes whose clocks disagree by seconds: the restarted replica
(the target) says `healing required, fetching checkpoint metadata from
recover_src_manager_address=... max_step=N`, then `fetching checkpoint from
recover_src_replica_rank=r` and `Loaded state dict.` at step N; the replica it heals from
(the source) says `peers need recovery from us [r, ...]` at step N. The ranks are ranks in
the quorum both had just reconfigured to (`reconfiguring for quorum_id=Q`, in each one's own
log), participants ordered by replica id. So each side is kept as it was logged, with the
quorum id its replica had last reconfigured to, and resolved once every quorum is known:
the source's ranks name the targets' full ids (with their uuids), which are the key the
target's own lines give; the target names its source by manager address (its replica from
the `Manager listening on <address>` lines) or by quorum rank. Which side's line comes first
in time, and how far the clocks are apart, changes nothing: one heal, one recovery.

A source's ranks are read in a quorum found by time when its log has no `reconfiguring for
quorum_id` line; with clocks apart that can be a quorum where the rank is the target's earlier
attempt (another uuid). Such a side names the replica and the step but not surely the process,
so a heal that only a source's lines gave joins the heal the target's own lines give for the
same replica and step (`_merge_guessed`): a replica healed to one step once, however many of
its ranks logged it and in whatever order the lines or files came. Two heals that the
targets' own lines give under two uuids are two processes, and stay two.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ftslurm import logvocab as L
from ftslurm.logvocab import Event, split_replica_id
from ftslurm.report.clock import SLACK_S
from ftslurm.report.model import Quorum, Recovery, replica_key

BY_STEP_S = 600.0  # a source's line paired by step alone: at most this far from the target's


@dataclass
class HealSide:
    """One line about a heal, as its replica logged it."""

    kind: str  # L.PEERS_RECOVER (the source's), L.HEAL_REQUIRED or L.HEALED (the target's)
    replica: str  # the id it was logged under (full, or `prefix_i` from the Rust manager)
    step: int  # the step healed to (max_step)
    time: float | None
    qid: int | None  # the quorum id the replica last reconfigured to, in its own log
    ranks: tuple[int, ...] = ()  # source: the targets' quorum ranks; target: its source's
    address: str = ""  # target: the source's manager address, when the event carries it


@dataclass
class _Heal:
    """What the sides of one heal say, before it becomes a Recovery."""

    target: str
    step: int
    target_time: float | None = None
    source_time: float | None = None
    healed_time: float | None = None
    sources: list[str] = field(default_factory=list)  # ids of the replicas that sent it
    named: str | None = None  # the source the target named (address or rank)
    own: bool = False  # a line of the target itself: `target` is its id, not a quorum's guess
    guesses: int = 0  # source lines whose ranks (read in a quorum) gave this target


class Heals:
    """Collects heal sides during the timeline's pass; `resolve` pairs them at its end."""

    def __init__(self) -> None:
        self.sides: list[HealSide] = []
        self.last_target: dict[str, HealSide] = {}  # target id -> its latest HEAL_REQUIRED
        self.managers: dict[str, str] = {}  # manager address -> `prefix_i`

    def manager_started(self, ev: Event) -> None:
        """`[Replica X] Manager listening on <address>`: whose manager the address is."""
        if ev.replica and ev.detail:
            self.managers[ev.detail] = replica_key(ev.replica)[0]

    def side(self, ev: Event, qid: int | None) -> None:
        """A source's or target's line at step `ev.step` (> 0: step 0 is the initial sync)."""
        assert ev.replica is not None and ev.step is not None
        address = ev.detail if ev.kind == L.HEAL_REQUIRED and "://" in ev.detail else ""
        s = HealSide(ev.kind, ev.replica, ev.step, ev.time, qid, ev.ranks, address)
        self.sides.append(s)
        if ev.kind == L.HEAL_REQUIRED:
            self.last_target[ev.replica] = s

    def fetching(self, ev: Event) -> None:
        """`fetching checkpoint from recover_src_replica_rank=r`: the target's source rank."""
        s = self.last_target.get(ev.replica or "")
        if s is not None and not s.ranks:
            s.ranks = ev.ranks

    # ---------------------------------------------------------------- the end

    def resolve(self, quorums: list[Quorum]) -> list[Recovery]:
        """One Recovery per heal (target replica and uuid, step). `quorums`: all quorums seen,
        participants not yet narrowed to the run's (ranks count every participant)."""
        by_id: dict[int, list[Quorum]] = {}
        for q in quorums:
            by_id.setdefault(q.quorum_id, []).append(q)
        heals: dict[tuple[str, str | None, int], _Heal] = {}
        unplaced: list[HealSide] = []  # sources whose ranks no known quorum resolves
        # sides naming a full target id first, so that a Rust-side id without uuid joins them
        for s in sorted(self.sides, key=_without_uuid):
            if s.kind == L.PEERS_RECOVER:
                q = self._quorum(s, by_id, quorums)
                if q is None or not all(0 <= r < len(q.participants) for r in s.ranks):
                    unplaced.append(s)
                    continue
                for r in s.ranks:
                    h = _get(heals, q.participants[r], s.step)
                    h.sources.append(s.replica)
                    h.source_time = _earliest(h.source_time, s.time)
                    h.guesses += 1
                continue
            h = _get(heals, s.replica, s.step)
            h.own = True
            if s.kind == L.HEALED:
                h.healed_time = _earliest(h.healed_time, s.time)
                continue
            h.target_time = _earliest(h.target_time, s.time)
            if h.named is None:
                h.named = self._named_source(s, by_id, quorums)
        merged = _merge_guessed(list(heals.values()))
        _by_step(merged, unplaced)
        return [_recovery(h) for h in merged]

    def _named_source(
        self, s: HealSide, by_id: dict[int, list[Quorum]], quorums: list[Quorum]
    ) -> str | None:
        """The source a target's lines name: its manager address, else its quorum rank; the
        full id from the target's quorum where it has that replica."""
        q = self._quorum(s, by_id, quorums)
        members = q.participants if q is not None else []
        gkey = self.managers.get(s.address) if s.address else None
        if gkey is not None:
            return next((m for m in members if replica_key(m)[0] == gkey), gkey)
        if s.ranks and 0 <= s.ranks[0] < len(members):
            return members[s.ranks[0]]
        return None

    @staticmethod
    def _quorum(
        s: HealSide, by_id: dict[int, list[Quorum]], quorums: list[Quorum]
    ) -> Quorum | None:
        """The quorum a side's ranks are ranks in: the one its replica reconfigured to (of
        those with that id, the nearest in time: a restarted Lighthouse counts from 1 again);
        without that line, the target's first quorum, or the source's latest by then."""
        if s.qid is not None and s.qid in by_id:
            qs = by_id[s.qid]
            if s.time is None:
                return qs[-1]
            return min(qs, key=lambda q: abs(q.time - s.time) if q.time is not None else 1e18)
        if s.kind != L.PEERS_RECOVER and ":" in s.replica:
            return next((q for q in quorums if s.replica in q.participants), None)
        found = None
        for q in quorums:
            if s.time is not None and q.time is not None and q.time > s.time + SLACK_S:
                break
            if _holds(q, s.replica):
                found = q
        return found


def _without_uuid(s: HealSide) -> bool:
    """A target's side logged by `prefix_i` only (the Rust manager); a source's side names
    its targets by rank, and ranks give full ids."""
    return s.kind != L.PEERS_RECOVER and ":" not in s.replica


def _merge_guessed(heals: list[_Heal]) -> list[_Heal]:
    """The heals, each heal of one replica at one step once. A heal that no line of the target
    gave (its id is the one a source's ranks read in some quorum) joins the one heal the
    target's own lines give for that replica and step, or, when several did, the one of them
    that names no source; without any, the heals that sources' lines gave for that replica
    and step are one. Only heals at most BY_STEP_S apart: another run's steps count again."""
    groups: dict[tuple[str, int], list[_Heal]] = {}
    for h in heals:
        groups.setdefault((replica_key(h.target)[0], h.step), []).append(h)
    gone: set[int] = set()
    for group in groups.values():
        guessed = [h for h in group if not h.own]
        if len(group) < 2 or not guessed:
            continue
        own = [h for h in group if h.own]
        if len(own) > 1:
            own = [h for h in own if not h.sources and h.named is None] or own
        if len(own) > 1:
            continue  # which of several processes a source's line was for: not known
        # no line of the target: the id most of the sources' lines gave (equal: the least)
        keep = own[0] if own else min(guessed, key=lambda h: (-h.guesses, h.target))
        for h in guessed:
            if h is not keep and _near(h, keep):
                _absorb(keep, h)
                gone.add(id(h))
    return [h for h in heals if id(h) not in gone]


def _near(a: _Heal, b: _Heal) -> bool:
    """Whether two heals' lines are close enough in time to be one heal (unknown: yes)."""
    ta = next((t for t in (a.target_time, a.source_time, a.healed_time) if t is not None), None)
    tb = next((t for t in (b.target_time, b.source_time, b.healed_time) if t is not None), None)
    return ta is None or tb is None or abs(ta - tb) <= BY_STEP_S


def _absorb(keep: _Heal, h: _Heal) -> None:
    """`h`'s lines into `keep`: the earliest time of each side, all the sources; the target's
    full id from whichever has one when `keep`'s own lines gave only `prefix_i`."""
    keep.sources += h.sources
    keep.target_time = _earliest(keep.target_time, h.target_time)
    keep.source_time = _earliest(keep.source_time, h.source_time)
    keep.healed_time = _earliest(keep.healed_time, h.healed_time)
    keep.guesses += h.guesses
    if keep.named is None:
        keep.named = h.named
    if ":" not in keep.target and ":" in h.target:
        keep.target = h.target


def _by_step(heals: Iterable[_Heal], unplaced: list[HealSide]) -> None:
    """Without the quorums (replica logs that do not print them), a source's line still
    names the step: a heal at step N that nothing else gave a source gets the one replica
    that said `peers need recovery from us` at step N near then (BY_STEP_S: not another
    run's, whose steps count again), if only one did."""
    for h in heals:
        if h.sources or h.named is not None:
            continue
        t = next((x for x in (h.target_time, h.healed_time) if x is not None), None)
        ids = {s.replica for s in unplaced if s.step == h.step
               and (t is None or s.time is None or abs(s.time - t) <= BY_STEP_S)}
        if len({replica_key(i)[0] for i in ids}) == 1:
            h.sources.append(min(ids))


def _holds(q: Quorum, rid: str) -> bool:
    if ":" in rid:
        return rid in q.participants
    return any(replica_key(m)[0] == rid for m in q.participants)


def _get(heals: dict[tuple[str, str | None, int], _Heal], target: str, step: int) -> _Heal:
    """The heal of `target` at `step`; an id without uuid joins that replica's heal at that
    step whatever its uuid."""
    gkey = replica_key(target)[0]
    uuid = split_replica_id(target)[2]
    h = heals.get((gkey, uuid, step))
    if h is None and uuid is None:
        h = next((v for (k, _u, st), v in reversed(heals.items()) if k == gkey and st == step),
                 None)
    if h is None:
        h = heals[(gkey, uuid, step)] = _Heal(target, step)
    return h


def _earliest(a: float | None, b: float | None) -> float | None:
    return min((t for t in (a, b) if t is not None), default=None)


def _recovery(h: _Heal) -> Recovery:
    """The source: the replica that said it sent the state (the one the target named, if
    several did), else the one the target named. The time: the target's own heal line, on
    the same clock as its healed step; else the source's; else the healed step's."""
    src = h.sources[0] if h.sources else h.named
    if h.named is not None and len(set(h.sources)) > 1:
        named = replica_key(h.named)[0]
        src = next((s for s in h.sources if replica_key(s)[0] == named), src)
    time = next((t for t in (h.target_time, h.source_time, h.healed_time) if t is not None), None)
    rec = Recovery(time, h.step, replica_key(src)[0] if src else None, replica_key(h.target)[0])
    rec.source_id = src if src and ":" in src else None
    rec.target_id = h.target if ":" in h.target else None
    rec.healed_time = h.healed_time
    return rec
