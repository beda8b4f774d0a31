"""wait.wait_while: the waits run while the busy call blocks, and their errors come back."""

from __future__ import annotations

import threading
import time

import pytest

from ftslurm.wait import WaitTimeout, wait_while

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_conditions_are_timed_while_busy_blocks():
    first_seen = threading.Event()
    done_at: list[float] = []

    def busy() -> None:
        # blocks until the watcher saw the first condition: it cannot, unless it runs meanwhile
        assert first_seen.wait(10)
        done_at.append(time.monotonic())

    def first() -> int:
        first_seen.set()
        return 7

    got = wait_while(busy, [(first, "first"), (lambda: "second", "second")], timeout=10)
    assert [v for v, _ in got] == [7, "second"]
    assert got[0][1] <= done_at[0]  # timed before busy() returned


def test_busy_errors_and_timeouts_reach_the_caller():
    def boom() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wait_while(boom, [(lambda: True, "x")], timeout=5)
    with pytest.raises(WaitTimeout, match="never"):
        wait_while(lambda: None, [(lambda: False, "never")], timeout=0.3, interval=0.05)
