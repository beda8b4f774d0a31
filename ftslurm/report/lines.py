"""One log line -> one event (or None), and a streaming per-file reader.

Every shape recognised here is copied from real logs (shared/notes/torchft-logs.md, the cluster
guide's excerpt, shared/data/torchft-ddp-cpu-run1); nothing is guessed. Three formats interleave
in a replica log and a fourth is the Lighthouse's:

- Rust env_logger (Lighthouse and the Rust half of the Manager):
  `2026-11-23T08:50:55.316 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 1, ...`
- torchtitan's Python logging: `[titan] 2025-07-16 13:49:32,462 - torchft.manager - INFO - ...`
- bare Python logging (torchft's own examples): `INFO:torchft.manager:[train_ddp_0:<uuid>/0 -
  step 22] ...` with NO timestamp: such a line takes the time of the nearest previous line of
  the same file that had one (or stays unknown).
- the launcher's attempt line: `[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on w-0`.

Why bytes: a 500 MB log must parse at >= 200 MB/s in pure Python, so the reader splits big
binary chunks, tests each line with a few C-speed substring checks, and decodes / regex-parses
only the few lines that carry an event. `Quorum!` is printed on EVERY quorum round (one very
long line), so the reader only looks at its `quorum_id` and parses the participants when the id
differs from the previous round's.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

# Event kinds (Event.kind).
QUORUM = "quorum"  # a quorum (Lighthouse `Quorum!` or the manager's `got lighthouse quorum`)
LIGHTHOUSE_START = "lighthouse_start"  # `Lighthouse listening on: ...`
COMMIT = "commit"  # `should_commit=True|False` (Python manager, per rank)
ERROR = "error"  # `got exception ...`, `should_commit failed N times ...`
PEERS_RECOVER = "peers_recover"  # sender: `peers need recovery from us [1]` (quorum ranks)
HEAL_REQUIRED = "heal_required"  # receiver: healing required ... max_step=N
HEAL_FETCH = "heal_fetch"  # receiver: `fetching checkpoint from recover_src_replica_rank=0`
HEALED = "healed"  # receiver: `Loaded state dict.` at step N
RECONFIGURE = "reconfigure"  # `reconfiguring for quorum_id=N`
MANAGER_START = "manager_start"  # Rust `[Replica X] Manager listening on ...`: a new process
LAUNCH = "launch"  # launcher: `launching replica 1 (attempt 1) on worker-0`
TITAN_STEP = "titan_step"  # torchtitan `step: N  loss: L` (ANSI colours stripped)
INJECTED = "injected"  # one line of the simulate-failure event log (see events.py)

MAX_LINE = 8 << 20  # longer "lines" (binary junk without newlines) are dropped, not buffered
CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Member:
    """One QuorumMember: full replica id, its step, its commit_failures counter."""

    replica_id: str
    step: int
    commit_failures: int = 0


@dataclass(slots=True)
class Event:
    """Something that happened, as one log line says it.

    `time` is seconds since 1970 reading the log's wall clock as if it were UTC (the logs carry
    local time without a zone; see `timeline.clock_offset` for zone-aware inputs), or None when
    no line of the file had a time yet. `replica` is the id as logged: `prefix_<i>:<uuid>` from
    Python lines and quorums, `prefix_<i>` from the Rust manager.
    """

    kind: str
    time: float | None
    replica: str | None = None
    step: int | None = None
    rank: int | None = None
    quorum_id: int | None = None
    members: tuple[Member, ...] = ()
    ranks: tuple[int, ...] = ()
    ok: bool | None = None
    detail: str = ""
    source: str = ""
    seq: int = 0
    prev_round_time: float | None = None  # QUORUM: time of the previous round (last seen alive)
    node: str = ""  # LAUNCH / INJECTED: the node
    job: str = ""  # INJECTED: the Slurm job id


@dataclass
class ParseStats:
    """What the parser read and what it could not use; reported, never raised."""

    files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    bytes: int = 0
    lines: int = 0
    events: int = 0
    skipped: int = 0  # lines of no known shape
    malformed: int = 0  # a known marker, but the line did not parse (truncated, junk)
    overlong: int = 0  # lines over MAX_LINE, dropped
    undecodable: int = 0  # event lines with invalid UTF-8 (decoded with replacement)
    untimed: int = 0  # events with no time (no timestamped line before them in the file)
    crlf: int = 0
    bad_events: int = 0  # event-log lines that are not valid JSON objects of the schema
    read_errors: int = 0  # files whose reading stopped early (corrupt .gz, I/O error)
    matched: int = 0  # lines holding a marker the parser used
    # per log file: (first, last) time of its timestamped lines, and whether it is a Lighthouse's
    spans: dict[str, tuple[float | None, float | None, bool]] = field(default_factory=dict)
    # commit decisions per replica id (bytes, as logged), deduplicated across ranks
    commits: dict[bytes, _Commits] = field(default_factory=dict)

    def merge(self, other: ParseStats) -> None:
        for name in (
            "bytes", "lines", "events", "skipped", "malformed", "overlong", "undecodable",
            "untimed", "crlf", "bad_events", "matched", "read_errors",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.files += other.files
        self.missing += other.missing
        for k, c in other.commits.items():
            mine = self.commits.setdefault(k, _Commits())
            mine.attempted += c.attempted
            mine.committed += c.committed
            mine.max_step = max(mine.max_step, c.max_step)


# ---------------------------------------------------------------- replica ids

_RID = re.compile(r"^(.*)_(\d+)(?::(.*))?$")


def split_replica_id(rid: str) -> tuple[str, int | None, str | None]:
    """`torchtitan_ft_1:5ea8...` -> ('torchtitan_ft', 1, '5ea8...'); any `<prefix>_<i>`."""
    m = _RID.match(rid)
    if not m:
        return rid, None, None
    return m.group(1), int(m.group(2)), m.group(3)


# ---------------------------------------------------------------- time

_TS = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_day_cache: dict[bytes, int] = {}


def _day_seconds(y: bytes, mo: bytes, d: bytes) -> int:
    key = y + mo + d
    v = _day_cache.get(key)
    if v is None:
        v = (date(int(y), int(mo), int(d)).toordinal() - _EPOCH_ORD) * 86400
        if len(_day_cache) < 4096:
            _day_cache[key] = v
    return v


def parse_time(line: bytes, utc_offset: float = 0.0) -> float | None:
    """Time at the start of a line (Rust, titan or launcher shape), else None.

    A zone-aware time (`Z`, `+02:00`) is moved onto the logs' local clock with `utc_offset`
    (seconds local minus UTC); naive times are kept as they are.
    """
    if line[:8] == b"[titan] ":
        pos = 8
    elif line[:1] == b"[":
        pos = 1
    else:
        pos = 0
    m = _TS.match(line, pos)
    if not m:
        return None
    y, mo, d, h, mi, s, frac, zone = m.groups()
    try:
        t = _day_seconds(y, mo, d) + int(h) * 3600 + int(mi) * 60 + int(s)
    except ValueError:
        return None
    if frac:
        t += int(frac) / 10 ** len(frac)
    if zone:
        if zone != b"Z":
            sign = -1 if zone[:1] == b"-" else 1
            hh, mm = int(zone[1:3]), int(zone[-2:])
            t -= sign * (hh * 3600 + mm * 60)
        t += utc_offset
    return t


# ---------------------------------------------------------------- one line

_QID = re.compile(rb"quorum_id: (\d+)")
_MEMBER = re.compile(
    rb'replica_id: "([^"]*)".*?[ ,{]step: (\d+)(?:.*?commit_failures: (\d+))?'
)
_MGR = re.compile(rb"\[([^\s\[\]/]+)/(\d+) - step (-?\d+)\] ([^\r\n]*)")
_RUST_REPLICA = re.compile(rb"\[Replica ([^\]\s]+)\] ([^\r\n]*)")
_LAUNCH = re.compile(rb"launching replica (\d+) \(attempt (\d+)\)(?: on (\S+))?")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")
_STEP = re.compile(rb"step:\s*(\d+)\s+loss:\s*([-+0-9.eEnaifNI]+)")
_INTS = re.compile(rb"-?\d+")
_KV_INT = {
    k: re.compile(rb"(?<![a-z_])" + k.encode() + rb"=(-?\d+)")
    for k in ("max_step", "recover_src_replica_rank", "step", "quorum_id")
}


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _kv(name: str, msg: bytes) -> int | None:
    m = _KV_INT[name].search(msg)
    return int(m.group(1)) if m else None


def parse_quorum(line: bytes, t: float | None) -> Event | None:
    """A `Quorum { quorum_id: N, participants: [...] }` line (Lighthouse or manager side).

    None when truncated: a quorum with a partial participant list would be a lie.
    """
    m = _QID.search(line)
    if not m:
        return None
    body = line[m.end():]
    end = body.find(b"created:")
    if end < 0 or body.rfind(b"]", 0, end) < 0:
        return None
    members = tuple(
        Member(_dec(rid), int(step), int(cf) if cf else 0)
        for rid, step, cf in _MEMBER.findall(body, 0, end)
    )
    return Event(QUORUM, t, quorum_id=int(m.group(1)), members=members)


def parse_manager(line: bytes, t: float | None) -> Event | None:
    """Python manager line `[<replica_id>/<rank> - step N] message`; None if not one we use."""
    m = _MGR.search(line)
    if not m:
        return None
    rid, rank, step, msg = m.groups()
    replica, rank_i, step_i = _dec(rid), int(rank), int(step)
    if msg.startswith(b"should_commit="):
        ok = msg.startswith(b"should_commit=True")
        err = msg.find(b"errored=")
        detail = _dec(msg[err + 8 : err + 208]) if err >= 0 and not ok else ""
        return Event(COMMIT, t, replica, step_i, rank_i, ok=ok, detail=detail)
    if msg.startswith(b"peers need recovery from us"):
        lb = msg.find(b"[")
        ranks = tuple(int(x) for x in _INTS.findall(msg, lb)) if lb >= 0 else ()
        return Event(PEERS_RECOVER, t, replica, step_i, rank_i, ranks=ranks)
    if msg.startswith(b"healing required"):
        return Event(HEAL_REQUIRED, t, replica, _kv("max_step", msg), rank_i)
    if msg.startswith(b"fetching checkpoint from recover_src_replica_rank="):
        src = _kv("recover_src_replica_rank", msg)
        ranks = (src,) if src is not None else ()
        return Event(HEAL_FETCH, t, replica, step_i, rank_i, ranks=ranks)
    if msg.startswith(b"Loaded state dict"):
        return Event(HEALED, t, replica, step_i, rank_i)
    if msg.startswith(b"reconfiguring for quorum_id="):
        return Event(RECONFIGURE, t, replica, step_i, rank_i, quorum_id=_kv("quorum_id", msg))
    if msg.startswith(b"got exception") or msg.startswith(b"should_commit failed"):
        return Event(ERROR, t, replica, step_i, rank_i, detail=_dec(msg[:200]))
    return None


def parse_rust_replica(line: bytes, t: float | None) -> Event | None:
    """Rust manager `[Replica <prefix_i>] ...`: process start and the healing decision."""
    m = _RUST_REPLICA.search(line)
    if not m:
        return None
    rid, msg = m.groups()
    if msg.startswith(b"Manager listening on"):
        return Event(MANAGER_START, t, _dec(rid), detail=_dec(msg[21:].strip()))
    if msg.startswith(b"healing is required"):
        src = _kv("recover_src_replica_rank", msg)
        return Event(
            HEAL_REQUIRED, t, _dec(rid), _kv("max_step", msg),
            ranks=(src,) if src is not None else (), detail=f"from_step={_kv('step', msg)}",
        )
    return None


def parse_launch(line: bytes, t: float | None) -> Event | None:
    m = _LAUNCH.search(line)
    if not m:
        return None
    idx, attempt, node = m.groups()
    return Event(
        LAUNCH, t, replica=idx.decode(), rank=int(attempt), node=_dec(node) if node else "",
    )


def parse_titan_step(line: bytes, t: float | None) -> Event | None:
    m = _STEP.search(_ANSI.sub(b"", line))
    if not m:
        return None
    return Event(TITAN_STEP, t, step=int(m.group(1)), detail=_dec(m.group(2)))


def parse_line(line: bytes, t: float | None = None) -> Event | None:
    """Pure: the event one line carries, else None. `t`: the line's time if known."""
    if t is None:
        t = parse_time(line)
    if b"quorum_id: " in line:
        return parse_quorum(line, t)
    if b" - step " in line:
        return parse_manager(line, t)
    if b"[Replica " in line:
        return parse_rust_replica(line, t)
    if b"launching replica " in line:
        return parse_launch(line, t)
    if b"loss:" in line:
        return parse_titan_step(line, t)
    if b"Lighthouse listening on" in line:
        return Event(LIGHTHOUSE_START, t)
    return None


