"""The launcher's watchdog: a training worker that hangs or stalls is ended, so the replica
comes back.

A hung worker never exits, so nothing else restarts it: it keeps its allocation and its node
until a person or Slurm acts. The launcher (job.py) asks `Watchdog.check` about once a
second while torchrun or the worker runs. It judges the worker by its progress, and acts
only on evidence that holds on a second look (READS reads in a row, RECHECK_S apart): a
healthy run is never stopped on one old reading, an unreadable file or page, or a phase the
worker announced as long.

- **stall** (progress): the worker writes the phase its training thread is in and how long
  that phase may last (peer_watch.py): a compute step gets a tight bound (3 median
  steps, at least FTSLURM_STALL_TIMEOUT_S), a wait on its peers, a checkpoint save, a heal
  or its first steps the long one (FTSLURM_HANG_TIMEOUT_S at least). A quorum wait is
  never judged (the Lighthouse bounds it). A phase older than its bound, with the file
  unchanged on the second look, is a stall: a CUDA call or a collective that never
  returns while torchft's heartbeat thread keeps the replica alive for the Lighthouse.
- **stopped** (heartbeat): the Lighthouse lists the worker's id (from its progress file) as
  old in READS reads after it was seen live in this attempt, the worker made no progress
  meanwhile, and one of the worker's processes is stopped (SIGSTOP: its peers have
  dropped it already). A worker that runs while its heartbeat looks old (a loaded
  Lighthouse, a heartbeat late at a GPU's start, a Lighthouse paused and resumed) is left
  to the stall rule: its own progress says whether it is stuck.

Then the launcher SIGKILLs the worker's processes (a stopped process dies of SIGKILL too)
and the attempt ends as after a crash: the replica comes back and heals from a peer. Reads
of the page or the file that fail, or raise, count as no evidence.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READS = 2  # a rule acts when this many reads in a row show its evidence
HEARTBEAT_READS = READS
CHECK_EVERY_S = 1.0
# while no process of the worker is stopped the heartbeat rule has no evidence to find: the
# page (it lists every member, ~0.5 MB at 1,024 replicas, served under the Lighthouse's quorum
# lock) is read only to see the worker live once, at most this often
LIVE_LOOK_S = 5.0
RECHECK_S = 0.25  # after a read that found evidence, the next read comes sooner
MAX_PROGRESS_BYTES = 4096
# a gap this long between two checks (made at most CHECK_EVERY_S apart) means the launcher
# itself stood still, with the whole node
FROZE_S = 3.0
# what a phase is called in the watchdog's line (peer_watch.py's phases)
PHASES = {"step": "its training step", "wait": "a wait on its peers",
          "save": "a checkpoint save", "heal": "a heal"}  # fmt: skip


def read_progress(path: Path) -> dict[str, Any] | None:
    """The worker's progress file (peer_watch.py), or None when absent or not ours."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_PROGRESS_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        when, bound = float(data.get("time")), float(data.get("bound_s"))
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(when) and math.isfinite(bound)):
        return None
    return data


@dataclass
class Watchdog:
    """One attempt's watch; `check()` returns why the worker must be ended, or None.
    `floor_s`: FTSLURM_HANG_TIMEOUT_S, the least bound of a long phase; `stall_floor_s`:
    FTSLURM_STALL_TIMEOUT_S, the least bound of a compute step (0: the long one);
    `stopped()`: whether a process of the worker is stopped."""

    progress: Path
    lighthouse: str | None
    floor_s: float
    read_page: Callable[[str], Any] | None = None
    clock: Callable[[], float] = time.time
    stall_floor_s: float = 0.0
    stopped: Callable[[], bool] = lambda: False
    _live: set[str] = field(default_factory=set)
    _old_reads: int = 0
    _old_since: float | None = None  # the progress time at the first old read
    _over_reads: int = 0
    _over_at: float | None = None  # the progress time the stall rule's reads saw
    _last_check: float | None = None
    _woke: float = 0.0  # when this launcher last came back from standing still itself
    _looked: float = -math.inf  # when the page was last read

    @property
    def next_check_s(self) -> float:
        """When to ask again: soon while a rule has evidence, else CHECK_EVERY_S. The
        Lighthouse's page is read each time only while a process of the worker is stopped
        (else once, to see the worker live: LIVE_LOOK_S)."""
        return RECHECK_S if self._old_reads or self._over_reads else CHECK_EVERY_S

    def check(self) -> str | None:
        """Why the worker must be ended, or None; never raises (no evidence instead)."""
        try:
            return self._check()
        except Exception:  # noqa: BLE001 - a read that raises is no evidence
            self._old_reads = self._over_reads = 0
            return None

    def _check(self) -> str | None:
        now = self.clock()
        if self._last_check is not None and now - self._last_check > FROZE_S:
            # this launcher stood still too (a frozen node, a paused VM): the worker's
            # progress counts from now, not from before the freeze
            self._woke, self._over_reads = now, 0
        self._last_check = now
        p = read_progress(self.progress)
        if p is None:
            return None  # the worker has not reached its first quorum
        when = float(p["time"])
        why = self._heartbeat(str(p.get("id") or ""), when)
        if why:
            return why
        return self._stall(str(p.get("state")), when, float(p["bound_s"]))

    def _stall(self, state: str, when: float, bound_s: float) -> str | None:
        if state not in PHASES:
            self._over_reads = 0
            return None  # a quorum wait (the Lighthouse bounds it), or a state we do not know
        floor = self.stall_floor_s if state == "step" and self.stall_floor_s else self.floor_s
        bound = max(floor, bound_s)
        age = self.clock() - max(when, self._woke)
        if age <= bound:
            self._over_reads = 0
            return None
        if self._over_reads and self._over_at != when:
            self._over_reads = 0  # the worker moved on between the reads
        self._over_at = when
        self._over_reads += 1
        if self._over_reads < READS:
            return None
        return (f"no progress in {PHASES[state]} for {age:.0f} s (bound {bound:.0f} s: "
                "FTSLURM_STALL_TIMEOUT_S or 3 median steps in a compute step; "
                "FTSLURM_HANG_TIMEOUT_S, 20 median steps or twice torchft's timeout in a long "
                "phase): it is stalled")

    def _heartbeat(self, rid: str, when: float) -> str | None:
        if not rid or not self.lighthouse:
            return None
        from ftslurm.lighthouse.status_page import fetch

        stopped = self.stopped()
        if not stopped:
            self._old_reads, self._old_since = 0, None
            if rid in self._live or self.clock() - self._looked < LIVE_LOOK_S:
                return None
        self._looked = self.clock()
        page = (self.read_page or fetch)(self.lighthouse)
        beats = getattr(page, "heartbeats", None) or []
        beat = next((h for h in beats if getattr(h, "replica_id", None) == rid), None)
        if beat is None or not beat.old:
            if beat is not None:
                self._live.add(rid)
            self._old_reads, self._old_since = 0, None
            return None
        if rid not in self._live:
            return None
        if self._old_since is not None and when != self._old_since:
            self._old_reads = 0  # the worker made progress: its heartbeat is late, not gone
        if not self._old_reads:
            self._old_since = when
        self._old_reads += 1
        if self._old_reads < HEARTBEAT_READS or not stopped:
            return None
        age = f" (last seen {beat.age_s:.1f} s ago)" if beat.age_s is not None else ""
        return (f"the Lighthouse lost its heartbeat{age} and the worker is stopped: it is "
                "hung or frozen")
