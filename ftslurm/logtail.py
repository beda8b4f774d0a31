"""Tail replica logs merged in time order, following growth, new files and requeued attempts.

Why it reads backwards: replica logs of a long run reach gigabytes, and `logs -n 20` or
`status` must answer at once, so only the tail of each file is read (seek from the end, one
block at a time, until enough lines are found), never the whole file. `read_tail` is the one
tail reader (`status`, the Lighthouse's log and `demo` use it too).

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import logvocab
from ftslurm.logfile import is_gzip, open_log
from ftslurm.logvocab import line_time

BLOCK = 64 * 1024
CONTEXT = 200  # lines read before a tail to date its first, untimed lines


def read_tail(
    path: Path, n: int = -1, block: int = BLOCK, *, max_bytes: int | None = None,
    partial: bool = False,
) -> tuple[list[str], int]:
    """The last `n` lines of `path` (all if n < 0) within its last `max_bytes` (all if None),
    and the offset just after the last complete line (where following resumes).

    Reads backwards from the end in blocks, only as far as it needs; the first line it reads
    is dropped unless the file starts there (it may be the middle of a line). An unterminated
    last line (a writer in the middle of it) is left for the follower unless `partial`. A
    gzipped log (`tft-12_0.out.gz`, or gzipped in place) cannot be read backwards: it is read
    through once; nothing writes to an archive, so its last line counts even without a newline
    and the offset is the file's end.
    """
    if is_gzip(path):
        return _archive_tail(path, n, max_bytes), path.stat().st_size
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        floor = 0 if max_bytes is None else max(0, size - max_bytes)
        pos, chunks, newlines = size, [], 0
        while pos > floor and (n < 0 or newlines <= n):
            step = min(block, pos - floor)
            pos -= step
            fh.seek(pos)
            chunks.append(fh.read(step))
            newlines += chunks[-1].count(b"\n")
    data = b"".join(reversed(chunks))
    end = data.rfind(b"\n") + 1  # after the last complete line
    lines = (data if partial else data[:end]).split(b"\n")
    if not lines[-1]:
        lines.pop()  # after the last newline
    if pos > 0:
        lines = lines[1:]  # the first piece may be the middle of a line
    if n >= 0:
        lines = lines[-n:] if n else []
    return [_text(b) for b in lines], size - (len(data) - end)


def _archive_tail(path: Path, n: int, max_bytes: int | None) -> list[str]:
    """`read_tail`'s lines of a gzipped log, read through once."""
    lines: Iterable[bytes] = _archive_lines(path)
    if max_bytes is not None:
        window: deque[bytes] = deque()
        size = 0
        for raw in lines:
            window.append(raw)
            size += len(raw)
            while size > max_bytes:
                size -= len(window.popleft())
        lines = window
    return [_text(b) for b in deque(lines, maxlen=n if n >= 0 else None)]


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
                lines, src.offset = read_tail(src.path)
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
        lines = [_text(b) for b in data[:end].split(b"\n")[:-1]]
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


def job_logs(run_dir: Path) -> dict[str, dict[int, Path]]:
    """job id -> {replica: `tft-<job>_<i>.out`} of the logs in `run_dir`; in a `tft-<job>`
    folder only that job's. An archived `tft-<job>_<i>.out.gz` counts when there is no
    `.out`."""
    only = logvocab.run_job(run_dir.resolve().name)
    try:
        names = sorted(os.listdir(run_dir))
    except OSError:
        return {}
    jobs: dict[str, dict[int, Path]] = {}
    for name in names:
        log = logvocab.parse_log_name(name)
        if log and (only is None or log.job == only):
            logs = jobs.setdefault(log.job, {})
            if log.replica not in logs or not log.archived:  # the live log before its archive
                logs[log.replica] = run_dir / name
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
