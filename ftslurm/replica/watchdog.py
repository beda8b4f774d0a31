"""The launcher's watchdog: a training worker that hangs is ended, so the replica comes back.

A hung worker never exits, so nothing else restarts it: it keeps its allocation and its node
until a person or Slurm acts. The launcher (job.py) asks `Watchdog.check` about once a
second while torchrun or the worker runs; two rules, each needing evidence:

- **heartbeat**: the worker's Manager heartbeats to the Lighthouse from a thread of its own.
  When the Lighthouse lists that id (written by the worker into its progress file,
  peer_watch.py) as old in HEARTBEAT_READS reads in a row (RECHECK_S apart), after it was
  seen live in this attempt, the process is stopped or frozen (SIGSTOP, a stalled VM) or
  cut off from the Lighthouse; its peers have dropped it already.
- **progress**: a worker whose main thread hangs while its heartbeat thread runs (a stuck
  GPU kernel, a deadlock) still looks alive to the Lighthouse. The worker writes its
  progress at every quorum, commit and optimizer step; a step (not a quorum wait, which the
  Lighthouse bounds) older than the worker's own bound (FTSLURM_HANG_TIMEOUT_S at least,
  raised to 20 median steps or twice torchft's timeout) is a hang.

Then the launcher SIGKILLs the worker's processes (a stopped process dies of SIGKILL too)
and the attempt ends as after a crash: the requeue path brings the replica back, and it
heals from a peer. Reads of the page or the file that fail count as no evidence.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEARTBEAT_READS = 2
CHECK_EVERY_S = 1.0
RECHECK_S = 0.25  # after a read that found the heartbeat old, the next read comes sooner
MAX_PROGRESS_BYTES = 4096


def read_progress(path: Path) -> dict[str, Any] | None:
    """The worker's progress file (peer_watch.py), or None when absent or not ours."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_PROGRESS_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        float(data.get("time")), float(data.get("bound_s"))  # noqa: B018 - a type check
    except (TypeError, ValueError):
        return None
    return data


@dataclass
class Watchdog:
    """One attempt's watch; `check()` returns why the worker must be ended, or None."""

    progress: Path
    lighthouse: str | None
    floor_s: float
    read_page: Callable[[str], Any] | None = None
    clock: Callable[[], float] = time.time
    _live: set[str] = field(default_factory=set)
    _old_reads: int = 0

    @property
    def next_check_s(self) -> float:
        """When to ask again: soon while a heartbeat looks lost, else CHECK_EVERY_S (one
        read of the Lighthouse's page per replica and second)."""
        return RECHECK_S if self._old_reads else CHECK_EVERY_S

    def check(self) -> str | None:
        p = read_progress(self.progress)
        if p is None:
            return None  # the worker has not reached its first quorum
        why = self._heartbeat(str(p.get("id") or ""))
        if why:
            return why
        age = self.clock() - float(p["time"])
        bound = max(self.floor_s, float(p["bound_s"]))
        if p.get("state") == "step" and age > bound:
            return (f"no progress in its training step for {age:.0f} s (bound {bound:.0f} s: "
                    "FTSLURM_HANG_TIMEOUT_S, 20 median steps or twice torchft's timeout)")
        return None

    def _heartbeat(self, rid: str) -> str | None:
        if not rid or not self.lighthouse:
            return None
        from ftslurm.lighthouse.status_page import fetch

        page = (self.read_page or fetch)(self.lighthouse)
        beat = next((h for h in page.heartbeats if h.replica_id == rid), None) if page else None
        if beat is None:
            self._old_reads = 0
            return None
        if not beat.old:
            self._live.add(rid)
            self._old_reads = 0
            return None
        if rid not in self._live:
            return None
        self._old_reads += 1
        if self._old_reads < HEARTBEAT_READS:
            return None
        age = f" (last seen {beat.age_s:.1f} s ago)" if beat.age_s is not None else ""
        return (f"the Lighthouse lost its heartbeat{age} while the worker still runs: it is "
                "hung, stopped or cut off")