# ---------------------------------------------------------------- a file, streaming

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


def _iter_lines(fh, stats: ParseStats) -> Iterator[bytes]:
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
_PY_MGR, _QUORUM, _LISTEN, _LAUNCH_M = range(4)
_Q_NEEDLE = b"Quorum { quorum_id: "
_NEEDLES = (
    (b" - step ", _PY_MGR),
    (_Q_NEEDLE, _QUORUM),
    (b"Manager listening on", _LISTEN),
    (b"launching replica ", _LAUNCH_M),
)
# replica logs when a Lighthouse log is read too: its quorums are the same, and the replica's
# own `reconfiguring for quorum_id=N` lines re-arm commit emission
_NEEDLES_NO_QUORUM = (_NEEDLES[0], _NEEDLES[2], _NEEDLES[3])
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
                        lb = rfind(b"[", max(0, p - 1024), p) + 1
                        rid = buf[lb : rfind(b"/", lb, p)]
                        ok = buf.startswith(b"True", q + 16)
                        c = commits.get(rid)
                        if c is None:
                            c = commits[rid] = _Commits()
                        seen = c.recent.get(step)
                        if seen is None:
                            c.attempted += 1
                            c.committed += ok
                            c.recent[step] = ok
                            if step > c.max_step:
                                c.max_step = step
                            if len(c.recent) > 16:  # ranks interleave within a few steps
                                c.recent = {k: v for k, v in c.recent.items() if k > step - 8}
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
                    qid = buf[j : find(b",", j, j + 24)]
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


def _time(line: bytes, last_ts_line: bytes, utc_offset: float) -> float | None:
    """The line's own time, else the time of the last timestamped line before it."""
    t = parse_time(line, utc_offset)
    if t is None and last_ts_line and last_ts_line is not line:
        t = parse_time(last_ts_line, utc_offset)
    return t
