"""Small helpers for waiting on conditions and picking ports (no sleeps where a wait fits)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(Exception):
    """A condition did not become true in time."""


def wait_for(
    cond: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Poll `cond` until it returns a truthy value and return it; raise WaitTimeout after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]

