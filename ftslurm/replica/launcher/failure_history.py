"""Each array task's failure history, and the failures `simulate-failure` injected.

- `History`: each array task's failures (time, node, code, whether `simulate-failure`
  injected it) in `<run folder>/failures/task-<N>.json`, beside the slot claims, so the count
  survives requeues; bounded to the last MAX_RECORDS. `should_requeue` (plan.py) stops a
  replica after FT_MAX_FAILS failures within FT_FAIL_WINDOW_MIN. The launcher (often root)
  acts on these records, so only its own count: a file and a `failures/` folder of this
  user's (or root's) that no one else can write, records whose every field is in range (a
  damaged one is dropped, never raised on), the array's own task files, one at a time.
- `bad_node`: a node on which the array's replicas failed FT_NODE_MAX_FAILS times within the
  window, more than twice as often as on any other node (a fault that follows the replica, a
  bug, fails on every node alike and takes none out). Injected failures count only when
  `simulate-failure --count-as-bad` marked them.
- `injected_event`: the simulate-failure event that explains a failure, so that it is not
  held against the node or the replica's rate cap.

Pre-flight checks and taking a node out (preflight.py) read and write the same folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ftslurm import knobs, safefile
from ftslurm.errors import UserError
from ftslurm.replica.plan import Env

MAX_RECORDS = 64  # failures kept per task: FT_MAX_FAILS counts within a window, not for ever
MAX_FILE_BYTES = 64 * 1024
MAX_TASK_FILES = 4096  # task histories read at a failure: the array's tasks, at most this many
MAX_EPOCH = float(1 << 33)  # a record's time beyond this (the year 2242) is damage, not a clock
MAX_CODE = 255  # an exit code (a signal's is 128 + its number)
# a node name as Slurm and gethostname() give it; anything else is not printed into a command
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
INJECTED_GRACE_S = 1.0  # simulate-failure writes its event right after the kill


# ---- the failure history --------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failed attempt of an array task."""

    t: float  # epoch seconds
    node: str
    code: int
    kind: str = "crash"  # "crash" or "preflight"
    injected: bool = False  # simulate-failure's, not --count-as-bad: not the node's fault
    detail: str = ""


def failures_dir(run_dir: Path) -> Path:
    """`<run folder>/failures`: the failure histories and the node actions of one run."""
    return run_dir / "failures"


def open_folder(run_dir: Path) -> Path:
    """`failures_dir(run_dir)`, made when missing (the script makes the run folder; a test or
    a launcher outside Slurm may not have); a link at either name is refused, and so is a
    folder of another user's or one others can write (its records would not be trusted)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    folder = failures_dir(safefile.real_dir(run_dir))
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o755)  # readable by status and report, writable by the launcher only
    safefile.real_dir(folder)
    if (why := safefile.untrusted_dir(folder)) is not None:
        raise UserError(f"not writing failure records into {folder}: {why} (its records would "
                        "not be trusted); chmod go-w it, or remove it")  # fmt: skip
    return folder


def _task_file(run_dir: Path, task: int) -> Path:
    return failures_dir(run_dir) / f"task-{task}.json"


def epoch(value: object) -> float | None:
    """`value` as a record's time: a JSON number (not a bool) from 0 to MAX_EPOCH, else None
    (Infinity, NaN and 1e300 are damage: they would overflow a clock or a date format)."""
    if type(value) not in (int, float) or not 0 <= value <= MAX_EPOCH:  # type: ignore[operator]
        return None
    return float(value)  # type: ignore[arg-type]


def _failure(rec: object) -> Failure | None:
    """One record of a history file, or None when any field is not what the launcher writes:
    a time (`epoch`), a node name, an exit code 0..MAX_CODE, strings, a bool."""
    if not isinstance(rec, dict):
        return None
    t, node, code = epoch(rec.get("t")), rec.get("node"), rec.get("code")
    kind, injected, detail = rec.get("kind", "crash"), rec.get("injected", False), rec.get(
        "detail", "")  # fmt: skip
    if (t is None or not isinstance(node, str) or not NODE_NAME.fullmatch(node)
            or type(code) is not int or not 0 <= code <= MAX_CODE
            or not isinstance(kind, str) or type(injected) is not bool
            or not isinstance(detail, str)):  # fmt: skip
        return None
    return Failure(t, node, code, kind[:32], injected, detail[:512])


def _parse_failures(raw: bytes | None) -> list[Failure]:
    """A history file's failures (its last MAX_RECORDS); a damaged file or record is skipped,
    never fatal."""
    try:
        obj = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        return []
    recs = obj.get("failures") if isinstance(obj, dict) else None
    if not isinstance(recs, list):
        return []
    return [f for rec in recs[-MAX_RECORDS:] if (f := _failure(rec)) is not None]


def _read_task(run_dir: Path, task: int, refused: list[str] | None = None) -> list[Failure]:
    """Task `task`'s failures; a file another user could have written is none (its reason
    added to `refused`)."""
    try:
        return _parse_failures(safefile.read_own(_task_file(run_dir, task), MAX_FILE_BYTES))
    except safefile.UnsafePath as e:
        if refused is not None:
            refused.append(f"task-{task}.json: {e.why}")
        return []


def read_history(run_dir: Path, task: int) -> list[Failure]:
    """Task `task`'s failures, oldest first (none when the file is missing, unreadable, or
    not trusted: another user's, or in a folder or a file others can write)."""
    if safefile.untrusted_dir(failures_dir(run_dir)) is not None:
        return []
    return _read_task(run_dir, task)


