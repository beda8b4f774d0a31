"""`lighthouse stop` ends a --binary's child that left the session and cleared its environment
(no session, no tag: it is found in the process tree), and waits no grace it does not need: a
Lighthouse that exits on SIGTERM is stopped in well under it. Real `ftslurm` CLI and real
Lighthouse."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from ftslurm import procs
from ftslurm.lighthouse import launcher
from tests.clirun import executable, stop_lighthouse
from tests.lighthouse_state import cli, needs_torchft
from tests.lighthouse_state import original as original  # the fixture

pytestmark = pytest.mark.timeout(120)


@needs_torchft
@pytest.mark.parametrize("escape", [
    "setsid env -i sleep 300 & echo $! >{pids}",  # its parent is the Lighthouse (exec below)
    "( setsid env -i sleep 300 & echo $! >{pids} )",  # orphaned at once: adopted
    "setsid env -i sleep 300 >/dev/null 2>&1 </dev/null & echo $! >{pids}",  # not on the log
])  # fmt: skip
def test_stop_ends_a_child_that_left_the_session_and_its_environment(tmp_path: Path, escape):
    """Finding 10: a `--binary` whose child calls `setsid env -i sleep` (no session, no tag)
    survived `stop`, and stop waited the full 10 s grace: the sleep held the log pipe, so
    the launcher never exited on SIGTERM."""
    d, pids = tmp_path / "lh", tmp_path / "child.pid"
    w = executable(tmp_path / "bin" / "wrapper", f"#!/bin/bash\n{escape.format(pids=pids)}\n"
                   f'exec {sys.executable} {launcher.__file__} "$@"\n')  # fmt: skip
    try:
        r = cli(d, "start", "--bind", "127.0.0.1:0", "--binary", str(w))
        assert r.returncode == 0, r.stderr
        child = int(pids.read_text())
        assert procs.pid_alive(child) and os.getsid(child) == child
        t0 = time.monotonic()
        r = cli(d, "stop", "--grace", "30")
        took = time.monotonic() - t0
        assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")
        assert not procs.pid_alive(child)
        assert took < 15, f"stop took {took:.1f} s: the 30 s grace was waited"
    finally:
        stop_lighthouse(d)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int(pids.read_text()), signal.SIGKILL)


@needs_torchft
def test_stop_of_a_lighthouse_that_exits_at_once_takes_no_grace(original: Path):
    """Finding 10: every stop waited the full grace; a Lighthouse that exits on SIGTERM is
    stopped in well under it."""
    t0 = time.monotonic()
    r = cli(original, "stop", "--grace", "30")
    assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")
    assert time.monotonic() - t0 < 15
