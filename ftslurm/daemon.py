"""A small, reusable helper for long-running background programs (Lighthouse, slurmd, replicas).

Why this exists: a daemon started from a CLI outlives the CLI, so the only handle left to it is
a pid written to disk. A bare pid is not enough:
- a killed child of a long-lived parent (pytest, the demo) lingers as a *zombie* until it is
  reaped, and `kill(pid, 0)` still succeeds on a zombie; we read `/proc/PID/stat` state `Z`;
- pids are reused: after a reboot or a long time, the pid in a stale pidfile may belong to an
  unrelated program. We store the process's start time (`/proc/PID/stat` field 22, clock
  ticks since boot) and a substring of its command line, and check both.

Layout of a state directory for daemon `name`: `<name>.pid` (the pid, for humans and tools),
`<name>.json` (the `DaemonState`: the source of truth), `<name>.log` (its output),
`<name>.lock` (serialises start/stop between concurrent CLIs).
Processes are started only through `ftslurm.runner.spawn` (detached: own session, stdin from
/dev/null, output appended to the log), so they survive the terminal that started them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ftslurm import procs, runner
from ftslurm.procs import ProcStat, proc_cmdline, proc_stat  # noqa: F401 (re-exported)


def is_alive(
    pid: int, expected_cmdline_substring: str | None = None, start_ticks: int | None = None
) -> bool:
    """True when `pid` is a live (not zombie) process that is still the one we started.

    `expected_cmdline_substring` and `start_ticks` (from the state file) detect pid reuse; pass
    None to skip a check.
    """
    if pid <= 0:
        return False
    st = proc_stat(pid)
    if st is None or st.state in ("Z", "X", "x"):
        return False
    if start_ticks is not None and st.start_ticks != start_ticks:
        return False
    if expected_cmdline_substring:
        cmdline = proc_cmdline(pid)
        if not cmdline:
            # Right after fork/exec (vfork: the parent already runs) the new program's
            # arguments are not mapped yet and cmdline reads empty for a moment.
            cmdline = _cmdline_settled(pid)
            if not cmdline:
                return start_ticks is not None  # start time matched above: it is ours
        if expected_cmdline_substring not in cmdline:
            return False
    return True


def _cmdline_settled(pid: int, timeout: float = 0.5) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cmdline = proc_cmdline(pid)
        if cmdline:
            return cmdline
        st = proc_stat(pid)
        if st is None or st.state in ("Z", "X", "x"):
            return ""
        time.sleep(0.002)
    return ""


def exiting(pid: int) -> bool:
    """True while any thread of `pid` is still running its exit.

    A multi-threaded program (the Lighthouse is a tokio server) whose main thread is killed
    first shows as a zombie (`Z`) while its other threads still hold its sockets and files:
    "dead" by `is_alive`, yet its port is not free yet. Call this after identity was checked
    (a pid is never reused while its zombie exists).
    """
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if raw.rpartition(")")[2].split()[:1] not in (["Z"], ["X"], ["x"]):
            return True
    return False


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _session_busy(sid: int) -> bool:
    """Some process of session `sid` (a detached daemon and its children) is still running or
    running its exit. Asked once the leader `sid` is dead: its id is not reused before its
    last member is gone (Linux keeps a pid in use while a session or group still has it);
    after a reboot it may be, so lookup skips this for a daemon started before the boot."""
    return any(procs.pid_alive(p) or exiting(p) for p in procs.session_pids(sid))


def _since_boot(started_at: float) -> bool:
    """`started_at` (epoch s) is after this machine's boot."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return True
    return started_at >= time.time() - uptime


def _members(sid: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of the live processes of session `sid` other than its leader."""
    out = []
    for p in procs.session_pids(sid):
        st = proc_stat(p)
        if p != sid and st is not None and st.state not in ("Z", "X", "x"):
            out.append((p, st.start_ticks))
    return out


def _reap(pid: int) -> None:
    """Reap `pid` if it is our own child (tests, the demo), so it does not stay a zombie.

    Side effect: a `Popen` for that child no longer sees the real exit code."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(
    pid: int,
    grace: float = 10.0,
    *,
    expected_cmdline_substring: str | None = None,
    start_ticks: int | None = None,
    kill_timeout: float = 5.0,
) -> str:
    """SIGTERM `pid`, wait up to `grace` seconds, then SIGKILL. Idempotent.

    Returns "not-running" (nothing to do), "terminated" (exited after SIGTERM) or "killed".
    The identity checks make sure a reused pid of an unrelated program is never signalled.
    """

    def alive() -> bool:
        _reap(pid)
        return is_alive(pid, expected_cmdline_substring, start_ticks)

    if not alive():
        return "not-running"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if procs.wait_gone(alive, grace) and procs.wait_gone(lambda: exiting(pid), kill_timeout):
        _reap(pid)
        return "terminated"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if procs.wait_gone(alive, kill_timeout) and procs.wait_gone(lambda: exiting(pid), kill_timeout):
        _reap(pid)
        return "killed"
    raise RuntimeError(f"pid {pid} survived SIGKILL for {kill_timeout:g} s (uninterruptible?)")


