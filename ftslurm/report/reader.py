"""Streaming reader: a log file -> its events, in one pass, memory flat in file size.

Why this shape: a 500 MB log must parse at >= 200 MB/s in pure Python. A Python loop over
every line costs ~1 us a line before it does anything, so each 1 MiB chunk (read into one
reused buffer) is searched with C-speed `bytes.find`/`count` and regexes that start with a
literal, and only the rare lines that matter are sliced out and handed to the one line
dispatcher (`logvocab.parse_line`).
`Quorum!` is printed on EVERY quorum round (one very long line): the rounds' ids are compared
in bulk, the participants parsed only when the id changes. Commit decisions (one per rank per
step) are counted here, in bulk between the rare lines, not turned into events.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm.logfile import is_archive, open_log
from ftslurm.logvocab import (
    BANNER,
    ERROR,
    FINISHED,
    LONG_NUMBER,
    MANAGER_LINE,
    QUORUM_IDS,
    Event,
    has_time,
    parse_line,
    parse_log_name,
    parse_time,
    strip_ansi,
)
from ftslurm.report import restarts

MAX_LINE = 8 << 20  # longer "lines" (binary junk without newlines) are dropped, not buffered
CHUNK = 1 << 20


@dataclass
class ParseStats:
    """What the parser read and what it could not use; reported, never raised."""

    files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (file, why)
    bytes: int = 0
    lines: int = 0
    events: int = 0
    skipped: int = 0  # lines the report did not use (unknown shapes, and known but unneeded)
    malformed: int = 0  # a known marker, but the line did not parse (truncated, junk)
    overlong: int = 0  # lines over MAX_LINE, dropped
    untimed: int = 0  # events with no time (no timestamped line before them in the file)
    crlf: int = 0
    bad_events: int = 0  # event-log lines that are not valid JSON objects of the schema
    read_errors: int = 0  # files whose reading stopped early (corrupt .gz, I/O error)
    matched: int = 0  # lines holding a marker the parser used
    # per log file: (first, last) time of its timestamped lines, and whether it is a Lighthouse's
    spans: dict[str, tuple[float | None, float | None, bool]] = field(default_factory=dict)
    # commit decisions per replica id (bytes, as logged), deduplicated across ranks
    commits: dict[bytes, _Commits] = field(default_factory=dict)
    active: dict[bytes, bytes] = field(default_factory=dict)  # replica -> its current id
    # per replica log: its restarts from a model checkpoint (report/restarts.py's rows)
    restarts: dict[str, list[dict]] = field(default_factory=dict)

    def cannot_open(self, path: Path, e: OSError) -> None:
        """A log that could not be opened: missing if it is not there, else unreadable with
        the reason (permission denied, ...): a user fixes the two differently."""
        if isinstance(e, FileNotFoundError):
            self.missing.append(str(path))
        else:
            why = e.strerror.lower() if e.strerror else (str(e) or type(e).__name__)
            self.unreadable.append((str(path), why))


def iter_lines(fh, stats: ParseStats) -> Iterator[bytes]:
    """The lines of a binary file (without their newline), read by `_iter_buffers`."""
    for buf, end in _iter_buffers(fh, stats):
        lines = bytes(buf[:end]).split(b"\n")
        if not lines[-1]:
            lines.pop()  # after the chunk's last newline
        yield from lines


class _Commits:
    """Per replica id: commit decisions deduplicated by step (every rank logs its own)."""

    __slots__ = ("attempted", "committed", "max_step", "recent", "mark")

    def __init__(self) -> None:
        self.attempted = 0
        self.committed = 0
        self.max_step = -1
        self.recent: dict[int, bool] = {}
        self.mark = -1  # the file's change counter when a commit was last emitted

    def add(self, step: int, ok: bool) -> bool:
        """Count one rank's decision for `step`; False if another rank's copy of one counted."""
        seen = self.recent.get(step)
        if seen is None:
            self.attempted += 1
            self.committed += ok
            self.recent[step] = ok
            if step > self.max_step:
                self.max_step = step
            self.recent.pop(step - 16, None)  # ranks interleave within a few steps
            if len(self.recent) > 64:  # steps that jumped (a heal): start again
                self.recent = {step: ok}
            return True
        if ok and not seen:
            self.committed += 1
            self.recent[step] = True
            return True
        return False

    def add_committed(self, steps: list[bytes]) -> None:
        """`add(step, True)` for each: the bulk path (between the rare lines, see _FileScan)."""
        recent = self.recent
        for s in steps:
            step = int(s)
            seen = recent.get(step)
            if seen is None:
                self.attempted += 1
                self.committed += 1
                recent[step] = True
                if step > self.max_step:
                    self.max_step = step
                recent.pop(step - 16, None)
                if len(recent) > 64:
                    self.recent = recent = {step: True}
            elif not seen:
                self.committed += 1
                recent[step] = True


# The markers the scanner looks for (C-speed `bytes.find`, `bytes.count` and regexes that start
# with a literal, over whole chunks); a line without one is never looked at by Python.
# Each marker costs a pass over the chunk, so there are few, and long ones: the Rust `healing is
# required` line is not needed (the Python side logs the same heal with the replica's uuid), and
# a Lighthouse log only needs its quorums and its start.
# A marker line that `parse_line` turns into no event is malformed if it is a banner (_LAUNCH_M),
# else simply a line the report does not use.
_QUORUM, _OTHER, _LAUNCH_M = range(3)
_STEP = b" - step "
_Q_NEEDLE = b"Quorum { quorum_id: "
# every manager line (MANAGER_LINE); the rare ones (heals, failed commits, reconfigurations,
# errors) are taken one by one, the runs of committed steps between them are counted in bulk
# (_FileScan.committed)
_NEEDLES = (
    (b"Manager listening on", _OTHER),
    (BANNER, _LAUNCH_M),
    (b"Training completed", _OTHER),
)
_LIGHTHOUSE_NEEDLES = ((b"Lighthouse listening on", _OTHER),)
_HEAD = 48  # bytes of a line that hold its timestamp
_BULK = True  # False: every marker line by line (the tests check both give the same result)
def _eol(buf: bytearray, p: int, end: int) -> int:
    e = buf.find(b"\n", p, end)
    return end if e < 0 else e


def _first_time(buf: bytearray, end: int, utc_offset: float) -> float | None:
    """Time of the first timestamped line among the first 64 of a chunk."""
    s = 0
    for _ in range(64):
        head = buf[s : min(s + _HEAD, end)]
        if has_time(head):
            t = parse_time(head, utc_offset)
            if t is not None:
                return t
        e = buf.find(b"\n", s, end)
        if e < 0:
            break
        s = e + 1
    return None


def _last_time_head(buf: bytearray, end: int) -> bytes:
    """The head of the last timestamped line before `end` (64 lines back at most)."""
    e = end
    for _ in range(64):
        if e <= 0:
            break
        s = buf.rfind(b"\n", 0, e - 1) + 1
        head = bytes(buf[s : min(s + _HEAD, end)])
        if has_time(head):
            return head
        e = s
    return b""


class _FileScan:
    """The state of one file's scan, and what it does with each kind of marker.

    A chunk is read in two passes. The quorum pass compares each `Quorum!` round's id with the
    previous one (all equal: one `findall` and one `count`, no Python per line) and parses only
    the changes. The second pass finds every manager line with one regex
    (`logvocab.MANAGER_LINE`) and takes the rare markers in file order (manager lines other than
    a well-formed committed step, quorum changes, process starts, launches, completions); the
    runs of committed steps between two of them are counted in bulk when the stretch holds as
    many `[<rid>/` of this file's replica id as the run has lines (else line by line, which
    gives the same result slower).
    """

    def __init__(
        self, stats: ParseStats, label: str, utc_offset: float, lighthouse: bool, quorums: bool
    ) -> None:
        self.stats, self.label, self.utc_offset = stats, label, utc_offset
        self.lighthouse = lighthouse
        self.quorums = quorums or lighthouse
        self.needles = _LIGHTHOUSE_NEEDLES if lighthouse else _NEEDLES
        self.commits = stats.commits
        self.prev_ts = b""  # head of the last timestamped line of the previous chunks
        self.last_qid = b""
        self.round_head = b""  # head of the previous quorum round's line ("last seen alive")
        self.have_round = False
        self.round_p = -1  # the previous round's position in the current chunk, if there
        self.seq = 0
        self.file_rid = b""  # replica id of this file's last commit line: who "completed" is
        self.matched = 0
        self.file_lines = 0
        self.first_t: float | None = None  # time of the file's first timestamped line
        self.changes = 0  # quorum changes / reconfigurations / heals: re-arm commit emission
        # a `tft-<job>_<i>.out` replica log's restarts from a checkpoint (restarts.py)
        name = None if lighthouse else parse_log_name(label)
        self.restarts = restarts.Tracker(name.replica) if name is not None else None
        self.buf = bytearray()
        self.end = 0

    # ---------------------------------------------------------------- time

    def time_at(self, ls: int) -> float | None:
        buf = self.buf
        head = buf[ls : min(ls + _HEAD, self.end)]
        if not has_time(head):
            head = _last_time_head(buf, ls) if ls else b""
            if not head:
                head = self.prev_ts
        return parse_time(head, self.utc_offset) if head else None

    def _line(self, p: int) -> tuple[int, int]:
        return self.buf.rfind(b"\n", 0, p) + 1, _eol(self.buf, p, self.end)

    def parse(self, ls: int, le: int) -> Event | None:
        """The line [ls, le) through `parse_line`, timed like every line of the file (its own
        time, else the previous timed line's, on the logs' clock)."""
        t = self.time_at(ls)
        ev = parse_line(self.buf[ls:le], t)
        if ev is not None:
            ev.time = t
            self._crlf(le)
        return ev

    # ---------------------------------------------------------------- a chunk

    def chunk(self, buf: bytearray, end: int) -> Iterator[Event]:
        if buf.find(b"\x1b", 0, end) >= 0:
            # escapes before a timestamp hide it: scan a cleaned copy (the caller keeps
            # shifting the chunk's tail in its own buffer)
            buf = bytearray(strip_ansi(bytes(memoryview(buf)[:end])))
            end = len(buf)
        self.buf, self.end = buf, end
        n = buf.count(b"\n", 0, end) + (0 if buf[end - 1 : end] == b"\n" else 1)
        self.file_lines += n
        if self.restarts is not None:
            self.restarts.chunk(buf, end)
        self.stats.lines += n
        others: list[tuple[int, int, Event | None]] = []
        if self.quorums:
            others += self._quorum_changes()
        find = buf.find
        for needle, code in self.needles:
            p = find(needle, 0, end)
            while p >= 0:
                others.append((p, code, None))
                p = find(needle, p + len(needle), end)
        others.sort(key=_pos)
        if self.lighthouse:
            for hit in others:
                ev = self.other(hit)
                if ev is not None:
                    yield self.emit(ev)
        else:
            yield from self._manager_lines(others)
        if self.first_t is None:
            self.first_t = _first_time(buf, end, self.utc_offset)
        head = _last_time_head(buf, end)
        if head:
            self.prev_ts = head
        if self.round_p >= 0:
            rs = buf.rfind(b"\n", 0, self.round_p) + 1
            self.round_head = bytes(buf[rs : rs + _HEAD])
            self.round_p = -1

    def _manager_lines(self, others: list[tuple[int, int, Event | None]]) -> Iterator[Event]:
        """Every ` - step ` marker of the chunk from one regex pass, in file order with the
        other markers: the rare ones one by one, runs of committed steps in bulk."""
        end = self.end
        run: list[tuple[int, bytes]] = []  # committed steps since the last other marker
        a = 0  # where the run's stretch of the chunk begins
        oi, n_others = 0, len(others)
        nxt = others[0][0] if others else end
        for hit in [(m.start(), m.group(1)) for m in MANAGER_LINE.finditer(self.buf, 0, end)]:
            p = hit[0]
            while p > nxt:  # another marker first
                if run:
                    yield from self.committed(run, a, nxt)
                    run = []
                ev = self.other(others[oi])
                if ev is not None:
                    yield self.emit(ev)
                a, oi = nxt + 1, oi + 1
                nxt = others[oi][0] if oi < n_others else end
            if hit[1] is not None:
                run.append(hit)
                continue
            if run:
                yield from self.committed(run, a, p)
                run = []
            ev = self.manager(p)
            if ev is not None:
                yield self.emit(ev)
            a = p + len(_STEP)
        if run:
            yield from self.committed(run, a, nxt)
        for hit in others[oi:]:
            ev = self.other(hit)
            if ev is not None:
                yield self.emit(ev)

    def emit(self, ev: Event) -> Event:
        if ev.time is None:
            self.stats.untimed += 1
        ev.source, ev.seq = self.label, self.seq
        self.seq += 1
        return ev

    # ---------------------------------------------------------------- quorums

    def _quorum_changes(self) -> list[tuple[int, int, Event | None]]:
        """The quorum lines whose id differs from the previous round's, parsed."""
        buf, end = self.buf, self.end
        count = buf.count(_Q_NEEDLE, 0, end)
        if not count:
            return []
        self.matched += count
        ids = QUORUM_IDS.findall(buf, 0, end)
        exact = len(ids) == count  # else a line without its comma: look at each one
        if _BULK and exact and ids.count(self.last_qid) == count:  # the same quorum again
            self.round_p = buf.rfind(_Q_NEEDLE, 0, end)
            self.have_round = True
            return []
        out: list[tuple[int, int, Event | None]] = []
        if exact:
            hits = ((m.start(), m.group(1)) for m in QUORUM_IDS.finditer(buf, 0, end))
        else:
            hits = self._quorum_hits()
        for p, qid in hits:
            if qid == self.last_qid:
                self.round_p = p
                self.have_round = True
                continue
            ev = self._parse_quorum(p)
            if ev is not None:
                out.append((p, _QUORUM, ev))
                self.round_p = p
                self.have_round = True
                self.last_qid = qid
        return out

    def _quorum_hits(self) -> Iterator[tuple[int, bytes]]:
        """(position, quorum id) of each quorum line, also those cut before their comma."""
        buf, end = self.buf, self.end
        p = buf.find(_Q_NEEDLE, 0, end)
        while p >= 0:
            j = p + len(_Q_NEEDLE)
            k = buf.find(b",", j, j + 24)
            yield p, bytes(buf[j:k]) if k > 0 else b"?"
            p = buf.find(_Q_NEEDLE, j, end)

    def _parse_quorum(self, p: int) -> Event | None:
        buf = self.buf
        ev = self.parse(*self._line(p))
        if ev is None:
            self.stats.malformed += 1
            return None
        if self.have_round:
            if self.round_p >= 0:
                rs = buf.rfind(b"\n", 0, self.round_p) + 1
                head = buf[rs : rs + _HEAD]
            else:
                head = self.round_head
            ev.prev_round_time = parse_time(head, self.utc_offset)
        return ev

    def _crlf(self, le: int) -> None:
        if self.buf[le - 1 : le] == b"\r":
            self.stats.crlf += 1

    # ---------------------------------------------------------------- manager lines

    def committed(self, run: list[tuple[int, bytes]], a: int, b: int) -> Iterator[Event]:
        """A run of well-formed `should_commit=True` lines in [a, b), no other marker between.

        Counted in bulk when they are all this file's replica id's (as many `[<rid>/` in the
        stretch as lines) and none is the first after a change (that one is emitted, so it goes
        the line-by-line way first); else line by line, with the same result.
        """
        i = 0
        c = self.commits.get(self.file_rid) if self.file_rid else None
        if c is None or c.mark != self.changes:
            ev = self.manager(run[0][0])
            if ev is not None:
                yield self.emit(ev)
            i, a = 1, run[0][0] + len(_STEP)
            c = self.commits.get(self.file_rid) if self.file_rid else None
        if _BULK and i < len(run) and c is not None and c.mark == self.changes:
            buf = self.buf
            lb = buf.rfind(b"\n", a, b) + 1 if b < self.end else b  # before the next marker's line
            if buf.count(b"[" + self.file_rid + b"/", a, lb or a) == len(run) - i:
                c.add_committed([step for _, step in run[i:]])
                self.matched += len(run) - i
                return
        for p, _ in run[i:]:
            ev = self.manager(p)
            if ev is not None:
                yield self.emit(ev)

    def manager(self, p: int) -> Event | None:
        """One ` - step ` marker: a commit decision (counted; emitted when the timeline needs
        it: failed ones, a replica id's first, the first after a change) or another manager
        line (parsed; heals and reconfigurations are changes)."""
        buf, stats = self.buf, self.stats
        self.matched += 1
        if LONG_NUMBER.match(buf, p + len(_STEP)):  # no shape takes it (logvocab.MAX_DIGITS)
            stats.malformed += 1
            return None
        q = buf.find(b"] ", p + 8, p + 40)
        if q > 0 and buf.startswith(b"should_commit=", q + 2):
            try:
                step = int(buf[p + 8 : q])
            except ValueError:
                stats.malformed += 1
                return None
            lo = max(0, p - 512)  # the replica id is in this line, near the marker
            lb = buf.rfind(b"[", buf.rfind(b"\n", lo, p) + 1 or lo, p) + 1
            sl = buf.rfind(b"/", lb, p)
            if lb == 0 or sl < 0:
                stats.malformed += 1
                return None
            rid = self.file_rid = bytes(buf[lb:sl])
            ok = buf.startswith(b"True", q + 16)
            c = self.commits.get(rid)
            if c is None:
                c = self.commits[rid] = _Commits()
                # a new uuid for this replica: the old attempt's window is done
                gk = rid.partition(b":")[0]
                old = stats.active.get(gk)
                if old is not None:
                    self.commits[old].recent = {}
                stats.active[gk] = rid
            if not c.add(step, ok):
                return None  # another rank's copy
            if ok and c.mark == self.changes:
                return None
            c.mark = self.changes
            return self.parse(*self._line(p))
        ev = self.parse(*self._line(p))
        if ev is None:
            self.matched -= 1
            return None
        if ev.kind is not ERROR:
            self.changes += 1
        return ev

    # ---------------------------------------------------------------- the rest

    def other(self, hit: tuple[int, int, Event | None]) -> Event | None:
        """A quorum change (parsed already: a change), a process start, launch or end."""
        p, code, ev = hit
        if code == _QUORUM:
            self.changes += 1
            return ev
        self.matched += 1
        ev = self.parse(*self._line(p))
        if ev is None:
            if code == _LAUNCH_M:
                self.stats.malformed += 1
            else:
                self.matched -= 1
        elif ev.kind is FINISHED:  # whose: the replica of this file's commit lines
            ev.replica = self.file_rid.decode("utf-8", "replace") if self.file_rid else None
        return ev


