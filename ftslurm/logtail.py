"""Tail replica logs merged in time order, following growth, new files and requeued attempts.

Why it reads backwards: replica logs of a long run reach gigabytes, and `logs -n 20` or
`status` must answer at once, so only the tail of each file is read (seek from the end, one
block at a time, until enough lines are found), never the whole file.

Merging: lines are ordered by the timestamp at their start (torchtitan's `[titan] 2026-11-23
10:10:51,647`, the Rust `2026-11-23T10:10:51.647`, the launcher's `[2026-11-23 10:10:51]`).
A line without one (tracebacks, JSON dumps, warnings) stays glued to the previous line of the
same file, and a file's own order is never changed: its keys are made non-decreasing, so the
k-way merge only interleaves files. Requeued tasks append to the same file (`--open-mode=
append`), so following a file follows every new attempt; a truncated file is read again from
the start, and files that appear later (a task that starts late) are picked up.
"""

from __future__ import annotations

import heapq
import os
import re
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ftslurm.logfile import is_gzip, open_log

BLOCK = 64 * 1024
CONTEXT = 200  # lines read before a tail to date its first, untimed lines

# date + time at the start of a line, after an optional `[titan] ` / `[` prefix
_TS_RE = re.compile(
    r"^(?:\[titan\]\s+|\[)?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?"
)
# C++ (glog) lines of torch: `W1123 10:12:54.001000 11604 file.py:1028] ...` (no year)
_GLOG_RE = re.compile(r"^\[?[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s")
_EPOCH = datetime(1970, 1, 1)


def line_time(line: str, year: int | None = None) -> float | None:
    """Seconds (the log's local wall clock read as UTC, only for ordering) or None. A glog
    line has no year: `year` (default: this year) is assumed."""
    m = _TS_RE.match(line)
    if m:
        date, clock, frac_text = m.group(1), m.group(2), m.group(3)
    else:
        g = _GLOG_RE.match(line)
        if not g:
            return None
        date = f"{year or datetime.now().year:04d}-{g.group(1)}-{g.group(2)}"
        clock, frac_text = g.group(3), g.group(4)
    try:
        dt = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError:
        return None
    frac = float("0." + frac_text) if frac_text else 0.0
    return (dt - _EPOCH).total_seconds() + frac


def read_tail(path: Path, n: int, block: int = BLOCK) -> tuple[list[str], int]:
    """The last `n` complete lines of `path` and the offset just after them (where following
    resumes). Reads backwards from the end in blocks; an unterminated last line (a writer in
    the middle of a line) is left for the follower. A gzipped log is read by
    `read_archive_tail`."""
    if is_gzip(path):
        return read_archive_tail(path, n)
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        pos = size
        data = b""
        while pos > 0:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
            if data.count(b"\n") > n:
                break
    end = data.rfind(b"\n") + 1  # only complete lines
    complete = data[:end]
    lines = complete.split(b"\n")[:-1]
    if pos > 0:
        lines = lines[1:]  # the first piece may be the middle of a line
    if n >= 0:
        lines = lines[-n:] if n else []
    offset = size - (len(data) - end)
    return [b.decode(errors="replace").rstrip("\r") for b in lines], offset


def read_archive_tail(path: Path, n: int) -> tuple[list[str], int]:
    """`read_tail` of a gzipped log (`tft-12_0.out.gz`, or gzipped in place). A gzip stream
    cannot be read backwards, so it is read through once keeping the last `n` lines (all if
    n < 0); an archive is not written to, so its last line counts even without a newline and
    the offset is the file's end."""
    keep = deque(_archive_lines(path), maxlen=n if n >= 0 else None)
    return [_text(b) for b in keep], path.stat().st_size


def _archive_lines(path: Path) -> Iterator[bytes]:
    """The lines of a gzipped log; a truncated or corrupt archive ends after what could be
    read (a log copied while it was being compressed is still worth its first part)."""
    with open_log(path) as fh:
        try:
            yield from fh
        except (EOFError, zlib.error, OSError):
            return


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\n").decode(errors="replace").rstrip("\r")


