"""Tail replica logs merged in time order, following growth, new files and requeued attempts.

Why it reads backwards: replica logs of a long run reach gigabytes, and `logs -n 20` or
`status` must answer at once, so only the tail of each file is read (seek from the end, one
block at a time, until enough lines are found), never the whole file. `read_tail` is the one
tail reader (`status`, the Lighthouse's log and `demo` use it too). Memory is bounded by the
lines returned: a line over LINE_MAX (a newline-free log is one line of its whole size) comes
back as its head and a marker (`CutLines`, also what the follower keeps of the line being
written).

Merging: lines are ordered by the timestamp at their start (torchtitan's `[titan] 2026-11-23
10:10:51,647`, the Rust `2026-11-23T10:10:51.647`, the launcher's `[2026-11-23 10:10:51]`).
A line without one (tracebacks, JSON dumps, warnings) stays glued to the previous line of the
same file, and a file's own order is never changed: its keys are made non-decreasing, so the
k-way merge only interleaves files. Requeued tasks append to the same file (`--open-mode=
append`), so following a file follows every new attempt; a truncated file is read again from
the start, and files that appear later (a task that starts late) are picked up.
"""

from __future__ import annotations

import errno
import heapq
import os
import re
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import BinaryIO

from ftslurm.logfile import is_gzip, open_log
from ftslurm.logvocab import line_time

BLOCK = 64 * 1024
CONTEXT = 200  # lines read before a tail to date its first, untimed lines
LINE_MAX = 1 << 20  # a longer line is shown cut, with a marker: memory is lines shown x this
KEEP_MAX = 1 << 20  # the bytes a tail search keeps; past it, the tail is read a second time
_TIME_HEAD = 64  # bytes of a context line kept: its time is at its start
_READ = 1 << 20
_FORWARD = 8 << 10  # a tail being printed is read in blocks this small (see `_forward`)


@dataclass
class CutLines:
    """Bytes -> lines without their newline, each cut to its first `max_line` bytes.

    Why: a newline-free log (binary junk, a progress bar's carriage returns) is one line of
    gigabytes; whoever shows a tail must hold at most `max_line` bytes of any line. Fed blocks
    of a file in order; `head`/`cut` are the unfinished last line (kept / not kept bytes).
    """

    max_line: int = LINE_MAX
    head: bytearray = field(default_factory=bytearray)
    cut: int = 0

    def feed(self, data: bytes) -> list[tuple[bytes, int]]:
        """The lines `data` completes, each as (its first `max_line` bytes, bytes cut)."""
        *done, last = data.split(b"\n")
        out = []
        if done:
            self._add(done[0])
            out.append(self.flush())
            m = self.max_line
            out += [(b[:m], max(0, len(b) - m)) for b in done[1:]]
        self._add(last)
        return out

    def each(self, data: bytes) -> Iterator[tuple[bytes, int]]:
        """`feed` one line at a time: a block of blank lines is thousands of lines, and a
        merge of many logs holds one block per log; consume it whole before the next."""
        at = 0
        while (nl := data.find(b"\n", at)) >= 0:
            self._add(memoryview(data)[at:nl])
            yield self.flush()
            at = nl + 1
        self._add(memoryview(data)[at:])

    def flush(self) -> tuple[bytes, int]:
        """The unfinished line (possibly empty), and start a new one."""
        line = (bytes(self.head), self.cut)
        self.head, self.cut = bytearray(), 0
        return line

    @property
    def pending(self) -> int:
        """Bytes of the unfinished line, those cut included."""
        return len(self.head) + self.cut

    def _add(self, piece: bytes | memoryview) -> None:
        room = max(0, self.max_line - len(self.head))
        if room:
            self.head += memoryview(piece)[:room]  # no copy of a long piece
        self.cut += max(0, len(piece) - room)