def _pos(hit: tuple[int, int, Event | None]) -> int:
    return hit[0]


def iter_file_events(
    path: Path,
    stats: ParseStats,
    *,
    utc_offset: float = 0.0,
    label: str | None = None,
    lighthouse: bool = False,
    quorums: bool = True,
) -> Iterator[Event]:
    """Events of one log file in file order; lines without a time take the previous one's.

    Tolerant by construction: unknown lines are counted and skipped, a line that looks like an
    event but does not parse is counted as malformed, nothing raises on content.

    Commit decisions (one per rank per step) are counted into `stats.commits`; only those the
    timeline needs are emitted: failed ones, a replica id's first, the first after each quorum
    change / reconfiguration / heal seen in this file. `lighthouse=True`: only quorums and the
    Lighthouse's start are looked for; `quorums=False`: the manager's copies of the quorums
    are not (the Lighthouse log has them). How it stays fast: see `_FileScan`.
    """
    try:
        fh = open_log(path)
    except OSError as e:
        stats.cannot_open(path, e)
        return
    stats.files.append(str(path))
    scan = _FileScan(stats, label or path.name, utc_offset, lighthouse, quorums)
    with fh:
        for buf, end in _iter_buffers(fh, stats):
            yield from scan.chunk(buf, end)
    _account(scan, path, stats)


