"""Folds the quorum lines torchft repeats every step, before they reach a log.

Why: torchft logs each quorum round whole, every member listed (~270 bytes a member). The Rust
Manager writes `[Replica X] got lighthouse quorum LighthouseQuorumResponse { quorum: Some(
Quorum { quorum_id: N, participants: [...] ... }` into each replica's log every step, and the
Lighthouse writes `Quorum! Quorum { quorum_id: N, participants: [...] ... }` every round, with a
`Received quorum request` and a `Quorum status:` line per request: with 1,024 replicas that is
277 KB a replica a step and 662 KB of Lighthouse log a round, almost all of it a repeat.

What stays, by what ftslurm's readers use (report/reader.py, report/sources.py, demo.py,
lighthouse/lifecycle.py; status and metrics read the Lighthouse's page and the report):
- a quorum line is kept whole when its quorum id or its members' ids differ from the last one
  kept on the stream (and the first): that is the only one the report parses;
- a repeated round is kept short, one line still: its timestamp and `Quorum { quorum_id: N,`
  (the report takes each round's time as the last time the members were seen alive, and
  the rounds of one id in bulk by that text), then the member count, the range of the
  members' steps and commit_failures, and its `created:` time. Its member list is in
  parentheses: `logvocab.parse_quorum` reads no quorum from it (no member list to lie with);
- the Lighthouse's `Received quorum request for replica R` only the first time R asks (when
  each replica process joined); a `Quorum status:` line once per shape (its text, numbers
  aside) per quorum and per ten seconds of the log's clock; every other line as it came.

Lines cut at a chunk boundary are joined first (`feed` holds a partial last line, `flush`
gives it at the end); a line past MAX_PENDING without its newline is passed on as it comes
(memory stays bounded); nothing here raises on a line's content: a line that does not parse
as one of the shapes above passes unchanged.

Standard library only and importable on its own: the Lighthouse's launcher
(lighthouse/launcher.py), copied into the state directory with this file beside it, runs it
where ftslurm may not be importable.
"""

from __future__ import annotations

import re

MAX_PENDING = 64 << 20  # a partial line longer than this is passed on, not held
MAX_SEEN = 1 << 16  # replica ids / status shapes remembered; then forgotten, and kept again
STATUS_KEY_BYTES = 512  # of a `Quorum status:` message, what its shape is taken from

