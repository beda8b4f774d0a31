"""ftslurm.daemon on real processes: zombie-aware liveness, pid-reuse detection, stop with
SIGTERM → SIGKILL escalation, stale state cleanup, log rotation and tail."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ftslurm import daemon, runner
from ftslurm.procs import pid_alive
from ftslurm.wait import WaitTimeout, wait_for

pytestmark = pytest.mark.timeout(60)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)  # ftslurm-test-sleeper"]
# Ignores SIGTERM (prints READY once the handler is set, so the test does not race it).
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('READY', flush=True); time.sleep(120)  # ftslurm-test-stubborn",
]


@pytest.fixture
def procs():
    """Processes a test starts; killed and reaped at teardown whatever happens."""
    started: list = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def _spawn(procs: list, cmd: list[str], log: Path | None = None):
    p = runner.spawn(cmd, log_path=log)
    procs.append(p)
    return p


def test_proc_stat_of_self():
    st = daemon.proc_stat(os.getpid())
    assert st is not None and st.state in "RS"
    assert st.start_ticks > 0
    assert daemon.proc_stat(2**22 + 12345) is None  # above pid_max: never exists


def test_is_alive_checks_identity(procs):
    p = _spawn(procs, SLEEPER)
    ticks = daemon.proc_stat(p.pid).start_ticks
    assert daemon.is_alive(p.pid)
    assert daemon.is_alive(p.pid, "ftslurm-test-sleeper", ticks)
    # pid reuse: same pid, another program / another start time
    assert not daemon.is_alive(p.pid, "torchft_lighthouse")
    assert not daemon.is_alive(p.pid, "ftslurm-test-sleeper", ticks + 1)
    assert not daemon.is_alive(0) and not daemon.is_alive(-1)


def test_zombie_is_not_alive(procs):
    """A SIGKILLed child that nobody reaped yet is a zombie: kill(pid, 0) succeeds on it, but
    it is dead."""
    p = _spawn(procs, SLEEPER)
    os.kill(p.pid, signal.SIGKILL)
    wait_for(lambda: daemon.proc_stat(p.pid).state == "Z", timeout=10, interval=0.01,
             what="zombie state")  # fmt: skip
    os.kill(p.pid, 0)  # still "exists" for kill()
    assert not daemon.is_alive(p.pid)
    assert not daemon.is_alive(p.pid, "ftslurm-test-sleeper")


def test_stop_sigterm(procs):
    p = _spawn(procs, SLEEPER)
    t0 = time.monotonic()
    assert daemon.stop(p.pid, grace=10, expected_cmdline_substring="ftslurm-test-sleeper") == (
        "terminated"
    )
    assert time.monotonic() - t0 < 5
    assert daemon.proc_stat(p.pid) is None  # gone, and reaped (stop reaps its own children)
    assert daemon.stop(p.pid, grace=1) == "not-running"  # idempotent


def test_stop_escalates_to_sigkill(procs, tmp_path):
    log = tmp_path / "stubborn.log"
    p = _spawn(procs, STUBBORN, log)
    wait_for(lambda: "READY" in log.read_text(), timeout=20, interval=0.02, what="READY")
    t0 = time.monotonic()
    assert daemon.stop(p.pid, grace=0.5) == "killed"
    assert 0.5 <= time.monotonic() - t0 < 5
    assert daemon.proc_stat(p.pid) is None


def test_stop_never_signals_a_reused_pid(procs):
    p = _spawn(procs, SLEEPER)
    assert daemon.stop(p.pid, 1, expected_cmdline_substring="not-this-program") == "not-running"
    assert p.poll() is None


def test_exiting_waits_for_all_threads(procs):
    """A process whose main thread is gone but another thread still runs is 'exiting'."""
    code = (
        "import threading, time, os\n"
        "threading.Thread(target=time.sleep, args=(120,)).start()\n"
        "print('READY', flush=True)\n"
        "import ctypes; ctypes.CDLL(None).pthread_exit(None)  # main thread exits, not the rest\n"
    )
    p = runner.spawn([sys.executable, "-c", code], log_path=None)
    procs.append(p)
    wait_for(lambda: daemon.proc_stat(p.pid).state == "Z", timeout=20, interval=0.02,
             what="leader zombie")  # fmt: skip
    assert not daemon.is_alive(p.pid)
    assert daemon.exiting(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    wait_for(lambda: not daemon.exiting(p.pid), timeout=10, interval=0.01, what="exit")


def test_daemon_lifecycle_and_stale_state(tmp_path):
    d = daemon.Daemon(tmp_path / "state", "sleeper")
    assert d.lookup().state is None
    proc, state, offset = d.start(SLEEPER, marker="ftslurm-test-sleeper", extra={"k": 1})
    try:
        assert offset == 0
        assert d.pidfile.read_text().strip() == str(proc.pid)
        found = d.lookup()
        assert found.state is not None and found.state.pid == proc.pid
        assert found.state.extra == {"k": 1} and found.state.start_ticks
        # kill -9 behind its back: lookup reports stale and removes the files
        os.kill(proc.pid, signal.SIGKILL)
        wait_for(lambda: not d.owns(state), timeout=10, interval=0.01, what="death")
        found = d.lookup()
        assert found.state is None and found.stale is not None and found.stale.pid == proc.pid
        assert not d.pidfile.exists() and not d.statefile.exists()
        assert d.stop() == ("not-running", None)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _leader_with_child(flag: Path) -> list[str]:
    """A daemon whose child (in its session) outlives it until `flag` exists, as a Lighthouse
    killed by PR_SET_PDEATHSIG still closes its port after its parent, the log writer.

    The leader hands the child its own pid: a child that read `os.getppid()` itself could do so
    only after a test had already killed the leader (a slow interpreter start on a loaded
    machine), take its new parent for the leader and never exit."""
    child = (f"import os, sys, time; p = int(sys.argv[1])\nwhile os.getppid() == p or not "
             f"os.path.exists({str(flag)!r}): time.sleep(0.01)")  # fmt: skip
    return [sys.executable, "-c",
            f"import os, subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            f"{child!r}, str(os.getpid())]); print('CHILD', c.pid, flush=True); time.sleep(120)"
            "  # ftslurm-test-leader"]  # fmt: skip


@pytest.mark.parametrize("how", ["lookup", "stop"])
def test_stale_lookup_and_stop_wait_for_the_daemons_children(tmp_path, how):
    """A killed daemon is stale, or stopped, only once the processes of its session are gone
    too: until then its children may still hold its port, and a new start would find it
    taken."""
    flag = tmp_path / f"release-{how}"
    d = daemon.Daemon(tmp_path / how, "leader")
    proc, state, _ = d.start(_leader_with_child(flag), marker="ftslurm-test-leader")
    child = None
    try:
        wait_for(lambda: "CHILD" in d.logfile.read_text(), timeout=20, what="child started")
        child = int(d.logfile.read_text().split()[1])
        if how == "lookup":
            os.kill(proc.pid, signal.SIGKILL)
            wait_for(lambda: not d.owns(state), timeout=10, interval=0.01, what="death")
        assert pid_alive(child)
        threading.Timer(0.3, flag.touch).start()  # the child may exit from now on
        if how == "lookup":
            found = d.lookup()
            assert found.stale is not None and not d.pidfile.exists()
        else:
            assert d.stop(grace=5)[0] == "terminated"
        assert not pid_alive(child)
    finally:
        flag.touch()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if child and pid_alive(child):
            os.kill(child, signal.SIGKILL)


def test_stop_ends_a_child_that_does_not_die_with_the_daemon(tmp_path):
    """A wrapper script that does not `exec` (a user's --binary): its child would keep the
    port after the wrapper is stopped; stop ends it too, in a couple of seconds."""
    d = daemon.Daemon(tmp_path, "wrapper")
    proc, state, _ = d.start(["sh", "-c", "sleep 60; : ftslurm-test-wrapper"],
                         marker="ftslurm-test-wrapper")  # fmt: skip
    child = None
    try:
        wait_for(lambda: d._followers(state, True), timeout=10, what="the wrapper's child")
        (child,) = d._followers(state, True)
        t0 = time.monotonic()
        assert d.stop(grace=5)[0] == "terminated"
        assert time.monotonic() - t0 < 9 and not pid_alive(child)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if child and pid_alive(child):  # its sleep 60, should stop() have missed it
            os.kill(child, signal.SIGKILL)


def test_stale_pid_reused_by_another_program(tmp_path, procs):
    """A state file whose pid now belongs to another program: stale, and never signalled."""
    other = _spawn(procs, SLEEPER)
    d = daemon.Daemon(tmp_path, "lh")
    d.write_state(daemon.DaemonState("lh", other.pid, 1, time.time(), ["x"], "torchft_lighthouse"))
    outcome, st = d.stop(grace=1)
    assert outcome == "foreign" and st.pid == other.pid
    assert other.poll() is None


def test_bare_pidfile_is_understood(tmp_path, procs):
    p = _spawn(procs, SLEEPER)
    d = daemon.Daemon(tmp_path, "x")
    d.pidfile.write_text(f"{p.pid}\n")
    assert d.lookup().state.pid == p.pid
    assert d.stop(grace=5)[0] == "terminated"
    d.pidfile.write_text("garbage")
    assert d.lookup().state is None


def test_wait_ready_fails_fast_when_process_dies(procs):
    p = _spawn(procs, [sys.executable, "-c", "raise SystemExit(7)"])
    t0 = time.monotonic()
    with pytest.raises(daemon.ProcessExited) as e:
        daemon.wait_ready(lambda: False, pid=p.pid, poll=p.poll, timeout=30)
    assert e.value.returncode == 7
    assert time.monotonic() - t0 < 10
    with pytest.raises(WaitTimeout, match=r"^timed out after 0\.1 s waiting for the daemon to be"):
        daemon.wait_ready(lambda: False, pid=os.getpid(), timeout=0.1)
    assert daemon.wait_ready(lambda: 42, pid=os.getpid(), timeout=1) == 42


def test_rotate_log(tmp_path):
    log = tmp_path / "x.log"
    assert not daemon.rotate_log(log, 10)
    log.write_text("a" * 5)
    assert not daemon.rotate_log(log, 10)
    log.write_text("b" * 20)
    (tmp_path / "x.log.1").write_text("old")
    assert daemon.rotate_log(log, 10)
    assert not log.exists() and (tmp_path / "x.log.1").read_text() == "b" * 20


def test_tail_lines(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("".join(f"line {i}\n" for i in range(10000)))
    assert daemon.tail_lines(log, 3, block=64) == ["line 9997", "line 9998", "line 9999"]
    assert daemon.tail_lines(log, 0) == []
    assert daemon.tail_lines(tmp_path / "missing", 5) == []
    log.write_text("one\ntwo")
    assert daemon.tail_lines(log, 10) == ["one", "two"]


def test_lock_serialises(tmp_path):
    d = daemon.Daemon(tmp_path, "x")
    order: list[str] = []
    entered = threading.Event()

    def other() -> None:
        with daemon.Daemon(tmp_path, "x").locked(timeout=10):
            order.append("other")

    with d.locked():
        # exclusion, deterministic: another holder times out while this one holds the lock
        with pytest.raises(WaitTimeout, match=r"x\.lock is held by another process$"):
            with daemon.Daemon(tmp_path, "x").locked(timeout=0.1):
                pass
        t = threading.Thread(target=lambda: (entered.set(), other()))
        t.start()
        assert entered.wait(5)
        t.join(0.3)  # still waiting for the lock (had it got in, it would have ended)
        assert t.is_alive() and order == []
        order.append("first")
    t.join(10)  # ... and gets it once released
    assert order == ["first", "other"]
