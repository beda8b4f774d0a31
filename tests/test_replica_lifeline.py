"""The training worker dies with torchrun (PR_SET_PDEATHSIG): torchrun starts it in a session of
its own, so without this a SIGKILLed torchrun left the worker training."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ftslurm import procs
from ftslurm.wait import wait_for

ROOT = Path(__file__).resolve().parent.parent

# A stand-in for torchrun: starts the command in a new session (as torchrun starts its worker),
# prints the child's pid, waits.
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen(sys.argv[1:], start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def _run_under_parent(cmd: list[str]) -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *cmd], stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    child = int(parent.stdout.readline())
    return parent, child


def _loaded(pid: int, lib: str) -> bool:
    try:
        return lib in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.timeout(60)
def test_die_with_parent():
    sleeper = "from ftslurm import procs; import time; print(procs.die_with_parent(), flush=True); "
    parent, child = _run_under_parent([sys.executable, "-c", sleeper + "time.sleep(600)"])
    try:
        assert parent.stdout.readline().strip() == "True"  # set, and the child waits
        parent.kill()
        parent.wait(10)
        assert wait_for(lambda: not procs.pid_alive(child), 10, what="child gone with its parent")
    finally:
        _kill_quietly(child)
        parent.kill()


@pytest.mark.timeout(60)
def test_training_worker_dies_with_torchrun():
    """`python -m ftslurm.replica.train` (what torchrun runs): killed with its parent while it
    is still importing torchtitan (~7 s), instead of going on alone."""
    parent, child = _run_under_parent([sys.executable, "-u", "-m", "ftslurm.replica.train"])
    try:
        # torch is loaded after main() set the lifeline; torchtitan's imports take seconds more
        wait_for(lambda: _loaded(child, "libtorch"), 30, 0.05, what="worker importing torch")
        assert procs.pid_alive(child)
        parent.kill()
        parent.wait(10)
        assert wait_for(lambda: not procs.pid_alive(child), 2, what="worker gone with torchrun")
    finally:
        _kill_quietly(child)
        parent.kill()