def read_tail_bytes(path: Path, nbytes: int) -> str:
    """Up to the last `nbytes` of `path`, starting at a line boundary (for summaries)."""
    if is_gzip(path):
        keep: deque[bytes] = deque()
        size = 0
        for raw in _archive_lines(path):
            keep.append(raw)
            size += len(raw)
            while size > nbytes:
                size -= len(keep.popleft())
        return b"".join(keep).decode(errors="replace")
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        start = max(0, size - nbytes)
        fh.seek(start)
        data = fh.read()
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode(errors="replace")


@dataclass
class Entry:
    """A line with its sort key, the source it came from, and its order in that source."""

    key: float
    label: str
    seq: int
    text: str


def keyed(lines: list[str], label: str, last: float | None = None) -> list[Entry]:
    """Lines -> entries with non-decreasing keys: a line without a timestamp (or one that
    goes back in time) takes the key of the line before it. Leading lines without a time take
    the first time found in the batch (else `last`, else 0)."""
    if last is None:
        last = next((t for t in map(line_time, lines) if t is not None), 0.0)
    out = []
    for i, line in enumerate(lines):
        t = line_time(line)
        if t is not None and t > last:
            last = t
        out.append(Entry(last, label, i, line))
    return out


def merge(groups: list[list[Entry]]) -> list[Entry]:
    """k-way merge by time; files keep their own order; ties go to the earlier source."""
    return list(heapq.merge(*groups, key=lambda e: e.key))


@dataclass
class Source:
    """One followed file."""

    label: str
    path: Path
    offset: int = 0
    inode: int | None = None
    partial: bytes = b""
    last_key: float | None = None


@dataclass
class Follower:
    """Follows a set of files found by `discover()` (label -> path), emitting merged batches.

    `start(n)` returns the last n lines per file, merged; `poll()` returns what was appended
    since, merged. New files from `discover()` are read from their beginning."""

    discover: Callable[[], dict[str, Path]]
    sources: dict[str, Source] = field(default_factory=dict)

    def start(self, n: int) -> list[Entry]:
        groups = []
        for label, path in sorted(self.discover().items(), key=lambda kv: _label_order(kv[0])):
            try:
                # extra lines before the tail only to know the time of untimed first lines
                lines, offset = read_tail(path, n + CONTEXT)
                inode = path.stat().st_ino
            except OSError:
                continue
            src = Source(label, path, offset, inode)
            context, lines = lines[: max(0, len(lines) - n)], lines[len(lines) - n :] if n else []
            before = next((t for t in map(line_time, reversed(context)) if t is not None), None)
            entries = keyed(lines, label, before)
            if entries:
                src.last_key = entries[-1].key
            self.sources[label] = src
            groups.append(entries)
        return merge(groups)

    def poll(self) -> list[Entry]:
        for label, path in self.discover().items():
            if label not in self.sources:
                self.sources[label] = Source(label, path)  # new file: from its start
        groups = []
        for label in sorted(self.sources, key=_label_order):
            groups.append(self._read_new(self.sources[label]))
        return merge(groups)

    def _read_new(self, src: Source) -> list[Entry]:
        try:
            st = src.path.stat()
        except OSError:
            return []
        if src.inode is not None and st.st_ino != src.inode or st.st_size < src.offset:
            src.offset, src.partial = 0, b""  # replaced or truncated: read it again
        src.inode = st.st_ino
        if st.st_size == src.offset:
            return []
        try:
            if src.offset == 0 and is_gzip(src.path):  # an archive (new, or a log gzipped in place)
                lines, src.offset = read_archive_tail(src.path, -1)
                return self._keyed(src, lines)
            with open(src.path, "rb") as fh:
                fh.seek(src.offset)
                data = fh.read(st.st_size - src.offset)
        except OSError:
            return []
        src.offset += len(data)
        data = src.partial + data
        end = data.rfind(b"\n") + 1
        src.partial = data[end:]
        lines = [b.decode(errors="replace").rstrip("\r") for b in data[:end].split(b"\n")[:-1]]
        return self._keyed(src, lines)

    @staticmethod
    def _keyed(src: Source, lines: list[str]) -> list[Entry]:
        entries = keyed(lines, src.label, src.last_key)
        if entries:
            src.last_key = entries[-1].key
        return entries

    def follow(
        self, interval: float = 0.3, stop: Callable[[], bool] = lambda: False
    ) -> Iterator[Entry]:
        while not stop():
            yield from self.poll()
            time.sleep(interval)


