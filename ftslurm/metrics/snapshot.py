"""What the metrics say at one moment, computed from the Lighthouse's /status page and the run's
report JSON: pure (no I/O, no prometheus_client), so the rules are tested on recorded pages
and logs alone (tests/fixtures/lighthouse, tests/fixtures/report).

A replica is named by its slot: the `<i>` of `<prefix>_<i>:<uuid>`, the array task index,
which stays the same across restarts (the uuid does not). Replica ids come from the network
(anyone who can reach the Lighthouse can heartbeat any id): an id that is not a short,
plain name is counted under the slot `unknown`, never used as a number or a label as it is.
The nodes the run's launchers took out (the report's `bad_nodes`, read from the run folder's
`failures/nodes.jsonl`) are named the same way: a node name that is not plain is `unknown`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ftslurm.lighthouse.status_page import whole
from ftslurm.logvocab import split_replica_id
from ftslurm.run.quorum import Heartbeat, PageMember, QuorumPage

# `state` label values, in the order the exposition lists them
TRAINING = "training"  # in the Lighthouse's quorum, heartbeating, not recovering
HEALING = "healing"  # in the quorum, marked recovering: fetching the state from a peer
JOINING = "joining"  # heartbeating, not (yet) in the quorum: started, waiting for a quorum
ABSENT = "absent"  # no live heartbeat: down, requeued, or never started
STATES = (TRAINING, HEALING, JOINING, ABSENT)

UNKNOWN = "unknown"  # the slot of every id that is not a plain name (see `slot`)
MAX_GROUP_SIZE = 10_000  # slots listed at most: each is a dozen series on every scrape
# what a slot name may be: a Prometheus label value that is short, printable and ASCII
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,63}")
_INDEX_MAX = 10**9  # larger array task indices are junk, not slots
# `how` label values: what replica/launcher/preflight.py's NodeAction.action records (any
# other: unknown)
NODE_HOWS = ("drain", "avoid", "kept")
MAX_NODES = 1_000  # (node, how) pairs listed at most, the newest kept: two series each


def slot(replica_id: str) -> str:
    """`torchtitan_ft_3:9a1d` or `torchtitan_ft_3` -> `3`; an id without an index is itself
    when it is a plain name (up to 64 of `A-Za-z0-9_.:@+-`), else `unknown`: a 5,000-digit
    id, one with escapes or spaces is not a slot anyone can act on."""
    _, index, _ = split_replica_id(replica_id)
    if index is not None:
        return str(index) if index < _INDEX_MAX else UNKNOWN
    return slot_name(replica_id)


def slot_name(name: str) -> str:
    """A slot name from the logs or the page as it may be exposed: itself if plain (short
    decimals included), else `unknown`."""
    if plain(name) == UNKNOWN or _decimal(name) and int(name) >= _INDEX_MAX:
        return UNKNOWN
    return name


def plain(name: str) -> str:
    """`name` as a label value: itself when it is up to 64 of `A-Za-z0-9_.:@+-` (starting
    with a letter or digit), else `unknown`: nothing long, spaced or escaped reaches a label."""
    return name if _PLAIN.fullmatch(name) else UNKNOWN


def _decimal(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _slot_order(s: str) -> tuple[int, int, str]:
    return (0, int(s), "") if _decimal(s) else (1, 0, s)


@dataclass
class ReplicaSample:
    """One slot's samples; None = no sample (Prometheus: the series is absent)."""

    replica: str
    state: str | None = None
    heartbeat_age_s: float | None = None
    step: int | None = None
    failures: int | None = None
    recoveries: int | None = None
    commit_failures: int | None = None
    steps_committed: int | None = None
    last_time_to_full_strength_s: float | None = None


@dataclass
class NodeSample:
    """A node the run's launchers took out, one per (node, how): `how` is drain, avoid, kept
    (bad, but the last node the array could run on) or unknown; `time`: the newest such
    action, Unix seconds (None: its time could not be read)."""

    node: str
    how: str
    time: float | None = None


@dataclass
class Snapshot:
    """Everything one scrape exposes. `lighthouse_up` / `logs_up`: whether each source could
    be read this time (a source that is down leaves its samples out, never zeros)."""

    lighthouse_up: bool = False
    logs_up: bool = False
    quorum_id: int | None = None
    quorum_size: int | None = None
    quorum_age_s: float | None = None
    page_age_s: float | None = None
    group_size: int | None = None
    run: str | None = None
    replicas: list[ReplicaSample] = field(default_factory=list)
    nodes_taken_out: list[NodeSample] = field(default_factory=list)


def _counts(items: Iterable[Mapping[str, Any]], key: str) -> Counter[str]:
    return Counter(slot_name(str(x[key])) for x in items if x.get(key) is not None)


def _state(members: list[PageMember], heartbeats: list[Heartbeat]) -> str:
    """One slot's state from its quorum members and heartbeats (every uuid it had)."""
    live = {h.replica_id for h in heartbeats if not h.old}
    in_quorum = [m for m in members if m.replica_id in live]
    if in_quorum:
        return HEALING if any(m.recovering for m in in_quorum) else TRAINING
    return JOINING if live else ABSENT


def _cap_slots(*by_slot: defaultdict[str, list[Any]]) -> None:
    """At most MAX_GROUP_SIZE slots from the page, the first in slot order (a run's own
    0..N-1 among them); the items of the rest are counted under `unknown`. Anyone can
    heartbeat any id: 100,000 distinct ids (a 5 MB page) would otherwise be a million series
    on every scrape."""
    named = sorted(set().union(*by_slot) - {UNKNOWN}, key=_slot_order)
    for s in named[MAX_GROUP_SIZE:]:
        for items in by_slot:
            if s in items:
                items[UNKNOWN].extend(items.pop(s))