def _task_ids(folder: Path, tasks: int | None) -> list[int]:
    """The tasks whose histories are read: 0..tasks-1 (the array's), else those with a file,
    at most MAX_TASK_FILES either way (planted names must not make every failure slow)."""
    if tasks is not None:
        return list(range(max(0, min(tasks, MAX_TASK_FILES))))
    found: list[int] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if m := re.fullmatch(r"task-([0-9]{1,6})\.json", entry.name):
                    found.append(int(m[1]))
                    if len(found) >= MAX_TASK_FILES:
                        break
    except OSError:
        return []
    return sorted(found)


def histories(run_dir: Path, tasks: int | None = None,
              refused: list[str] | None = None) -> Iterator[tuple[int, list[Failure]]]:  # fmt: skip
    """(task, its failures) for the array's tasks (`tasks`: the array's size; None: the files
    there), one file at a time: each file is capped (MAX_FILE_BYTES) and so is their number
    (MAX_TASK_FILES). Nothing when the folder is not trusted (its reason in `refused`)."""
    folder = failures_dir(run_dir)
    if (why := safefile.untrusted_dir(folder)) is not None:
        if refused is not None:
            refused.append(f"{folder}: {why}")
        return
    for task in _task_ids(folder, tasks):
        yield task, _read_task(run_dir, task, refused)


def all_failures(run_dir: Path, tasks: int | None = None) -> dict[int, list[Failure]]:
    """Every task's failures: task -> its history (see `histories`)."""
    return {task: history for task, history in histories(run_dir, tasks) if history}


def record_failure(run_dir: Path, task: int, failure: Failure) -> list[Failure]:
    """Append `failure` to task `task`'s history (the last MAX_RECORDS kept); the history.
    One launcher per task writes it at a time (Slurm runs one attempt of a task), and the
    write is a rename, so a reader never sees half a file."""
    folder = open_folder(run_dir)
    history = [*read_history(run_dir, task), failure][-MAX_RECORDS:]
    body = {"version": 1, "task": task, "failures": [asdict(f) for f in history]}
    safefile.write_atomic(folder / f"task-{task}.json", json.dumps(body, indent=1) + "\n")
    return history


def counted(history: Sequence[Failure]) -> list[float]:
    """The failure times the caps count: an injected failure only with --count-as-bad."""
    return [f.t for f in history if not f.injected]


_SAID: set[str] = set()  # the folders whose refused records this process has named


def node_failures(run_dir: Path, now: float, window_s: float, tasks: int | None = None,
                  say: Callable[[str], None] | None = None) -> Counter[str]:  # fmt: skip
    """Per node: the array's counted failures within `window_s` before `now` (`tasks`: the
    array's size, see `histories`). Records another user could have written are left out,
    said once per process through `say`."""
    counts: Counter[str] = Counter()
    refused: list[str] = []
    for _, history in histories(run_dir, tasks, refused):
        counts.update(f.node for f in history
                      if not f.injected and now - window_s <= f.t <= now + 1.0)  # fmt: skip
    folder = str(failures_dir(run_dir))
    if refused and say is not None and folder not in _SAID:
        _SAID.add(folder)
        say(f"failure history: ignoring {len(refused)} record file(s) or folder(s) another "
            f"user could have written ({refused[0]}): only this user's or root's count")
    return counts


def bad_node(run_dir: Path, node: str, now: float, window_s: float, limit: int,
             tasks: int | None = None,
             say: Callable[[str], None] | None = None) -> str | None:  # fmt: skip
    """The evidence that `node` is bad (a sentence), or None: at least `limit` (>0) of the
    array's failures within the window were on it, and more than twice as many as on any
    other node (replicas failing alike everywhere, a bug, are not a node's fault; two
    replicas each failing twice would otherwise drain whichever node came second first)."""
    if limit <= 0:
        return None
    counts = node_failures(run_dir, now, window_s, tasks, say)
    here = counts.pop(node, 0)
    others = max(counts.values(), default=0)
    if here < limit or here <= 2 * others:
        return None
    return (f"{here} failures of this array's replicas within {window_s / 60:g} min "
            f"(FT_NODE_MAX_FAILS={limit}; other nodes at most {others})")  # fmt: skip


# ---- injected failures (simulate-failure's event log) ---------------------------------------


def events_paths(env: Env, outputs: Path, run_dir: Path) -> list[Path]:
    """The event logs simulate-failure may append to, as the node sees them: FTSLURM_EVENTS
    (else `<outputs>/events.jsonl`, the command's default) and the run folder's own
    `events.jsonl` (`ftslurm demo`'s, which the report reads too)."""
    given = (knobs.load(env).FTSLURM_EVENTS or "").strip()
    return [Path(given) if given else outputs / "events.jsonl", run_dir / "events.jsonl"]


def injected_event(logs: Sequence[Path], since: float, job: str | None, replicas: Sequence[int],
                   node: str, grace_s: float = INJECTED_GRACE_S,
                   sleep: Callable[[float], None] = time.sleep):  # fmt: skip
    """The simulate-failure event that explains a failure after `since` (epoch s) of this
    task (job + one of `replicas`) or this node, in one of the event `logs`, or None. Waits
    up to `grace_s` for it when a log was written since the attempt started (the tool writes
    its line right after the kill); no such log, no wait."""
    from ftslurm.event_log import find_injected

    def fresh(path: Path) -> bool:
        try:
            return path.is_file() and path.stat().st_mtime >= since - 1.0
        except OSError:
            return False

    deadline = time.monotonic() + grace_s
    while True:
        live = [p for p in dict.fromkeys(logs) if fresh(p)]
        if not live:  # no simulate-failure at work during this attempt
            return None
        for path in live:
            ev = find_injected(path, since, job, replicas, node)
            if ev is not None:
                return ev
        if time.monotonic() >= deadline:
            return None
        sleep(0.2)
