"""The process toolkit's one wait, one timeout exception and one process identity:
`ftslurm.wait.wait_for` / `WaitTimeout`, `ftslurm.procs.ProcId`, and the waits built on them
(a daemon's readiness and lock, processes to exit, the attempt guard's wait, a failure's
recovery)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ftslurm import daemon, failure, procs
from ftslurm.errors import UserError
from ftslurm.wait import WaitTimeout, wait_for

pytestmark = pytest.mark.timeout(30)


@pytest.mark.unit
def test_a_wait_timeout_is_a_timeout_error_with_the_same_text() -> None:
    """`except TimeoutError` (the standard library's convention) catches every wait's
    timeout, and the text a user sees is the one it always was."""
    with pytest.raises(TimeoutError) as e:
        wait_for(lambda: 0, 0.05, interval=0.01, what="nothing")
    assert type(e.value) is WaitTimeout
    assert str(e.value) == "timed out after 0.05 s waiting for nothing"


@pytest.mark.unit
def test_wait_for_returns_the_value_and_backs_off_to_max_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("ftslurm.wait.time.sleep", pauses.append)
    values = iter([0, None, "", False, 0, "here"])
    assert wait_for(lambda: next(values), 60, 0.01, max_interval=0.05) == "here"
    assert pauses == [0.01, 0.02, 0.04, 0.05, 0.05]
    pauses.clear()
    values = iter([0, 0, 0, 7])
    assert wait_for(lambda: next(values), 60, 0.3) == 7
    assert pauses == [0.3, 0.3, 0.3]  # no max_interval: a steady pace


@pytest.mark.unit
def test_an_error_of_the_condition_ends_the_wait() -> None:
    """How `daemon.wait_ready` fails fast: its condition raises once the process died."""
    with pytest.raises(daemon.ProcessExited):
        daemon.wait_ready(lambda: False, pid=os.getpid(), timeout=30,
                          poll=lambda: 3)  # fmt: skip


@pytest.mark.unit
def test_wait_gone_raises_wait_timeout() -> None:
    procs.wait_gone(lambda: False, 0.01)
    with pytest.raises(WaitTimeout, match="^timed out after 0.05 s waiting for pid 1 to exit$"):
        procs.wait_gone(lambda: True, 0.05, "pid 1 to exit")


@pytest.mark.unit
def test_a_failure_s_recovery_timeout_is_a_wait_timeout_shown_as_a_user_error() -> None:
    e = failure.RecoveryTimeout("timed out after 3 s waiting for 1_0 to stop")
    assert isinstance(e, WaitTimeout) and isinstance(e, UserError) and e.exit_code == 1
    assert str(e) == "timed out after 3 s waiting for 1_0 to stop"


@pytest.mark.unit
def test_proc_id_tells_a_reused_pid_from_the_process_first_seen() -> None:
    me = procs.ProcId.of(os.getpid())
    assert me is not None and me.start_ticks is not None
    assert me.running() and me.present()
    assert procs.ProcId(os.getpid()).running()  # start time unknown: the pid only
    reused = procs.ProcId(os.getpid(), me.start_ticks + 1)  # same pid, another process
    assert not reused.running() and not reused.present()
    assert procs.ProcId.of(procs.PID_MAX + 1) is None and procs.ProcId.of(0) is None
    assert not procs.ProcId(0).running() and not procs.pid_alive(None)


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_wait_exited_without_a_pidfd_follows_the_identity_not_the_pid() -> None:
    """A kernel without pidfds: the wait polls `ProcId`, so it ends when the process exits
    (a zombie counts), and a pid that is now another process's is not waited on."""
    p = _sleeper()
    try:
        me = procs.ProcId.of(p.pid)
        assert me is not None
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (procs.wait_exited(me, None), done.set()),
                                  daemon=True)  # fmt: skip
        waiter.start()
        assert not done.wait(0.7)  # it runs: still waiting (a look every 0.5 s)
        p.kill()
        assert done.wait(5)  # a zombie until reaped below: exited all the same
        t0 = time.monotonic()
        procs.wait_exited(procs.ProcId(os.getpid(), (me.start_ticks or 0) - 1), None)
        assert time.monotonic() - t0 < 0.5  # this pid, another start time: not ours
    finally:
        p.kill()
        p.wait(10)


def test_wait_exited_on_a_pidfd() -> None:
    p = _sleeper()
    try:
        me = procs.ProcId.of(p.pid)
        fd = procs.open_pidfd(p.pid)
        if fd is None:
            pytest.skip("no pidfd on this kernel")
        done = threading.Event()
        threading.Thread(target=lambda: (procs.wait_exited(me, fd), done.set()),  # type: ignore[arg-type]
                         daemon=True).start()  # fmt: skip
        assert not done.wait(0.3)
        p.kill()
        assert done.wait(5)
        os.close(fd)
    finally:
        p.kill()
        p.wait(10)
    with pytest.raises(ProcessLookupError):
        procs.open_pidfd(p.pid)  # reaped: gone


def test_the_attempt_guard_removes_the_folder_once_its_launcher_exits(tmp_path) -> None:
    folder = tmp_path / "ftslurm-attempt-x"
    folder.mkdir()
    p = _sleeper()
    guard = subprocess.run([sys.executable, "-m", "ftslurm.replica.launcher.attempt_guard",
                            str(p.pid), str(folder)], timeout=20)  # fmt: skip
    try:
        assert guard.returncode == 0  # forked away: the guard itself waits on
        # the guard must not act while its launcher runs: nothing to wait for, so a moment
        time.sleep(0.2)
        assert folder.is_dir()
        p.kill()
        p.wait(10)
        wait_for(lambda: not folder.exists(), 10, 0.02, "the attempt folder to go")
    finally:
        p.kill()
        p.wait(10)


def test_cluster_down_leaves_a_process_that_reused_a_daemon_s_pid(tmp_path) -> None:
    """The local cluster's pidfiles name slurmctld and munged: a pid reused by another program
    (a reboot, a long time) is not that daemon, and `cluster down` leaves it alone."""
    from ftslurm.cluster import local

    spec = local.new_spec(1, tmp_path / "cluster")
    local._prepare_state_dir(spec)
    other = _sleeper()
    try:
        for name in ("slurmctld", "munged"):
            spec.pidfile(name).write_text(f"{other.pid}\n")
        assert local.down(Path(spec.state_dir)) is True  # a pidfile named a live pid
        assert other.poll() is None and not spec.pidfile("slurmctld").exists()
    finally:
        other.kill()
        other.wait(10)
