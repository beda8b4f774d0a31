"""Times that cannot be right, and clocks that went back: a run's events checked before the
timeline reads them.

A node whose clock was never set (1970) or junk dated 9999 in a log makes every duration
across it absurd (`69890783 h`). The run's events are its rare lines (quorum changes, heals,
the first commit after each change: they grow with the changes, not with the steps), so they
are held here to know the run's median time. Implausible: a time before 2000 or from 2100
on; and in the run's own logs (replica logs, event log) a time farther from their median
than max(PLAUSIBLE_S, 3 x the interquartile range of their times). A Lighthouse's log is held
only to the first rule: it outlives runs, and holds runs of months before or after this one.
An implausible time is counted as malformed and replaced by the time of the nearest plausible
event of the same file before it (else after it), as a line without a time takes the previous
line's; an event-log line with one is dropped (its time is all it says). The events are then
merged by time again, each file in its own order: the bad time had put its file's later
events out of place.

A clock set back between two events of one file (by more than BACK_TOLERANCE_S: a process's
interleaved stdout and stderr are not exactly in time order) is noted, not corrected: a
file's order is the order things happened in. Clocks of different nodes that disagree are
not seen here: the timeline pairs what two logs say of one event without their times (see
timeline.py), and `model.elapsed` counts a negative duration as 0.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm.logvocab import INJECTED, Event
from ftslurm.report.model import ClockBack
from ftslurm.report.reader import ParseStats

SLACK_S = 5.0  # clock skew tolerated between two logs (controller, Lighthouse, replica nodes)
PLAUSIBLE_S = 30 * 86400.0  # the least distance from the median time that is still plausible
EARLIEST = 946684800.0  # `2000-01-01`: no log this tool reads is older
LATEST = 4102444800.0  # `2100-01-01`
BACK_TOLERANCE_S = 1.0


@dataclass
class Settled:
    """The run's events in time order, with what was found wrong with their times."""

    events: list[Event]
    lo: float | None = None  # plausible times of the run's own logs: [lo, hi]
    hi: float | None = None
    lighthouse: frozenset[str] = frozenset()  # names of the Lighthouse logs
    implausible: int = 0  # times counted as malformed (events, previous rounds, file ends)
    jumps: list[ClockBack] = field(default_factory=list)

    def plausible(self, t: float | None, source: str = "") -> bool:
        """Whether `t`, read in the file named `source` ("": one of the run's own), is a time
        the report may use; an unknown time is not implausible."""
        if t is None:
            return True
        if not EARLIEST <= t < LATEST:
            return False
        if source in self.lighthouse or self.lo is None or self.hi is None:
            return True
        return self.lo <= t <= self.hi


def window(times: list[float]) -> tuple[float, float] | None:
    """[lo, hi] of plausible times around the median of `times` (sorted)."""
    if not times:
        return None
    n = len(times)
    median = times[n // 2]
    spread = max(PLAUSIBLE_S, 3.0 * (times[(3 * n) // 4] - times[n // 4]))
    return median - spread, median + spread


def settle(events: Iterable[Event], stats: ParseStats) -> Settled:
    """Hold the events, replace implausible times (counted in `stats.malformed`, or
    `stats.bad_events` for event-log lines), note clocks set back within a file."""
    evs = list(events)
    out = Settled(evs, lighthouse=frozenset(
        Path(p).name for p, (_, _, lighthouse) in stats.spans.items() if lighthouse))
    win = window(sorted(e.time for e in evs if e.time is not None
                        and e.source not in out.lighthouse and out.plausible(e.time)))
    if win is not None:
        out.lo, out.hi = win
    files: dict[str, list[Event]] = {}
    for e in evs:
        files.setdefault(e.source, []).append(e)
    bad_times: set[tuple[str, float]] = set()
    dropped = retimed = 0
    for source, group in files.items():
        kept: list[Event] = []
        borrow: list[bool] = []  # its time was implausible: take a neighbour's
        for e in group:
            if not out.plausible(e.prev_round_time, source):
                e.prev_round_time = None
                out.implausible += 1
            if out.plausible(e.time, source):
                kept.append(e)
                borrow.append(False)
                continue
            assert e.time is not None
            bad_times.add((source, e.time))
            if e.kind == INJECTED:
                dropped += 1
                continue
            e.time = None
            retimed += 1
            kept.append(e)
            borrow.append(True)
        _borrow_times(kept, borrow)
        files[source] = kept
        out.jumps += _jumps(source, kept)
    for path, (first, last, _) in stats.spans.items():
        name = Path(path).name
        for t in (first, last):
            if t is not None and not out.plausible(t, name) and (name, t) not in bad_times:
                bad_times.add((name, t))
                out.implausible += 1
    out.implausible += retimed
    if retimed or dropped:
        out.events = list(heapq.merge(*files.values(), key=_key))
    stats.malformed += out.implausible
    stats.bad_events += dropped
    return out


def _borrow_times(group: list[Event], borrow: list[bool]) -> None:
    """The flagged events take the time of the previous plausible one (else the next's)."""
    last: float | None = None
    waiting: list[Event] = []
    for e, b in zip(group, borrow, strict=True):
        if b:
            if last is None:
                waiting.append(e)
            else:
                e.time = last
        elif e.time is not None:
            last = e.time
            for w in waiting:
                w.time = last
            waiting = []


def _jumps(source: str, group: list[Event]) -> list[ClockBack]:
    out: list[ClockBack] = []
    last: float | None = None
    for e in group:
        if e.time is None:
            continue
        if last is not None and e.time < last - BACK_TOLERANCE_S:
            out.append(ClockBack(source, last, last - e.time, in_file=True))
        last = e.time
    return out


def _key(ev: Event) -> float:
    return ev.time if ev.time is not None else 0.0
