"""Streaming reader: a log file -> its events, in one pass, memory flat in file size.

Why this shape: a 500 MB log must parse at >= 200 MB/s in pure Python. A Python loop over
every line costs ~1 us a line before it does anything, so instead each 1 MiB chunk is searched
for a few markers with `bytes.find` (C speed, GB/s) and only the lines holding one are sliced
out and parsed (`lines.py`). `Quorum!` is printed on EVERY quorum round (one very long line):
only its `quorum_id` is compared with the previous round's, the participants are parsed when it
changes. Commit decisions (one per rank per step) are counted here, not turned into events.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm.report.lines import (
    ERROR,
    FINISHED,
    LIGHTHOUSE_START,
    Event,
    parse_launch,
    parse_manager,
    parse_quorum,
    parse_rust_replica,
    parse_time,
)

MAX_LINE = 8 << 20  # longer "lines" (binary junk without newlines) are dropped, not buffered
CHUNK = 1 << 20


@dataclass
class ParseStats:
    """What the parser read and what it could not use; reported, never raised."""

    files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
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


def _raw_chunks(fh, stats: ParseStats) -> Iterator[bytes]:
    """~CHUNK-byte reads; a corrupt or truncated .gz (or an I/O error) ends the file early,
    counted in stats.read_errors, after yielding what could be read (read1 keeps it)."""
    read = getattr(fh, "read1", fh.read)
    pieces: list[bytes] = []
    size = 0
    while True:
        try:
            b = read(CHUNK - size)
        except (OSError, EOFError, zlib.error):
            stats.read_errors += 1
            b = b""
            if pieces:
                yield b"".join(pieces)
            return
        if not b:
            break
        pieces.append(b)
        size += len(b)
        if size >= CHUNK:
            yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces, size = [], 0
    if pieces:
        yield b"".join(pieces)


def _iter_chunks(fh, stats: ParseStats) -> Iterator[list[bytes]]:
    """Lists of lines of a binary file read in big chunks; memory bounded by CHUNK + MAX_LINE.

    A line longer than MAX_LINE (binary junk without newlines) is dropped and counted.
    """
    rest = b""
    dropping = False
    for chunk in _raw_chunks(fh, stats):
        stats.bytes += len(chunk)
        parts = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = parts.pop()
        if dropping and parts:
            parts[0] = b""  # the tail of an overlong line
            dropping = False
        if parts:
            yield parts
        if len(rest) > MAX_LINE:
            stats.overlong += 1
            rest = b""
            dropping = True
    if rest and not dropping:
        yield [rest]


def iter_lines(fh, stats: ParseStats) -> Iterator[bytes]:
    for parts in _iter_chunks(fh, stats):
        yield from parts


def _has_time(line: bytes) -> bool:
    c = line[:1]
    return (c == b"2" and line[4:5] == b"-") or (
        c == b"[" and (line[5:6] == b"-" or line[:8] == b"[titan] ")
    )


class _Commits:
    """Per replica id: commit decisions deduplicated by step (every rank logs its own)."""

    __slots__ = ("attempted", "committed", "max_step", "recent", "mark")

    def __init__(self) -> None:
        self.attempted = 0
        self.committed = 0
        self.max_step = -1
        self.recent: dict[int, bool] = {}
        self.mark = -1  # the file's change counter when a commit was last emitted


# The markers the scanner looks for in whole chunks (C-speed `bytes.find`); a line without one
# of them is skipped without Python ever looking at it.
# Each needle costs a pass over the chunk, so there are few, and long ones (bytes.find skips
# faster): the Rust `healing is required` line is not needed (the Python side logs the same heal
# with the replica's uuid), and a Lighthouse log only needs its quorums and its start. The
# `quorum_id: ` offsets below are relative to the needle's start.
_PY_MGR, _QUORUM, _LISTEN, _LAUNCH_M, _DONE = range(5)
_Q_NEEDLE = b"Quorum { quorum_id: "
_NEEDLES = (
    (b" - step ", _PY_MGR),
    (_Q_NEEDLE, _QUORUM),
    (b"Manager listening on", _LISTEN),
    (b"launching replica ", _LAUNCH_M),
    (b"Training completed", _DONE),
)
# replica logs when a Lighthouse log is read too: its quorums are the same, and the replica's
# own `reconfiguring for quorum_id=N` lines re-arm commit emission
_NEEDLES_NO_QUORUM = tuple(n for n in _NEEDLES if n[1] != _QUORUM)
_LIGHTHOUSE_NEEDLES = ((_Q_NEEDLE, _QUORUM), (b"Lighthouse listening on", _LISTEN))
_HEAD = 48  # bytes of a line that hold its timestamp


def _scan(buf: bytes, needles=_NEEDLES) -> list[tuple[int, int]]:
    """(marker position, marker code) of every marker in the chunk, in file order.

    Each marker occurs at most once in a real line, so no per-line dedupe is needed (and a
    line hit twice is harmless: quorums and commits are deduplicated by id and step).
    """
    hits: list[tuple[int, int]] = []
    add, find = hits.append, buf.find
    for needle, code in needles:
        n = len(needle)
        p = find(needle)
        while p >= 0:
            add((p, code))
            p = find(needle, p + n)
    hits.sort()
    return hits


def _eol(buf: bytes, p: int) -> int:
    e = buf.find(b"\n", p)
    return len(buf) if e < 0 else e


def _first_time(buf: bytes, utc_offset: float) -> float | None:
    """Time of the first timestamped line among the first 64 of a chunk."""
    s = 0
    for _ in range(64):
        head = buf[s : s + _HEAD]
        if _has_time(head):
            t = parse_time(head, utc_offset)
            if t is not None:
                return t
        e = buf.find(b"\n", s)
        if e < 0:
            break
        s = e + 1
    return None


def _last_time_head(buf: bytes, end: int) -> bytes:
    """The head of the last timestamped line before `end` (64 lines back at most)."""
    e = end
    for _ in range(64):
        if e <= 0:
            break
        s = buf.rfind(b"\n", 0, e - 1) + 1
        head = buf[s : s + _HEAD]
        if _has_time(head):
            return head
        e = s
    return b""


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

    Hot path: each 1 MiB chunk is searched for a few markers with `bytes.find` (C speed); only
    the lines holding one are sliced out and parsed, and a timestamp is parsed only for an
    emitted event (searching back for the nearest timestamped line). Commit decisions (one per
    rank per step) are counted here, into `stats.commits`; only those the timeline needs are
    emitted: failed ones, a replica id's first, the first after each quorum change /
    reconfiguration / heal seen in this file. `lighthouse=True`: only quorums and the
    Lighthouse's start are looked for; `quorums=False`: the manager's copies of the quorums
    are not (the Lighthouse log has them).
    """
    if lighthouse:
        needles = _LIGHTHOUSE_NEEDLES
    else:
        needles = _NEEDLES if quorums else _NEEDLES_NO_QUORUM
    label = label or path.name
    try:
        fh = open_log(path)
    except OSError:
        stats.missing.append(str(path))
        return
    stats.files.append(str(path))
    prev_ts = b""  # head of the last timestamped line of the previous chunks
    last_qid = b""
    round_buf, round_p = b"", 0  # the previous quorum round: its time is "last seen alive"
    seq = 0
    file_rid = b""  # the replica id of this file's last commit line: who "Training completed" is
    first_t: float | None = None
    matched = file_lines = 0
    changes = 0  # quorum changes / reconfigurations / heals emitted: re-arm commit emission
    commits = stats.commits
    with fh:
        for buf in _iter_buffers(fh, stats):
            n = buf.count(b"\n") + (0 if buf.endswith(b"\n") else 1)
            file_lines += n
            stats.lines += n

            def time_at(ls: int, buf: bytes = buf, prev_ts: bytes = prev_ts) -> float | None:
                head = buf[ls : ls + _HEAD]
                if not _has_time(head):
                    head = _last_time_head(buf, ls) if ls else b""
                    if not head:
                        head = prev_ts
                return parse_time(head, utc_offset) if head else None

            rfind, find = buf.rfind, buf.find
            for p, code in _scan(buf, needles):
                matched += 1
                ev: Event | None
                if code == _PY_MGR:
                    # `[<replica_id>/<rank> - step N] should_commit=True|False ...`, by position
                    q = find(b"] ", p + 8, p + 40)
                    if q > 0 and buf.startswith(b"should_commit=", q + 2):
                        try:
                            step = int(buf[p + 8 : q])
                        except ValueError:
                            stats.malformed += 1
                            continue
                        lb = rfind(b"[", max(0, p - 512), p) + 1
                        sl = rfind(b"/", lb, p)
                        if lb == 0 or sl < 0:
                            stats.malformed += 1
                            continue
                        rid = file_rid = buf[lb:sl]
                        ok = buf.startswith(b"True", q + 16)
                        c = commits.get(rid)
                        if c is None:
                            c = commits[rid] = _Commits()
                            # a new uuid for this replica: the old attempt's window is done
                            gk = rid.partition(b":")[0]
                            old = stats.active.get(gk)
                            if old is not None:
                                commits[old].recent = {}
                            stats.active[gk] = rid
                        seen = c.recent.get(step)
                        if seen is None:
                            c.attempted += 1
                            c.committed += ok
                            c.recent[step] = ok
                            if step > c.max_step:
                                c.max_step = step
                            c.recent.pop(step - 16, None)  # ranks interleave within a few steps
                            if len(c.recent) > 64:  # steps that jumped (a heal): start again
                                c.recent = {step: ok}
                        elif ok and not seen:
                            c.committed += 1
                            c.recent[step] = True
                        else:
                            continue  # another rank's copy
                        if ok and c.mark == changes:
                            continue
                        c.mark = changes
                        ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                        ev = parse_manager(buf[ls:le], time_at(ls))
                    else:
                        ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                        ev = parse_manager(buf[ls:le], None)
                        if ev is None:
                            matched -= 1
                            continue
                        ev.time = time_at(ls)
                        if ev.kind is not ERROR:
                            changes += 1
                    if ev is None:
                        continue
                elif code == _QUORUM:
                    j = p + 20  # len(_Q_NEEDLE)
                    k = find(b",", j, j + 24)
                    qid = buf[j:k] if k > 0 else b"?"
                    if qid == last_qid:
                        round_buf, round_p = buf, p  # sliced only if the next is a change
                        continue
                    ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                    line = buf[ls:le]
                    ev = parse_quorum(line, time_at(ls))
                    if ev is None:
                        stats.malformed += 1
                        continue
                    if round_buf:
                        rs = round_buf.rfind(b"\n", 0, round_p) + 1
                        ev.prev_round_time = parse_time(round_buf[rs : rs + _HEAD], utc_offset)
                    round_buf, round_p = buf, p
                    last_qid = qid
                    changes += 1
                elif code == _LISTEN:
                    ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                    line = buf[ls:le]
                    if b"Lighthouse listening on" in line:
                        ev = Event(LIGHTHOUSE_START, time_at(ls))
                    else:
                        ev = parse_rust_replica(line, None)
                        if ev is None:
                            matched -= 1
                            continue
                        ev.time = time_at(ls)
                elif code == _DONE:
                    ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                    rid_s = file_rid.decode("utf-8", "replace") if file_rid else None
                    ev = Event(FINISHED, time_at(ls), replica=rid_s)
                elif code == _LAUNCH_M:
                    ls, le = rfind(b"\n", 0, p) + 1, _eol(buf, p)
                    ev = parse_launch(buf[ls:le], None)
                    if ev is None:
                        stats.malformed += 1
                        continue
                    ev.time = time_at(ls)
                else:
                    continue
                if ev.time is None:
                    stats.untimed += 1
                if buf[le - 1 : le] == b"\r":
                    stats.crlf += 1
                ev.source, ev.seq = label, seq
                seq += 1
                yield ev
            if first_t is None:
                first_t = _first_time(buf, utc_offset)
            head = _last_time_head(buf, len(buf))
            if head:
                prev_ts = head
    stats.spans[str(path)] = (
        first_t, parse_time(prev_ts, utc_offset) if prev_ts else None, lighthouse
    )
    stats.skipped += max(0, file_lines - matched)
    stats.matched += matched


def _iter_buffers(fh, stats: ParseStats) -> Iterator[bytes]:
    """Chunks of whole lines (the last one may lack its newline); memory bounded.

    A line longer than MAX_LINE (binary junk without newlines) is dropped and counted.
    """
    rest = b""
    dropping = False
    for chunk in _raw_chunks(fh, stats):
        stats.bytes += len(chunk)
        buf = rest + chunk if rest else chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            rest = buf
            if len(rest) > MAX_LINE:
                stats.overlong += 1
                rest = b""
                dropping = True
            continue
        out, rest = buf[:cut], buf[cut:]
        if dropping:
            out = out[out.find(b"\n") + 1 :]  # the tail of an overlong line
            dropping = False
        if out:
            yield out
    if rest and not dropping:
        yield rest


def open_log(path: Path):
    """A log opened for binary reading; `.gz` files (archived logs, fixtures) decompressed."""
    if path.suffix == ".gz":
        import gzip

        fh = gzip.open(path, "rb")
        fh.peek(1)  # raise OSError now if it is not gzip
        return fh
    return open(path, "rb")  # noqa: SIM115
