"""The failure event log: the contract between `ftslurm simulate-failure`, the launcher (which
tells an injected failure from a real one by it) and `ftslurm report`.

Logs say when the system NOTICED a failure (a new quorum without the replica, a failed commit);
only the tool that caused it knows when it happened. `simulate-failure` appends one JSON object
per line to `paths.events_log()` (default `outputs/events.jsonl`, or `events.jsonl` in the run
directory), and the report uses it as the failure / restart time.

Schema (version 1), one object per line, UTF-8::

    {"time": "2026-11-23T08:51:02.461+00:00",   # required, ISO-8601; with a zone (preferred)
                                                 # or naive = the cluster's local wall clock
     "action": "kill",                           # required, one of ACTIONS below
     "replica": 1,                               # array index (int or "1"), null if none
     "node": "worker-0",                         # node name, null if none
     "job": "12",                                # Slurm job (array) id, null if none
     "detail": "SIGKILL to worker pid 29490",    # optional free text; other keys are ignored
     "count_as_bad": false,                      # optional: `simulate-failure --count-as-bad`
                                                 # (the launcher may drain the node for it)
     "rank": 1}                                  # optional: `--mode kill --rank 1` killed only
                                                 # that rank's worker of the replica

Actions:
- `node-down`  a node taken DOWN (`scontrol update State=DOWN`): the replica on it dies.
- `kill`       a replica's processes killed (signal), the job stays.
- `requeue`    `scontrol requeue <job>_<task>`: the replica dies and its task is requeued.
- `hang`       a replica's processes stopped (alive, not stepping): the quorum drops it.
- `freeze-node` every process of a node stopped: its replica stops, the node looks up.
- `resume`     a node set back to RESUME: a requeued replica can start again.
- `restart`    a replica started again by hand or by the tool (not by Slurm).
FAILURE_ACTIONS end a replica's attempt; RESTART_ACTIONS start the wait for its next one.
Unknown actions are kept and shown, never fatal. A line that is not a JSON object with a valid
`time` and `action` is counted as bad and skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ftslurm import safefile
from ftslurm.logvocab import FAILURE_MODES, MAX_DIGITS

SCHEMA_VERSION = 1
FAILURE_ACTIONS = frozenset(FAILURE_MODES)
RESTART_ACTIONS = frozenset({"resume", "restart", "requeue"})
ACTIONS = FAILURE_ACTIONS | RESTART_ACTIONS


@dataclass(frozen=True)
class InjectedEvent:
    """One line of the event log, validated."""

    time: str
    action: str
    replica: int | None = None
    node: str | None = None
    job: str | None = None
    detail: str = ""
    count_as_bad: bool = False
    rank: int | None = None  # the one rank killed (`simulate-failure --rank`), else None

    def to_json_line(self) -> str:
        """What `simulate-failure` writes (one line, no trailing newline)."""
        obj = {"time": self.time, "action": self.action, "replica": self.replica,
               "node": self.node, "job": self.job, "detail": self.detail}  # fmt: skip
        if self.count_as_bad:
            obj["count_as_bad"] = True
        if self.rank is not None:
            obj["rank"] = self.rank
        return json.dumps(obj, separators=(", ", ": "))


def now_iso() -> str:
    """The current time as the schema wants it: ISO-8601 with the local zone, milliseconds."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def append_event(ev: InjectedEvent, path: Path | None = None) -> Path:
    """Append one event as one line (default `paths.events_log()`); what simulate-failure calls.

    One `write` of one line in append mode, so concurrent writers do not interleave lines.
    `simulate-failure` runs under sudo: a link planted at the log's name is refused, never
    followed (`safefile.open_append`). The file is made 0o644, not private: `ftslurm report`,
    run without sudo, reads it.
    """
    from ftslurm.paths import events_log

    target = Path(path) if path is not None else events_log()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = safefile.open_append(target, mode=0o644)
    with os.fdopen(fd, "ab") as fh:
        fh.write((ev.to_json_line() + "\n").encode())
    return target


def parse_event_line(line: str | bytes) -> InjectedEvent | None:
    """One JSON line -> InjectedEvent, None if it breaks the schema (never raises)."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    t, action = obj.get("time"), obj.get("action")
    if not isinstance(t, str) or not isinstance(action, str) or not action:
        return None
    if to_seconds(t, 0.0) is None:
        return None
    replica = obj.get("replica")
    # ASCII digits only ("²".isdigit() is true and int() refuses it), and no more than a
    # replica id can have: int() of 5,000 digits raises (Python's int max str digits)
    if isinstance(replica, str) and replica.isascii() and replica.isdecimal():
        replica = int(replica) if len(replica) <= MAX_DIGITS else None
    if not isinstance(replica, int) or isinstance(replica, bool):
        replica = None
    node, job = obj.get("node"), obj.get("job")
    rank = obj.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 10**MAX_DIGITS:
        rank = None
    return InjectedEvent(
        t, action, replica,
        str(node) if node is not None else None,
        str(job) if job is not None else None,
        str(obj.get("detail") or ""),
        obj.get("count_as_bad") is True,
        rank,
    )


def find_injected(path: Path, since: float, job: str | None, replicas: tuple[int, ...] | list[int],
                  node: str) -> InjectedEvent | None:  # fmt: skip
    """The newest failure simulate-failure injected at or after `since` (epoch seconds) into
    this job's `replicas` or onto `node`, or None: how a launcher tells an injected crash
    from a real one (the last 4 MiB of the log are read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - (4 << 20)))
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        ev = parse_event_line(line)
        if ev is None or ev.action not in FAILURE_ACTIONS:
            continue
        t = to_seconds(ev.time, 0.0)
        if t is None or t < since - 1.0:
            continue
        if (job is not None and ev.job == job and ev.replica in replicas) or ev.node == node:
            return ev
    return None


def to_seconds(iso: str, utc_offset: float) -> float | None:
    """ISO-8601 -> report seconds (the logs' local clock read as UTC), None if invalid."""
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except (ValueError, TypeError):
        return None
    if dt.tzinfo is None:
        return (dt - datetime(1970, 1, 1)).total_seconds()
    return dt.timestamp() + utc_offset