def _label_order(label: str) -> tuple[int, str]:
    """r0 < r1 < r10 < lh: replicas by number, other sources after."""
    m = re.fullmatch(r"r(\d+)", label)
    return (int(m.group(1)), "") if m else (1 << 30, label)


# --------------------------------------------------------------------------------------------
# Finding the files of a run (no Slurm call: works from the login node)

_TASK_RE = re.compile(r"^tft-(.+)_(\d+)\.out(\.gz)?$")  # .gz: an archived run


def newest_run_dir(runs_dir: Path) -> Path | None:
    """The most recently modified `tft-*` run folder under `runs_dir`."""
    try:
        dirs = [p for p in runs_dir.iterdir() if p.is_dir() and p.name.startswith("tft-")]
    except OSError:
        return None
    return max(dirs, key=lambda p: p.stat().st_mtime, default=None)


def job_logs(run_dir: Path) -> dict[str, dict[int, Path]]:
    """job id -> {replica: `tft-<job>_<i>.out`} of the logs in `run_dir`; in a `tft-<job>`
    folder only that job's. An archived `tft-<job>_<i>.out.gz` counts when there is no
    `.out`."""
    folder = run_dir.resolve().name
    only = folder[len("tft-") :] if folder.startswith("tft-") else None
    try:
        names = sorted(os.listdir(run_dir))
    except OSError:
        return {}
    jobs: dict[str, dict[int, Path]] = {}
    for name in names:
        m = _TASK_RE.match(name)
        if m and (only is None or m.group(1) == only):
            logs = jobs.setdefault(m.group(1), {})
            replica = int(m.group(2))
            if replica not in logs or not m.group(3):  # the live log before its archive
                logs[replica] = run_dir / name
    return jobs


def newest_job(jobs: dict[str, dict[int, Path]]) -> str | None:
    """The job whose logs changed last (a folder holding several jobs' logs: `.`, a copy)."""

    def mtime(job: str) -> float:
        return max((_mtime(p) for p in jobs[job].values()), default=0.0)

    return max(jobs, key=mtime, default=None)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def replica_logs(
    run_dir: Path, replicas: set[int] | None = None, job: str | None = None
) -> dict[str, Path]:
    """`r<i>` -> `tft-<job>_<i>.out` in `run_dir`, only the selected replicas if given. In a
    `tft-<job>` folder only that job's logs; in another (`.`, a copy, a renamed folder) the
    `tft-*_<i>.out` there of `job`, else of the newest job (two replica 0s cannot share one
    prefix)."""
    jobs = job_logs(run_dir)
    job = job if job is not None else newest_job(jobs)
    if job is None or job not in jobs:
        return {}
    return {f"r{i}": p for i, p in sorted(jobs[job].items()) if replicas is None or i in replicas}


COLORS = ("36", "33", "35", "32", "34", "31", "96", "93")


def prefix(label: str, width: int, color: bool) -> str:
    text = f"[{label}]".ljust(width + 2) + " "
    if not color:
        return text
    order = _label_order(label)[0]
    code = COLORS[order % len(COLORS)] if order < (1 << 30) else "90"
    return f"\x1b[{code}m{text}\x1b[0m"