def build_snapshot(
    page: QuorumPage | None,
    report: Mapping[str, Any] | None,
    group_size: int | None = None,
    run: str | None = None,
) -> Snapshot:
    """The samples from a parsed /status page (None: the Lighthouse did not answer) and a
    report's JSON dict (`RenderedReport.to_json()`; None: no logs).

    Group size: `group_size` if given, else the report's (its largest quorum / replicas seen),
    else the slots the Lighthouse has heard from. Slots listed: 0..group size-1 when every
    slot is a number, plus every slot the page or the report names.
    """
    snap = Snapshot(lighthouse_up=page is not None, logs_up=report is not None, run=run)
    summary: Mapping[str, Any] = (report or {}).get("summary") or {}
    slots: set[str] = set()
    members: dict[str, list[PageMember]] = defaultdict(list)  # by slot: one pass over the page
    beats: dict[str, list[Heartbeat]] = defaultdict(list)
    if page is not None:
        for m in page.members:
            members[slot(m.replica_id)].append(m)
        for h in page.heartbeats:
            beats[slot(h.replica_id)].append(h)
        _cap_slots(members, beats)
        snap.quorum_id = page.quorum_id
        # torchft's "previous quorum" is the last one issued: the quorum that trains now
        snap.quorum_size = (
            page.num_participants if page.num_participants is not None else len(page.members)
        )
        snap.quorum_age_s = page.quorum_age_s
        snap.page_age_s = page.page_age_s
        slots |= set(members) | set(beats)
    failures: Counter[str] = Counter()
    recoveries: Counter[str] = Counter()
    commits: Counter[str] = Counter()
    committed: dict[str, int] = {}
    to_full: dict[str, float] = {}
    if report is not None:
        failures = _counts(report.get("failures") or [], "replica")
        # a start-up sync (a replica that joined its first quorum late) is no recovery
        healed = [r for r in report.get("recoveries") or [] if r.get("after_failure", True)]
        recoveries = _counts(healed, "target_replica")
        commits = _counts(report.get("commit_failures") or [], "replica")
        by_replica = summary.get("steps_by_replica") or {}
        for k, v in by_replica.items():
            name = slot_name(str(k))
            committed[name] = committed.get(name, 0) + int(v.get("committed", 0))
        for f in report.get("failures") or []:  # in time order: the last one wins
            value = f.get("time_to_full_strength_s")
            if f.get("replica") is not None and value is not None:
                to_full[slot_name(str(f["replica"]))] = float(value)
        slots |= set(failures) | set(recoveries) | set(commits) | set(committed)
        slots |= {slot_name(str(a["replica"])) for a in report.get("attempts") or []
                  if a.get("replica") is not None}  # fmt: skip
    snap.group_size = group_size or summary.get("group_size") or (len(slots) or None)
    if snap.group_size and all(_decimal(s) for s in slots - {UNKNOWN}):
        # the slots that should exist are listed even when nothing names them (absent)
        slots |= {str(i) for i in range(min(snap.group_size, MAX_GROUP_SIZE))}
    for s in sorted(slots, key=_slot_order):
        r = ReplicaSample(replica=s)
        if page is not None:
            if whole(page) or s in beats:  # the start of a page (the rest did not come)
                # says nothing of a slot whose heartbeat is not in it: not absent, nor lost
                r.state = _state(members.get(s, []), beats.get(s, []))
            ages = [h.age_s for h in beats.get(s, []) if h.age_s is not None]
            r.heartbeat_age_s = min(ages) if ages else None
            steps = [m.step for m in members.get(s, []) if m.step is not None]
            r.step = max(steps) if steps else None
        if report is not None:
            r.failures, r.recoveries = failures[s], recoveries[s]
            r.commit_failures = commits[s]
            r.steps_committed = committed.get(s, 0)
            r.last_time_to_full_strength_s = to_full.get(s)
        snap.replicas.append(r)
    if report is not None:
        snap.nodes_taken_out = nodes_taken_out(report.get("bad_nodes") or [])
    return snap


def state_counts(snap: Snapshot) -> dict[str, int]:
    """Slots per state (every one of STATES, 0 too): the summary of `replicas`."""
    counts = dict.fromkeys(STATES, 0)
    for r in snap.replicas:
        if r.state is not None:
            counts[r.state] += 1
    return counts


def _epoch(value: Any) -> float | None:
    """The report's node-action time (ISO-8601 with the zone, render.py) as Unix seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        dt = datetime.fromisoformat(str(value))
    except (ValueError, TypeError):
        return None
    return dt.timestamp() if dt.tzinfo is not None else None


def nodes_taken_out(bad_nodes: Iterable[Mapping[str, Any]]) -> list[NodeSample]:
    """One sample per (node, how) from the report's `bad_nodes`, with the newest time; node
    names through `plain`, `how` limited to NODE_HOWS; at most MAX_NODES, the newest."""
    newest: dict[tuple[str, str], float | None] = {}
    for b in bad_nodes:
        if not isinstance(b, Mapping) or b.get("node") is None:
            continue
        how = str(b.get("action"))
        key = (plain(str(b["node"])), how if how in NODE_HOWS else UNKNOWN)
        t, old = _epoch(b.get("time")), newest.get(key)
        newest[key] = t if old is None or (t is not None and t > old) else old
    keep = sorted(newest.items(), key=lambda kv: kv[1] if kv[1] is not None else float("-inf"))
    keep = sorted(keep[-MAX_NODES:], key=lambda kv: kv[0])
    return [NodeSample(node, how, t) for (node, how), t in keep]