def _account(scan: _FileScan, path: Path, stats: ParseStats) -> None:
    """What a file's scan adds to the run's stats once it is read: its time span, its
    restarts from a checkpoint, the lines used and skipped."""
    last = parse_time(scan.prev_ts, scan.utc_offset) if scan.prev_ts else None
    stats.spans[str(path)] = (scan.first_t, last, scan.lighthouse)
    if scan.restarts is not None and scan.restarts.rows:
        stats.restarts[str(path)] = list(scan.restarts.rows)
    stats.skipped += max(0, scan.file_lines - scan.matched)
    stats.matched += scan.matched


@dataclass
class GrowingLog:
    """One log file read as it grows (`ftslurm metrics`' live report, live.py): the scan's
    state is kept between reads, so each read parses only the whole lines appended since the
    last one, and `events` holds every event so far, in file order. The file's last line
    waits for its newline (the next read takes it). `stats` is the live report's: its
    counters add up over the reads, and commit decisions are deduplicated across its files as
    in one read of them all.

    `read()` is False when the file is no longer the one read (another inode, or shorter:
    rotated, truncated, replaced): the caller starts again from the start of every file."""

    path: Path
    stats: ParseStats
    utc_offset: float = 0.0
    lighthouse: bool = False
    quorums: bool = True
    events: list[Event] = field(default_factory=list)
    offset: int = 0  # bytes parsed: whole lines (a .gz: its whole size, read once)
    error: OSError | None = None  # the last read's: the file is then missing or unreadable
    _ident: tuple[int, int] | None = None  # (device, inode) of the file read
    _scan: _FileScan | None = None

    def read(self) -> bool:
        try:
            st = self.path.stat()
        except OSError as e:
            self.error = e
            return self._ident is None  # a file that was read and is gone: start again
        ident = (st.st_dev, st.st_ino)
        if self._ident is not None and (ident != self._ident or st.st_size < self.offset):
            return False
        if self._scan is None:
            self._scan = _FileScan(self.stats, self.path.name, self.utc_offset, self.lighthouse,
                                   self.quorums)  # fmt: skip
        self._ident, self.error = ident, None
        try:
            if is_archive(self.path):  # an archive does not grow: read whole, once
                if self.offset == 0:
                    with open_log(self.path) as fh:
                        self._parse(fh)
                    self.offset = st.st_size
                return st.st_size == self.offset
            with open(self.path, "rb") as raw:
                end = _after_last_newline(raw, self.offset, st.st_size)
                if end > self.offset:
                    raw.seek(self.offset)
                    self._parse(_Upto(raw, end - self.offset))
                    self.offset = end
        except OSError as e:
            self.error = e
        return True

    def _parse(self, fh) -> None:
        scan = self._scan
        assert scan is not None
        for buf, end in _iter_buffers(fh, self.stats):
            self.events.extend(scan.chunk(buf, end))

    def account(self, stats: ParseStats) -> bool:
        """Add this file to a build's `stats` as one read of it would; False when it could
        not be read (counted as missing or unreadable)."""
        if self.error is not None or self._scan is None:
            stats.cannot_open(self.path, self.error or FileNotFoundError(self.path))
            return False
        stats.files.append(str(self.path))
        _account(self._scan, self.path, stats)
        return True