class ProcessExited(Exception):
    """The daemon died while we were waiting for it to become ready."""

    def __init__(self, pid: int, returncode: int | None):
        self.pid = pid
        self.returncode = returncode
        super().__init__(f"pid {pid} exited (code {returncode}) before it was ready")


def wait_ready(
    cond: Callable[[], Any],
    *,
    pid: int,
    timeout: float,
    what: str = "the daemon to be ready",
    poll: Callable[[], int | None] | None = None,
    interval: float = 0.02,
) -> Any:
    """Poll `cond` until it returns a truthy value (returned); fail fast if `pid` dies.

    `poll` is `Popen.poll` when we have the child object (it also reaps it and gives the exit
    code); otherwise liveness is read from /proc. Raises ProcessExited or TimeoutError.
    The interval is short because readiness is on the user's critical path (`start` returns
    only then) and a Lighthouse is ready in a fraction of a second.
    """
    deadline = time.monotonic() + timeout
    while True:
        code = poll() if poll is not None else None
        if code is not None or (poll is None and not is_alive(pid)):
            raise ProcessExited(pid, code)
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass
class DaemonState:
    """What we know about a started daemon; written as JSON next to the pidfile."""

    name: str
    pid: int
    start_ticks: int | None
    started_at: float  # epoch seconds
    cmd: list[str]
    marker: str  # substring of the command line that identifies the program
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def alive(self) -> bool:
        return is_alive(self.pid, self.marker, self.start_ticks)

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.started_at)


@dataclass(frozen=True)
class Lookup:
    """Result of `Daemon.lookup`: the live state, or why there is none."""

    state: DaemonState | None  # live daemon
    # state of a dead / reused pid, or pid 0 when the files held none (removed when cleaned)
    stale: DaemonState | None = None


