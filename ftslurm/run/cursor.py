"""The one incremental reader of a growing log: the complete lines appended since last time.

Why offset and inode: a replica log grows for the whole run (`--open-mode=append`: a requeued
attempt appends to the same file), so a poller must read only the new bytes; a log truncated
(size below the offset) or replaced (a new inode: rotated, copied over) is read again from its
start, and `restarts` tells a reader that folds lines to start its state over.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

BLOCK = 1 << 20  # bytes read at once
LINE_MAX = 1 << 20  # the unfinished line kept at most: a newline-free log must not fill memory


@dataclass
class LogCursor:
    """Where a reader of `path` is: `offset` just after the last byte read, the `inode` it was
    read from, and the unfinished last line (`partial`, waiting for its newline). A missing
    file has no lines yet. `skip_first`: the first line read is the middle of one (a cursor
    that starts inside the file, `at_tail`), so it is dropped."""

    path: Path
    offset: int = 0
    inode: int | None = None
    partial: bytes = b""
    restarts: int = 0
    skip_first: bool = False

    def lines(self) -> list[bytes]:
        """The complete lines appended since the previous call, without their newline. A log
        that is there but cannot be read (no permission) raises OSError: the caller says so."""
        try:
            if not S_ISREG(os.stat(self.path).st_mode):
                return []  # a FIFO would block the reader, a folder is not a log
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below, after fstat
        except FileNotFoundError:
            return []  # not there yet (a task that starts late), or gone between the calls
        out: list[bytes] = []
        with fh:
            st = os.fstat(fh.fileno())
            if (self.inode is not None and st.st_ino != self.inode) or st.st_size < self.offset:
                self.offset, self.partial, self.skip_first = 0, b"", False
                self.restarts += 1
            self.inode = st.st_ino
            fh.seek(self.offset)
            while self.offset < st.st_size:  # what was there at fstat, in blocks
                data = fh.read(min(BLOCK, st.st_size - self.offset))
                if not data:
                    break
                self.offset += len(data)
                out += self._split(data)
        return out

    def _split(self, data: bytes) -> list[bytes]:
        lines = (self.partial + data).split(b"\n")
        last = lines.pop()
        self.partial = last[:LINE_MAX]
        if self.skip_first and lines:
            self.skip_first = False
            lines.pop(0)
        return lines

    def at_tail(self, max_bytes: int) -> LogCursor:
        """Start at the file's last `max_bytes` (a long log: only its tail matters), dropping
        the line cut there; a file not there yet is read from its start when it comes."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return self
        if size > max_bytes:
            self.offset, self.skip_first = size - max_bytes, True
        return self