_QUORUM = re.compile(rb"Quorum \{ quorum_id: (\d{1,18}), participants: ")
_LIST_END = b"], created: "
_IDS = re.compile(rb'QuorumMember \{ replica_id: "([^"]{0,4096})"')  # bounded: linear on junk
_STEPS = re.compile(rb", step: (-?\d{1,18}), ")
_COMMIT_FAILURES = re.compile(rb", commit_failures: (\d{1,18}), ")
_TAIL_MAX = 256  # `, created: Some(Timestamp { ... }) }`: longer is not that tail
_DIGITS = re.compile(rb"\d+")
_TEN_SECONDS = re.compile(rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d")  # a log time, to 10 s

_REPLICA_MARK = b"got lighthouse quorum "
_LH_QUORUM = b"Quorum! "
_LH_REQUEST = b"Received quorum request for replica "
_LH_STATUS = b"Quorum status: "
_LH_CHANGE = b"Detected quorum change"


class _Fold:
    """The last whole quorum line's id and members on one stream, and the short form of a
    repeat of it."""

    def __init__(self) -> None:
        self.qid = b""
        self.ids = b""

    def line(self, line: bytes) -> bytes:
        """`line` whole (a new quorum, or not a well-formed quorum line), or its short form."""
        m = _QUORUM.search(line)
        if m is None:
            return line
        end = line.rfind(_LIST_END, m.end())
        if end < 0:
            return line  # cut, or not torchft's shape: as it came
        found = _IDS.findall(line, m.end(), end)
        ids = b"\n".join(sorted(found))
        qid = m.group(1)
        if qid != self.qid or ids != self.ids:
            self.qid, self.ids = qid, ids
            return line
        return short_form(line, m, end, len(found))


def _span(values: list[bytes]) -> bytes:
    nums = [int(v) for v in values]
    return b"%d..%d" % (min(nums), max(nums))


def short_form(line: bytes, m: re.Match[bytes], end: int, members: int) -> bytes:
    """A repeated quorum round in one short line: up to `participants: `, then the member
    count, the members' step and commit_failures ranges, and the line's `created:` tail."""
    steps = _STEPS.findall(line, m.end(), end)
    failures = _COMMIT_FAILURES.findall(line, m.end(), end)
    note = b"(%d members, as in the last full line of quorum_id %s" % (members, m.group(1))
    if steps:
        note += b"; step: " + _span(steps)
    if failures:
        note += b", commit_failures: " + _span(failures)
    tail = line[end + 1 :]
    if len(tail) > _TAIL_MAX:
        tail = b"" if not line.endswith(b"\r") else b"\r"
    return line[: m.end()] + note + b")" + tail


_FOLDED = re.compile(rb"Quorum \{ quorum_id: \d{1,18}, participants: \((\d{1,18}) members, as in ")


def folded_members(line: bytes) -> int | None:
    """The member count of a short (folded) quorum line, else None: a reader of the newest
    quorum line (the demo) takes it as the size of the quorum its full line listed."""
    m = _FOLDED.search(line)
    return int(m.group(1)) if m else None


class _Stream:
    """Whole lines out of chunks of a stream, each through `filter_line`."""

    markers: tuple[bytes, ...] = ()

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._passing = False  # the rest of an overlong line is passed on as it comes

    def filter_line(self, line: bytes) -> bytes | None:
        """One line (with or without its newline, kept as given): what to write instead, or
        None to leave it out."""
        if line.endswith(b"\n"):
            out = self._line(line[:-1])
            return None if out is None else out + b"\n"
        return self._line(line)

    def _line(self, line: bytes) -> bytes | None:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the quorums and lines seen: the next of each is kept whole (a log begun
        again, e.g. after a rotation, starts with everything a reader needs)."""
        raise NotImplementedError

    def feed(self, chunk: bytes) -> bytes:
        """The filtered whole lines of what came so far; a partial last line is held for the
        next chunk (or `flush`)."""
        if not chunk:
            return b""
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            if self._passing:
                return chunk
            self._pending.append(chunk)
            self._pending_len += len(chunk)
            return self._overlong()
        head = chunk[:cut] if cut < len(chunk) else chunk
        if self._pending:
            self._pending.append(head)
            head = b"".join(self._pending)
        passing, self._passing = self._passing, False
        rest = chunk[cut:]
        self._pending = [rest] if rest else []
        self._pending_len = len(rest)
        out = self._lines(head, passing)
        return out + self._overlong() if self._pending_len > MAX_PENDING else out

    def flush(self) -> bytes:
        """The held partial last line, filtered (the end of the stream)."""
        rest = b"".join(self._pending)
        self._pending, self._pending_len = [], 0
        if not rest or self._passing:
            self._passing = False
            return rest
        out = self._line(rest)
        return out if out is not None else b""

    def _overlong(self) -> bytes:
        """A held partial line past MAX_PENDING: passed on as it is, and the rest of it too."""
        if self._pending_len <= MAX_PENDING:
            return b""
        out = b"".join(self._pending)
        self._pending, self._pending_len, self._passing = [], 0, True
        return out

    def _lines(self, data: bytes, passing: bool) -> bytes:
        """`data`, whole lines each ending in a newline, filtered; `passing`: its first line is
        the end of an overlong one, passed on."""
        start = data.find(b"\n") + 1 if passing else 0
        if not any(mark in data for mark in self.markers):
            return data
        out = [data[:start]] if start else []
        lines = data[start:].split(b"\n")
        lines.pop()  # after the last newline
        line = self._line
        for text in lines:
            kept = line(text)
            if kept is not None:
                out.append(kept + b"\n")
        return b"".join(out)


class ReplicaLogFilter(_Stream):
    """One replica worker's output (its ranks' stdout and stderr, one stream): torchft's
    `got lighthouse quorum` line whole when the quorum changed, else short; every other line
    as it came.

    API of the launcher's pipe: `feed(chunk) -> bytes`, `flush() -> bytes` at the end."""

    markers = (_REPLICA_MARK,)

    def __init__(self) -> None:
        super().__init__()
        self._fold = _Fold()

    def reset(self) -> None:
        self._fold = _Fold()

    def _line(self, line: bytes) -> bytes | None:
        if _REPLICA_MARK not in line:
            return line
        return self._fold.line(line)


class LighthouseLogFilter(_Stream):
    """The Lighthouse's output (the launcher copies it into its log through this): `Quorum!`
    whole when the quorum changed, else short; `Received quorum request` the first time each
    replica asks; `Quorum status:` once per shape per quorum and per ten seconds; every other
    line as it came."""

    markers = (_LH_QUORUM, _LH_REQUEST, _LH_STATUS, _LH_CHANGE)

    def __init__(self) -> None:
        super().__init__()
        self.reset()

    def reset(self) -> None:
        self._fold = _Fold()
        self._askers: set[bytes] = set()
        self._shapes: set[bytes] = set()
        self._window = b""

    def _line(self, line: bytes) -> bytes | None:
        if _LH_QUORUM in line:
            qid, ids = self._fold.qid, self._fold.ids
            out = self._fold.line(line)
            if (self._fold.qid, self._fold.ids) != (qid, ids):
                self._shapes.clear()  # a new quorum: how the next one forms is news again
            return out
        p = line.find(_LH_REQUEST)
        if p >= 0:
            return line if _first(self._askers, line[p + len(_LH_REQUEST) :].strip()) else None
        p = line.find(_LH_STATUS)
        if p >= 0:
            return line if self._new_status(line, p + len(_LH_STATUS)) else None
        if _LH_CHANGE in line:
            self._shapes.clear()
        return line

    def _new_status(self, line: bytes, p: int) -> bool:
        """Whether this `Quorum status:` shape is the first in its ten seconds."""
        m = _TEN_SECONDS.match(line)
        window = m.group(0) if m else b""
        if window != self._window:
            self._window = window
            self._shapes.clear()
        return _first(self._shapes, _DIGITS.sub(b"#", line[p : p + STATUS_KEY_BYTES]))


def _first(seen: set[bytes], key: bytes) -> bool:
    """Whether `key` is new to `seen` (then it is added); a full set is emptied first."""
    if key in seen:
        return False
    if len(seen) >= MAX_SEEN:
        seen.clear()
    seen.add(key)
    return True