class Daemon:
    """Files and lifecycle of one named daemon in one state directory."""

    def __init__(self, state_dir: str | Path, name: str, marker: str = ""):
        """`marker`: a substring of the daemon's command line, checked when the state file is
        missing or unreadable and only a bare pidfile remains: without it, the pid of an
        unrelated program (pid reuse) would be taken for the daemon, and stopped."""
        self.state_dir = Path(state_dir)
        self.name = name
        self.marker = marker

    @property
    def pidfile(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def statefile(self) -> Path:
        return self.state_dir / f"{self.name}.json"

    @property
    def logfile(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    @property
    def lockfile(self) -> Path:
        return self.state_dir / f"{self.name}.lock"

    @contextlib.contextmanager
    def locked(self, timeout: float = 60.0) -> Iterator[None]:
        """Hold an exclusive lock so two CLIs never start (or stop) the daemon at once."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.lockfile, "a") as f:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{self.lockfile} is held by another process") from e
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def read_state(self) -> DaemonState | None:
        """The saved state, or None (no file, or unreadable: treated as no state)."""
        try:
            state = DaemonState(**json.loads(self.statefile.read_text()))
            if _well_typed(state):
                if not state.marker:  # an identity check is never skipped
                    state.marker = self.marker
                return state
        except (OSError, ValueError, TypeError):
            pass
        # A pidfile without state (written by hand, or by an older version): a bare pid.
        pid = procs.read_pidfile(self.pidfile)
        if pid is None:
            return None
        return DaemonState(self.name, pid, None, 0.0, [], marker=self.marker)

    def write_state(self, state: DaemonState) -> None:
        """Write state JSON then pidfile, each atomically (rename), so readers never see half."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.statefile, json.dumps(asdict(state), indent=2) + "\n")
        _atomic_write(self.pidfile, f"{state.pid}\n")

    def clear(self) -> None:
        """Remove pidfile and state (the log and the lock stay)."""
        for p in (self.pidfile, self.statefile):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def lookup(self, clean_stale: bool = True) -> Lookup:
        """The live daemon, if any; a stale pidfile (dead, zombie, reused pid) is removed, and
        so are files that name no pid at all (cut short, edited by hand: `1e23`), which are
        stale with pid 0."""
        state = self.read_state()
        if state is None:
            if not any(os.path.lexists(p) for p in (self.pidfile, self.statefile)):
                return Lookup(None)
            if clean_stale:
                self.clear()
            return Lookup(None, stale=DaemonState(self.name, 0, None, 0.0, [], self.marker))
        _reap(state.pid)
        if state.alive():
            return Lookup(state)
        if clean_stale:
            st = proc_stat(state.pid)
            ours = st is None and _since_boot(state.started_at)
            if ours or (st is not None and st.state == "Z" and st.start_ticks == state.start_ticks):
                # our process, dead or dying: let its threads and the children it started
                # (killed with it: PR_SET_PDEATHSIG) finish, so its port is free
                procs.wait_gone(lambda: _session_busy(state.pid), 5.0)
            self.clear()
        return Lookup(None, stale=state)

    def start(
        self,
        cmd: Sequence[str],
        *,
        marker: str,
        log_max_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        extra: dict[str, Any] | None = None,
    ):
        """Start `cmd` detached with its output appended to the log; write pidfile + state.

        Returns (Popen, DaemonState, log_offset): log_offset is the log size before the start,
        so a caller can read only what this run wrote. The caller checks readiness.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if log_max_bytes is not None:
            rotate_log(self.logfile, log_max_bytes)
        offset = self.logfile.stat().st_size if self.logfile.exists() else 0
        proc = runner.spawn(
            cmd, log_path=self.logfile, env=env, extra_env=extra_env, cwd=cwd, detach=True
        )
        st = proc_stat(proc.pid)
        state = DaemonState(
            name=self.name,
            pid=proc.pid,
            start_ticks=st.start_ticks if st else None,
            started_at=time.time(),
            cmd=[str(c) for c in cmd],
            marker=marker,
            log_path=str(self.logfile),
            extra=dict(extra or {}),
        )
        self.write_state(state)
        return proc, state, offset

    def stop(self, grace: float = 10.0) -> tuple[str, DaemonState | None]:
        """Stop the daemon if it runs (SIGTERM, then SIGKILL after `grace`); idempotent.

        Returns (outcome, state): outcome as in `ftslurm.daemon.stop`, or "stale" when only a
        stale pidfile was found (and removed).
        """
        found = self.lookup()
        if found.state is None:
            return ("stale" if found.stale else "not-running"), found.stale
        st = found.state
        # its session's processes, listed while the leader is alive (so the id is surely its)
        members = _members(st.pid) if _session_of(st.pid) == st.pid else []
        outcome = stop(
            st.pid, grace, expected_cmdline_substring=st.marker or None, start_ticks=st.start_ticks
        )
        if members:  # its children (the Lighthouse) may still hold the port: gone too
            if not procs.wait_gone(lambda: _session_busy(st.pid), 2.0):
                for pid, ticks in members:  # did not die with it (a --binary wrapper script)
                    if is_alive(pid, start_ticks=ticks):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                procs.wait_gone(lambda: _session_busy(st.pid), 5.0)
        self.clear()
        return outcome, st


def _well_typed(state: DaemonState) -> bool:
    """A state file edited by hand or cut short must not crash status/stop (`"pid": "12"`,
    or a pid out of range, which os.kill and os.waitpid refuse with OverflowError)."""
    return (
        type(state.pid) is int
        and procs.valid_pid(state.pid) is not None
        and (state.start_ticks is None or type(state.start_ticks) is int)
        and isinstance(state.started_at, (int, float))
        and isinstance(state.marker, str)
        and isinstance(state.cmd, list)
        and isinstance(state.extra, dict)
    )


def rotate_log(path: Path, max_bytes: int) -> bool:
    """Rename `path` to `path.1` (replacing an older `.1`) when it is bigger than `max_bytes`.

    Called only at start, when no process writes the file, so a rename is safe. Returns
    whether it rotated.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    os.replace(path, path.with_name(path.name + ".1"))
    return True


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def tail_lines(path: Path, n: int, block: int = 65536) -> list[str]:
    """The last `n` lines of a log, the one being written included (`logtail.read_tail`)."""
    from ftslurm.logtail import read_tail

    try:
        return read_tail(path, max(n, 0), block, partial=True)[0]
    except FileNotFoundError:
        return []