def read_tail(
    path: Path, n: int = -1, block: int = BLOCK, *, max_bytes: int | None = None,
    partial: bool = False, context: int = 0,
) -> tuple[list[str], int]:
    """The last `n` lines of `path` (all if n < 0) within its last `max_bytes` (all if None),
    and the offset just after the last complete line (where following resumes).

    Reads backwards from the end in blocks, only as far as it needs; the first line it reads
    is dropped unless the file starts there (it may be the middle of a line). An unterminated
    last line (a writer in the middle of it) is left for the follower unless `partial`. A
    gzipped log (`tft-12_0.out.gz`, or gzipped in place) cannot be read backwards: it is read
    through once; nothing writes to an archive, so its last line counts even without a newline
    and the offset is the file's end.

    A line longer than LINE_MAX is its first LINE_MAX bytes and a marker, so memory stays
    bounded by the lines returned. `context` more lines before those are returned first, cut
    to their first bytes: a caller needs only their time. Anything but a regular file (a
    FIFO would block, a device never ends) raises OSError.
    """
    _regular(path)
    if is_gzip(path):
        tail = _Tail(n, context, max_bytes)
        with open_log(path) as fh:
            whole = _feed_archive(fh, tail)
        return tail.finish(partial=whole)[0], path.stat().st_size
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        floor = 0 if max_bytes is None else max(0, size - max_bytes)
        want = n + context if n >= 0 else -1
        pos, chunks, kept, newlines = size, [], 0, 0
        while pos > floor and (want < 0 or newlines <= want):
            step = min(block, pos - floor)
            pos -= step
            fh.seek(pos)
            chunk = fh.read(step)
            newlines += chunk.count(b"\n")
            if kept <= KEEP_MAX:  # past it, only counted: read again below, line by line
                chunks.append(chunk)
                kept += len(chunk)
        if kept <= KEEP_MAX:
            blocks: Iterable[bytes] = [b"".join(reversed(chunks))]
        else:
            del chunks
            fh.seek(pos)
            blocks = iter(lambda: fh.read(min(_READ, size - fh.tell())), b"")
        tail = _Tail(n, context, skip_first=pos > 0)
        tail.feed(blocks)
    lines, pending = tail.finish(partial)
    return lines, size - pending


TAIL_MAX = 100_000  # lines of one log `logs -n` shows at most: past that, read the file itself
_LOOKAHEAD = 200  # leading untimed lines held while looking for a time to order them by
_LOOKAHEAD_BYTES = 1 << 20


@dataclass
class Tail:
    """The last `n` complete lines of a log, located but not yet read: `entries()` reads them
    one block at a time as they are consumed, so a tail of any length costs one block (and one
    cut line) of memory, not its lines; the file is opened again for each block, so merging
    thousands of logs holds none of them open. `end`: where following resumes. Up to `context`
    lines before the tail are read only for the time of the last timed one (`before`), which
    orders the tail's first, untimed lines. Build one with `find_tail`."""

    path: Path
    context_at: int  # where the context starts: a byte offset; an archive's: a line number
    first: int  # where the tail starts, the same way
    end: int
    archive: bool = False
    before: float | None = None

    def entries(self, label: str, on_key: Callable[[float], None] = lambda k: None
                ) -> Iterator[Entry]:  # fmt: skip
        """The tail's lines as entries with non-decreasing keys (see `keyed`); `on_key` is
        told each key as it goes (the follower's last key). Raises OSError when the file
        cannot be read any more."""
        lines = self._archive_lines() if self.archive else self._plain_lines()
        held: list[str] = []  # untimed first lines, until a time is found to give them
        size, seq = 0, 0
        last: float | None = None
        for line in lines:
            if not seq and not held:
                last = self.before  # known once the context before the first line is read
            t = line_time(line)
            if last is None and t is None and len(held) < _LOOKAHEAD and size < _LOOKAHEAD_BYTES:
                held.append(line)
                size += len(line)
                continue
            if last is None:
                last = t if t is not None else 0.0
            for h in held:
                yield Entry(last, label, seq, h)
                seq += 1
            held = []
            if t is not None and t > last:
                last = t
            on_key(last)
            yield Entry(last, label, seq, line)
            seq += 1
        for h in held:  # no timed line at all
            on_key(last or 0.0)
            yield Entry(last or 0.0, label, seq, h)
            seq += 1

    def _time_of(self, head: bytes) -> None:
        t = line_time(_text(head[:_TIME_HEAD]))
        if t is not None:
            self.before = t

    def _plain_lines(self) -> Iterator[str]:
        for head, _ in _forward(self.path, self.context_at, self.first):
            self._time_of(head)
        for line in _forward(self.path, self.first, self.end):
            yield _text(*line)

    def _archive_lines(self) -> Iterator[str]:
        """An archive read from its start (it cannot be read backwards); its last line counts
        without a newline, as nothing writes to an archive; a cut one ends where it could be
        read, less its unfinished line."""
        lines = CutLines()
        i = 0
        with open_log(self.path) as fh:
            read = getattr(fh, "read1", fh.read)
            while True:
                try:
                    data = read(_FORWARD)
                except (EOFError, zlib.error, OSError):
                    return
                done = lines.each(data) if data else iter([lines.flush()] if lines.pending else [])
                for line in done:
                    if i >= self.first:
                        yield _text(*line)
                    elif i >= self.context_at:
                        self._time_of(line[0])
                    i += 1
                if not data:
                    return


