"""A replica's progress from its log: attempt, last step and loss, commits, ranks alive.

Why a fold of lines: a poller (`status`, `failure`, the metrics, the demo, the benches) asks
again and again while the log grows, so `ProgressReader` keeps the fold's state and feeds it
only the lines appended since (`cursor.LogCursor`); a one-shot reader (`read_summary`) is the
same fold over the log's tail, so both say the same of the same bytes. Every line is read
through `logvocab`'s parsers; nothing here knows a line's shape.

What the fold keeps is the current attempt only (a requeued attempt appends to the same file
after its banner): a restarted replica shows no step until it trains again.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from ftslurm import logvocab
from ftslurm.logtail import read_tail
from ftslurm.run.cursor import LogCursor

TAIL_BYTES = 256 * 1024  # what a one-shot read looks at: a long run's log is gigabytes


@dataclass
class LogSummary:
    """What the tail of a replica log says."""

    path: str
    exists: bool = False
    last_step: int | None = None
    last_loss: float | None = None
    attempt: int | None = None  # from the last banner (`launching replica R (attempt A)`)
    mtime: float | None = None
    commits: int = 0  # `should_commit=True` lines of the current attempt
    torchft: bool = False  # the tail has torchft commit lines at all
    ranks: int = 1  # ranks per replica (torchrun's --nproc_per_node, or the ranks seen)
    # ranks of the current attempt that committed its newest step (or the one before: ranks
    # log in any order); 0 once its torchrun / worker exited; None without commit lines
    ranks_alive: int | None = None

    @property
    def training(self) -> bool:
        """The current attempt trains with the group: it has committed (torchft), or it logs
        steps where there are no commit lines to look at."""
        return self.commits > 0 or (self.last_step is not None and not self.torchft)


@dataclass
class _Attempt:
    """The current attempt's part of the fold: what its lines since its banner said."""

    number: int | None = None
    last_step: int | None = None
    last_loss: float | None = None
    commits: int = 0
    nproc: int | None = None
    max_rank: int = -1
    exited: bool = False
    newest: int | None = None  # the newest committed step of the attempt
    # ranks that committed the newest step or the one before (older steps are dropped)
    recent: dict[int, set[int]] = field(default_factory=dict)

    def feed(self, line: bytes) -> None:
        self.commits += line.count(logvocab.COMMIT_OK)
        if (nproc := logvocab.nproc_per_node(line)) is not None:
            self.nproc = nproc
        if logvocab.worker_exited(line):
            self.exited = True
        for rank, step in logvocab.rank_commits(line):
            self._commit(rank, step)
        if b"loss:" in line and (s := logvocab.parse_step_line(line)):
            self.last_step = s.step
            try:
                self.last_loss = float(s.loss)
            except ValueError:
                self.last_loss = None

    def _commit(self, rank: int, step: int) -> None:
        self.max_rank = max(self.max_rank, rank)
        self.newest = step if self.newest is None else max(self.newest, step)
        self.recent.setdefault(step, set()).add(rank)
        for old in [s for s in self.recent if s < self.newest - 1]:
            del self.recent[old]

    def ranks_alive(self) -> int | None:
        if self.exited:
            return 0
        if self.newest is None:
            return None
        return len(set().union(*self.recent.values()))


@dataclass
class _Fold:
    """The state of the fold: whether the log has torchft commit lines at all, and the
    current attempt (a banner starts a new one)."""

    torchft: bool = False
    attempt: _Attempt = field(default_factory=_Attempt)

    def feed(self, line: bytes) -> None:
        if b"\x1b" in line:
            line = logvocab.strip_ansi(line)
        if logvocab.COMMIT_ANY in line:
            self.torchft = True
        if logvocab.BANNER in line and (banner := logvocab.last_banner(line)):
            self.attempt = _Attempt(number=int(banner.group(2)))
            line = line[banner.end() :]
        self.attempt.feed(line)

    def summary(self, path: str, mtime: float | None) -> LogSummary:
        a = self.attempt
        return LogSummary(
            path=path, exists=True, last_step=a.last_step, last_loss=a.last_loss,
            attempt=a.number, mtime=mtime, commits=a.commits, torchft=self.torchft,
            ranks=max(a.nproc or 1, a.max_rank + 1), ranks_alive=a.ranks_alive(),
        )  # fmt: skip


