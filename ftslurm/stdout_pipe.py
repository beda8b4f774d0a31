"""stdout piped into a reader that stopped early (`ftslurm logs | head`, `... | grep -m1`).

The CLI then stops quietly with exit code 0: the reader chose to stop reading, and a script's
`set -o pipefail` around `ftslurm logs -f | grep -m1 healed` must not fail. click alone exits
1 and Python prints `Exception ignored ... BrokenPipeError` when it flushes at exit. A broken
pipe anywhere else (a socket) stays an error. Commands whose exit code is their answer
(`status` ones: 3 = not running; `doctor`: 1 = a check failed) say so first with
`exit_code_if_cut`, so `ftslurm lighthouse status | head -1` keeps it.
"""

from __future__ import annotations

import os
import select
import sys

_code_if_cut = 0


def exit_code_if_cut(code: int) -> None:
    """The exit code this command ends with if its output is cut short by the reader."""
    global _code_if_cut
    _code_if_cut = code


def code_if_cut() -> int:
    return _code_if_cut


def reader_gone() -> bool:
    """True when stdout is a pipe without readers: Linux reports it to the writer as POLLERR
    (what GNU `tail -f` checks to stop when its reader is gone)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def detach() -> None:
    """Point fd 1 at /dev/null, so the interpreter's final flush of what is still buffered
    has somewhere to go."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
