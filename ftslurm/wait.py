"""The one way ftslurm waits for a condition, and picking ports (no sleeps where a wait fits).

Every wait with a deadline polls through `wait_for` and, when the deadline passes, raises
`WaitTimeout` with the same text ("timed out after N s waiting for WHAT"): a caller catches one
exception whatever it waited on (a daemon's readiness, a lock, processes to exit, a replica to
come back), and `tests/test_architecture.py` keeps other polling loops out of the process
toolkit's modules.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """A condition did not become true in time.

    A TimeoutError (and so an OSError), so code written against the standard library's
    convention (`except TimeoutError`) catches it as it catches a socket's timeout."""


def wait_for(
    cond: Callable[[], T],
    timeout: float,
    interval: float = 0.2,
    what: str = "condition",
    *,
    max_interval: float | None = None,
) -> T:
    """Poll `cond` until it returns a truthy value and return it; raise WaitTimeout after
    `timeout` seconds (`math.inf`: no deadline). An exception of `cond` ends the wait (how a
    caller fails fast, e.g. when the process it waits on died).

    `max_interval`: the pause doubles after each look, from `interval` up to it. Why: a killed
    process is usually gone within milliseconds, so the first looks come quickly, while one
    that takes seconds is not polled hundreds of times."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)
        if max_interval is not None:
            pause = min(pause * 2, max_interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_while(
    busy: Callable[[], object],
    conds: list[tuple[Callable[[], T], str]],
    timeout: float,
    interval: float = 0.1,
) -> list[tuple[T, float]]:
    """Run `busy()` here while another thread waits for each of `conds` in turn (`wait_for`,
    `timeout` each); return, per condition, its value and the monotonic time it first held.

    Why: a failure that blocks (a node kept DOWN for --down-for) must not hold up the stopwatch
    of what happens meanwhile: polled only after the node comes back, a spare's claim 2 s in
    would be timed at 5 s. An exception of `busy` or a WaitTimeout of a wait is raised
    here."""
    got: list[tuple[T, float]] = []
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            for cond, what in conds:
                got.append((wait_for(cond, timeout, interval, what), time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            errors.append(e)

    watcher = threading.Thread(target=watch, name="wait_while", daemon=True)
    watcher.start()
    busy()
    watcher.join()
    if errors:
        raise errors[0]
    return got