class _Upto:
    """A binary file read only up to `limit` more bytes (whole lines: see GrowingLog)."""

    def __init__(self, fh, limit: int) -> None:
        self.fh, self.left = fh, limit

    def readinto(self, b) -> int:
        if self.left <= 0:
            return 0
        with memoryview(b) as mv, mv[: min(len(mv), self.left)] as dst:
            n = self.fh.readinto(dst) or 0
        self.left -= n
        return n


def _after_last_newline(fh, start: int, size: int, block: int = 1 << 16) -> int:
    """The position just after the last newline in the file's [start, size), else start."""
    hi = size
    while hi > start:
        lo = max(start, hi - block)
        fh.seek(lo)
        at = fh.read(hi - lo).rfind(b"\n")
        if at >= 0:
            return lo + at + 1
        hi = lo
    return start


def _iter_buffers(fh, stats: ParseStats) -> Iterator[tuple[bytearray, int]]:
    """(buf, end): `buf[:end]` is whole lines (the file's last may lack its newline).

    The same bytearray is refilled each time (`readinto1`): a fresh 1 MiB bytes object per
    chunk costs page faults, and those make reading cost as much as parsing. Callers copy what
    they keep. Memory is bounded by CHUNK + MAX_LINE: a longer line (binary junk without
    newlines) is dropped and counted. A corrupt .gz or an I/O error ends the file early,
    counted in stats.read_errors, after what could be read.
    """
    buf = bytearray(2 * CHUNK)
    read = getattr(fh, "readinto1", None) or fh.readinto
    rest = 0  # the unfinished last line of the previous chunk, moved to the front
    dropping = False
    while True:
        want = rest + CHUNK
        if len(buf) < want:
            buf.extend(bytes(want - len(buf)))
        filled, eof = rest, False
        while filled < want:
            try:
                with memoryview(buf) as mv, mv[filled:want] as dst:
                    n = read(dst)
            except (OSError, EOFError, zlib.error):
                stats.read_errors += 1
                n = 0
            if not n:
                eof = True
                break
            filled += n
        stats.bytes += filled - rest
        cut = filled if eof else buf.rfind(b"\n", 0, filled) + 1
        if cut == 0 and not eof:
            if dropping:  # more of the overlong line: not kept, counted once already
                rest = 0
                continue
            rest = filled
            if rest > MAX_LINE:
                stats.overlong += 1
                rest = 0
                dropping = True
            continue
        if dropping:  # the tail of an overlong line
            start = buf.find(b"\n", 0, cut) + 1
            if start == 0:
                return
            buf[: filled - start] = buf[start:filled]
            filled, cut, dropping = filled - start, cut - start, False
        if eof:
            del buf[filled:]
            if filled:
                yield buf, filled
            return
        yield buf, cut
        buf[: filled - cut] = buf[cut:filled]
        rest = filled - cut