class ProgressReader:
    """One replica log's progress, read incrementally: each `read()` folds only the lines
    appended since the previous one. A truncated or replaced log is folded again from its
    start. `tail_bytes`: the first read looks at only the log's last bytes (a one-shot
    `status` of a gigabyte log); None: the whole log, from its first line."""

    def __init__(self, path: Path, tail_bytes: int | None = None) -> None:
        self.path = path
        self.tail_bytes = tail_bytes
        self.cursor = LogCursor(path)
        self._fold = _Fold()
        self._started = False
        self._restarts = 0

    def read(self, partial: bool = False) -> LogSummary:
        """The summary after the new lines; `partial`: the unfinished last line counts too (a
        writer in the middle of a step line), without being folded for the next read."""
        try:
            st = self.path.stat()
            if not S_ISREG(st.st_mode):  # a folder or a FIFO named like a log: no log
                return LogSummary(path=str(self.path))
            mtime = st.st_mtime
            if not self._started:
                self._start()
            lines = self.cursor.lines()  # truncated or replaced: these are the new file's lines
        except OSError:
            return LogSummary(path=str(self.path))
        if self.cursor.restarts != self._restarts:
            self._restarts, self._fold = self.cursor.restarts, _Fold()
        for line in lines:
            self._fold.feed(line)
        fold = self._fold
        if partial and self.cursor.partial:
            fold = copy.deepcopy(fold)
            fold.feed(self.cursor.partial)
        return fold.summary(str(self.path), mtime)

    def _start(self) -> None:
        """The first read: the tail through `logtail.read_tail` (archives, cut lines), then
        the cursor from just after its last complete line. OSError: not readable (a folder or
        a FIFO named like a log): tried again at the next read."""
        if self.tail_bytes is None:
            self._started = True
            return
        inode = os.stat(self.path).st_ino
        lines, offset = read_tail(self.path, max_bytes=self.tail_bytes)
        self._started = True
        for text in lines:
            self._fold.feed(text.encode(errors="replace"))
        self.cursor.offset, self.cursor.inode = offset, inode


def summarize_tail(text: str, path: str = "", mtime: float | None = None) -> LogSummary:
    """Pure: the attempt number (the last banner) and the last step/loss of that attempt
    found in a log tail (the same fold as `ProgressReader`)."""
    fold = _Fold()
    for line in text.encode(errors="replace").split(b"\n"):
        fold.feed(line)
    return fold.summary(path, mtime)


def read_summary(path: Path, tail_bytes: int = TAIL_BYTES) -> LogSummary:
    """One read of a log's tail: `ProgressReader` once, its unfinished last line counted."""
    return ProgressReader(path, tail_bytes).read(partial=True)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One torchtitan step line of a log: its time (`logvocab.parse_time`: the log's wall
    clock read as UTC; None when the line has none), the attempt whose banner came before it,
    and the line's fields (`logvocab.StepLine`)."""

    time: float | None
    attempt: int | None
    step: int
    loss: str
    memory_gib: float | None = None
    memory_pct: float | None = None
    tps: int | None = None

    @property
    def loss_value(self) -> float | None:
        """The loss as a number (nan and inf as logged), None when it is not one."""
        try:
            return float(self.loss)
        except ValueError:
            return None


@dataclass
class _StepFold:
    attempt: int | None = None
    records: list[StepRecord] = field(default_factory=list)

    def feed(self, line: bytes) -> None:
        if logvocab.BANNER in line and (banner := logvocab.last_banner(logvocab.strip_ansi(line))):
            self.attempt = int(banner.group(2))
        elif b"loss:" in line and (s := logvocab.parse_step_line(line)):
            self.records.append(StepRecord(logvocab.parse_time(line), self.attempt, *s))


class StepReader:
    """Every step line of one log, read incrementally: tests and benches that wait for steps
    poll it, and each `read()` parses only the lines appended since (a truncated or replaced
    log is read again from its start)."""

    def __init__(self, path: Path) -> None:
        self.cursor = LogCursor(path)
        self._fold = _StepFold()
        self._restarts = 0

    def read(self) -> list[StepRecord]:
        """All the step records so far, every attempt's, in the log's order."""
        lines = self.cursor.lines()  # truncated or replaced: these are the new file's lines
        if self.cursor.restarts != self._restarts:
            self._restarts, self._fold = self.cursor.restarts, _StepFold()
        for line in lines:
            self._fold.feed(line)
        return self._fold.records


def steps_in(text: str | bytes) -> list[StepRecord]:
    """Pure: the step records of a log's text (`StepReader` on text already read)."""
    data = text.encode(errors="replace") if isinstance(text, str) else text
    fold = _StepFold()
    for line in data.split(b"\n"):
        fold.feed(line)
    return fold.records


def split_attempts(text: str) -> list[str]:
    """The text of each attempt of a log, split before each launcher banner; what comes
    before the first banner is left out."""
    parts: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        raw = line.encode(errors="replace")
        if logvocab.BANNER in raw and logvocab.last_banner(logvocab.strip_ansi(raw)):
            parts.append([])
        if parts:
            parts[-1].append(line)
    return ["".join(p) for p in parts]
