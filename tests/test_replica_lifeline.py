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
from ftslurm.replica import handoff
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


# A worker that starts only once its parent is gone (it waits, then execs the training worker):
# the race where torchrun is killed before its worker's interpreter has set the lifeline.
LATE_WORKER = textwrap.dedent(
    """
    import os, sys, time
    parent = int(sys.argv[1])
    while os.getppid() == parent:
        time.sleep(0.01)
    os.execv(sys.executable, [sys.executable, "-u", "-m", "ftslurm.replica.worker.train"])
    """
)

# A stand-in for torchrun that dies at once: starts LATE_WORKER (stderr to a file), exits.
DYING_PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    with open(sys.argv[2], "w") as err:
        child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())],
                                 start_new_session=True, stderr=err)
    print(child.pid, flush=True)
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
    """`python -m ftslurm.replica.worker.train` (what torchrun runs): killed with its parent while
    it is still importing torchtitan (~7 s), instead of going on alone."""
    parent, child = _run_under_parent([sys.executable, "-u", "-m", "ftslurm.replica.worker.train"])
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


@pytest.mark.timeout(60)
def test_worker_whose_torchrun_died_before_it_started_does_not_train(tmp_path):
    """torchrun killed before the worker set its lifeline: the worker's parent is init by then,
    so only the launcher's pid (FTSLURM_LAUNCHER_PID; this test plays the launcher) tells it
    that it is an orphan. It must exit before importing torch, not train alone."""
    err = tmp_path / "worker.err"
    env = {**os.environ, "PYTHONPATH": str(ROOT), handoff.LAUNCHER_ENV: str(os.getpid())}
    out = subprocess.run(
        [sys.executable, "-c", DYING_PARENT, LATE_WORKER, str(err)], capture_output=True,
        text=True, env=env, cwd=ROOT, timeout=30, check=True,
    ).stdout  # fmt: skip
    child = int(out)
    try:
        assert wait_for(lambda: not procs.pid_alive(child), 20, what="orphaned worker gone")
        assert "not training as an orphan" in err.read_text()
    finally:
        _kill_quietly(child)


def test_descends_from():
    assert procs.descends_from(os.getppid(), os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert procs.descends_from(os.getpid(), child.pid)
        assert not procs.descends_from(child.pid, os.getpid())
    finally:
        child.kill()
        child.wait(10)
    assert not procs.descends_from(os.getpid(), child.pid)  # gone: no chain to walk


# After training, a teardown that aborts (what torch 2.13 sometimes does at exit: "terminate
# called without an active exception") stands in as an atexit handler that aborts.
ABORTING_TEARDOWN = textwrap.dedent(
    """
    import atexit, logging, os, sys
    from ftslurm.replica.worker.train import exit_now
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    atexit.register(os.abort)
    print("Training completed", end="")  # buffered: exit_now must flush it
    logging.info("Process group destroyed")
    if sys.argv[1] == "exit_now":
        exit_now()
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["exit_now", "return"])
def test_a_finished_worker_skips_the_teardown_and_keeps_its_output(how):
    done = subprocess.run([sys.executable, "-c", ABORTING_TEARDOWN, how], capture_output=True,
                          text=True, timeout=50, cwd=ROOT)  # fmt: skip
    assert done.stdout == "Training completed"
    assert "Process group destroyed" in done.stderr
    # the same worker through the normal teardown is what torchrun saw as a failed rank
    assert done.returncode == (0 if how == "exit_now" else -signal.SIGABRT)