def find_tail(path: Path, n: int, *, context: int = 0, block: int = BLOCK) -> Tail:
    """Where the last `n` complete lines of `path` (and `context` lines before them) are,
    found by counting newlines backwards from the end, one block in memory (an archive:
    counted from its start). Raises OSError when it is not a readable regular file."""
    _regular(path)
    if is_gzip(path):
        total = 0
        with open_log(path) as fh:
            read = getattr(fh, "read1", fh.read)
            last = b"\n"
            try:
                while data := read(_READ):
                    total += data.count(b"\n")
                    last = data[-1:]
            except (EOFError, zlib.error, OSError):
                last = b"\n"  # a cut archive: its unfinished line is not shown
        total += last != b"\n"
        first = max(0, total - n)
        return Tail(path, max(0, first - context), first, path.stat().st_size, archive=True)
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        end = _line_start(fh, size, 0, block)  # after the last newline
        first = _line_start(fh, end, n, block)
        return Tail(path, _line_start(fh, first, context, block), first, end)


def _line_start(fh: BinaryIO, end: int, k: int, block: int) -> int:
    """The offset where the last `k` lines before `end` begin (`end`: 0 or just after a
    newline; k=0: after the last newline before `end`, where a line being written starts)."""
    # the newline at end-1 ends the last line: the k-th newline before it starts the k lines
    pos, need = (end - 1, k) if k else (end, 1)
    while pos > 0:
        step = min(block, pos)
        pos -= step
        fh.seek(pos)
        chunk = fh.read(step)
        count = chunk.count(b"\n")
        if count >= need:
            at = len(chunk)
            for _ in range(need):
                at = chunk.rfind(b"\n", 0, at)
            return pos + at + 1
        need -= count
    return 0


def _forward(path: Path, start: int, end: int) -> Iterator[tuple[bytes, int]]:
    """The lines of [start, end) (`end` just after a newline), cut to LINE_MAX, read in
    small blocks, the file opened again for each (see `Tail`): a merge holds one block per
    log, so 10,000 logs hold 80 MiB at most."""
    lines = CutLines()
    pos = start
    while pos < end:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read(min(_FORWARD, end - pos))
        if not data:  # truncated meanwhile: what is left is gone
            return
        pos += len(data)
        yield from lines.each(data)


def _regular(path: Path) -> os.stat_result:
    """`path`'s stat when it is a regular file, else OSError: a FIFO would block the reader
    for ever and a device never ends; a folder says so."""
    st = os.stat(path)
    if S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return st


@dataclass
class _Tail:
    """The last `n` lines of bytes fed in order (cut, see CutLines), after up to `context`
    lines before them, cut to a head. `max_bytes`: only lines within that many bytes of the
    end. `skip_first`: the first line is the middle of one (a read that began there)."""

    n: int
    context: int = 0
    max_bytes: int | None = None
    skip_first: bool = False
    lines: CutLines = field(default_factory=CutLines)
    shown: deque[tuple[bytes, int]] = field(default_factory=deque)
    before: deque[bytes] = field(default_factory=deque)
    size: int = 0

    def feed(self, blocks: Iterable[bytes]) -> None:
        for data in blocks:
            for line in self.lines.feed(data):
                self._add(line)

    def finish(self, partial: bool) -> tuple[list[str], int]:
        """The lines, the unterminated last one too if `partial`; and that one's length."""
        pending = self.lines.pending
        if partial and pending:
            self._add(self.lines.flush())
        return [_text(b) for b in self.before] + [_text(*x) for x in self.shown], pending

    def _add(self, line: tuple[bytes, int]) -> None:
        if self.skip_first:
            self.skip_first = False
            return
        shown = self.shown
        shown.append(line)
        self.size += len(line[0]) + line[1] + 1
        while shown and (
            0 <= self.n < len(shown) or self.max_bytes is not None and self.size > self.max_bytes
        ):
            head, cut = shown.popleft()
            self.size -= len(head) + cut + 1
            if self.context:
                self.before.append(head[:_TIME_HEAD])
                if len(self.before) > self.context:
                    self.before.popleft()


def _feed_archive(fh: BinaryIO, tail: _Tail) -> bool:
    """Feed a gzipped log to `tail`; False when the archive is cut or corrupt: it ends after
    what could be read (a log copied while it was being compressed is still worth its first
    part), less its last, unfinished line."""
    read = getattr(fh, "read1", fh.read)  # what is decompressed so far, before a cut's error
    try:
        tail.feed(iter(lambda: read(_READ), b""))
    except (EOFError, zlib.error, OSError):
        return False
    return True


def _text(raw: bytes, cut: int = 0) -> str:
    text = raw.rstrip(b"\n").decode(errors="replace").rstrip("\r")
    return f"{text} [... line cut: {cut} more bytes]" if cut else text


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
    pending: CutLines = field(default_factory=CutLines)  # the line being written, cut
    last_key: float | None = None


def _no_error(label: str, path: Path, error: OSError) -> None:
    pass


@dataclass
class Follower:
    """Follows a set of files found by `discover()` (label -> path), emitting merged batches.

    `start(n)` returns the last n lines per file, merged; `poll()` returns what was appended
    since, merged. New files from `discover()` are read from their beginning. A file that
    cannot be read (a folder or a dangling link named like a log, no permission) is told to
    `on_error` once, and tried again at each poll; the others go on."""

    discover: Callable[[], dict[str, Path]]
    sources: dict[str, Source] = field(default_factory=dict)
    on_error: Callable[[str, Path, OSError], None] = _no_error
    failed: set[Path] = field(default_factory=set)

    def start(self, n: int) -> list[Entry]:
        """`stream(n)` as a list (a few lines; `logs` prints the stream as it comes)."""
        return list(self.stream(n))

    def stream(self, n: int) -> Iterator[Entry]:
        """The last n lines per file, merged, read as they are consumed: memory is a block
        per file whatever n is (`logs -n 100000` on a log of blank lines held every line, at
        ~180 bytes each). Files are found (and failures told) now; lines come later."""
        streams = []
        for label, path in sorted(self.discover().items(), key=lambda kv: _label_order(kv[0])):
            try:
                # extra lines before the tail only to know the time of untimed first lines
                tail = find_tail(path, n, context=CONTEXT)
                inode = path.stat().st_ino
            except OSError as e:
                self._failed(label, path, e)
                continue
            src = self.sources[label] = Source(label, path, tail.end, inode)
            streams.append(self._tail(src, tail))
        return heapq.merge(*streams, key=lambda e: e.key)

    def _tail(self, src: Source, tail: Tail) -> Iterator[Entry]:
        def on_key(key: float) -> None:
            src.last_key = key

        try:
            yield from tail.entries(src.label, on_key)
        except OSError as e:  # gone unreadable while being read: the others go on
            self._failed(src.label, src.path, e)

    def poll(self) -> list[Entry]:
        for label, path in self.discover().items():
            if label not in self.sources:
                self.sources[label] = Source(label, path)  # new file: from its start
        groups = []
        for label in sorted(self.sources, key=_label_order):
            groups.append(self._read_new(self.sources[label]))
        return merge(groups)

    def _failed(self, label: str, path: Path, error: OSError) -> None:
        if path not in self.failed:
            self.failed.add(path)
            self.on_error(label, path, error)

    def _read_new(self, src: Source) -> list[Entry]:
        try:
            st = _regular(src.path)
        except FileNotFoundError:
            return []  # gone (rotated, or not there yet): not an error while following
        except OSError as e:
            self._failed(src.label, src.path, e)
            return []
        if src.inode is not None and st.st_ino != src.inode or st.st_size < src.offset:
            src.offset, src.pending = 0, CutLines()  # replaced or truncated: read it again
        src.inode = st.st_ino
        if st.st_size == src.offset:
            return []
        lines: list[str] = []
        try:
            if src.offset == 0 and is_gzip(src.path):  # an archive (new, or a log gzipped in place)
                lines, src.offset = read_tail(src.path)
            else:
                with open(src.path, "rb") as fh:
                    fh.seek(src.offset)
                    while src.offset < st.st_size:  # what was there at stat(), in blocks
                        data = fh.read(min(_READ, st.st_size - src.offset))
                        if not data:
                            break
                        src.offset += len(data)
                        lines += [_text(*x) for x in src.pending.feed(data)]
        except OSError as e:
            self._failed(src.label, src.path, e)
            return self._keyed(src, lines)
        self.failed.discard(src.path)
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


COLORS = ("36", "33", "35", "32", "34", "31", "96", "93")


def prefix(label: str, width: int, color: bool) -> str:
    text = f"[{label}]".ljust(width + 2) + " "
    if not color:
        return text
    order = _label_order(label)[0]
    code = COLORS[order % len(COLORS)] if order < (1 << 30) else "90"
    return f"\x1b[{code}m{text}\x1b[0m"
