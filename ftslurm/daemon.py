"""A small, reusable helper for long-running background programs (Lighthouse, slurmd, replicas).

Why this exists: a daemon started from a CLI outlives the CLI, so the only handle left to it is
a pid written to disk. A bare pid is not enough:
- a killed child of a long-lived parent (pytest, the demo) lingers as a *zombie* until it is
  reaped, and `kill(pid, 0)` still succeeds on a zombie; we read `/proc/PID/stat` state `Z`;
- pids are reused: after a reboot or a long time, the pid in a stale pidfile may belong to an
  unrelated program. We store the process's start time (`/proc/PID/stat` field 22, clock
  ticks since boot) and check it, and the command line the code knows the daemon runs;
- the state files may be edited by whoever can write the state folder: a pid and marker
  written there by hand never make another program "the daemon" (the marker checked is the
  code's), and state files are written without following links (`ftslurm.safefile`);
- a daemon may start children that outlive it (a wrapper script that forks the real program
  and exits, or setsid's): it leads a session of its own, and every process it starts
  inherits a tag in its environment (`TAG_ENV`, unique to that start, secret to its user),
  so stopping it, or a failed start, ends them all, even once it is gone itself. A process
  that cleared its environment and left the session (`setsid env -i ...`) is still found
  as a descendant (ppid links in /proc) of one found so;
- a state folder may be copied (a backup, an rsync): the tag names the state dir it was made
  for, so a copy's state never names the processes of the original;
- reading the state never signals anything (`lookup(clean_stale=False)`): only a command
  meant to stop or start a daemon ends what a dead one left running.

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
import secrets
import signal
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ftslurm import procs, runner, safefile
from ftslurm.procs import (  # noqa: F401 (ProcStat, proc_cmdline, proc_stat: re-exported)
    ProcId,
    ProcStat,
    exiting,
    proc_cmdline,
    proc_stat,
)
from ftslurm.wait import WaitTimeout, wait_for


def is_alive(
    pid: int,
    expected_cmdline_substring: str | None = None,
    start_ticks: int | None = None,
    *,
    expected_arg: str | None = None,
) -> bool:
    """True when `pid` is a live (not zombie) process that is still the one we started.

    `start_ticks` (from the state file) detects pid reuse (`procs.ProcId`);
    `expected_cmdline_substring` too, and `expected_arg`, an exact argument of the command line
    (the daemon's program: known to the code, never read from a file someone may edit), makes
    sure it is the daemon at all. None skips a check.
    """
    if not ProcId(pid, start_ticks).running():
        return False
    if expected_cmdline_substring or expected_arg:
        argv = procs.cmdline(pid)
        if not argv:
            # Right after fork/exec (vfork: the parent already runs) the new program's
            # arguments are not mapped yet and cmdline reads empty for a moment.
            argv = _cmdline_settled(pid)
            if not argv:  # the start time matched above: it is ours, unless the program must
                # be seen (a kernel thread has no command line and any start time)
                return start_ticks is not None and expected_arg is None
        if expected_cmdline_substring and expected_cmdline_substring not in " ".join(argv):
            return False
        if expected_arg and expected_arg not in argv:
            return False
    return True


def _cmdline_settled(pid: int, timeout: float = 0.5) -> list[str]:
    """The arguments of `pid` once they read non-empty; [] when it exits or `timeout` passes
    first."""

    def settled() -> tuple[list[str]] | None:
        argv = procs.cmdline(pid)
        return (argv,) if argv or not ProcId(pid).running() else None

    try:
        return wait_for(settled, timeout, 0.002, f"the command line of pid {pid}")[0]
    except WaitTimeout:
        return []


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

    def ended(timeout: float) -> bool:
        try:
            procs.wait_gone(alive, timeout, f"pid {pid} to exit")
            procs.wait_gone(lambda: exiting(pid), kill_timeout, f"pid {pid} to finish exiting")
        except WaitTimeout:
            return False
        _reap(pid)
        return True

    if not alive():
        return "not-running"
    procs.kill_pids([pid], signal.SIGTERM)
    if ended(grace):
        return "terminated"
    procs.kill_pids([pid], signal.SIGKILL)
    if ended(kill_timeout):
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
    code); otherwise liveness is read from /proc. Raises ProcessExited or WaitTimeout.
    The interval is short because readiness is on the user's critical path (`start` returns
    only then) and a Lighthouse is ready in a fraction of a second.
    """

    def ready() -> Any:
        code = poll() if poll is not None else None
        if code is not None or (poll is None and not is_alive(pid)):
            raise ProcessExited(pid, code)
        return cond()

    return wait_for(ready, timeout, interval, what)


@dataclass
class DaemonState:
    """What we know about a started daemon; written as JSON next to the pidfile.

    Only facts the kernel confirms count when it is read back (see `Daemon.owns`): the file
    may have been edited by anyone who can write the state folder."""

    name: str
    pid: int
    start_ticks: int | None
    started_at: float  # epoch seconds
    cmd: list[str]
    marker: str  # substring of the command line that identifies the program
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    tag: str = ""  # the value of TAG_ENV in the environment of its processes ("" unknown)

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.started_at)


@dataclass(frozen=True)
class Lookup:
    """Result of `Daemon.lookup`: the live state, or why there is none."""

    state: DaemonState | None  # live daemon
    # state of a dead / reused pid, or pid 0 when the files held none (removed when cleaned)
    stale: DaemonState | None = None
    # processes a dead daemon had left running (a --binary wrapper's children), ended
    ended: tuple[int, ...] = ()
    # those processes when the lookup was told not to clean (still running, not signalled)
    left: tuple[int, ...] = ()


# In the environment of every process a Daemon starts, inherited by all it starts in turn:
# how its processes are recognised once its leader is gone, or when they left its session
# (/proc/PID/environ: what the kernel keeps). Its value, `<state dir>/<name>#<random>`, is new
# at each start and kept in the state file (0o600): a file someone else wrote by hand cannot
# name it, so it cannot make a stop end the processes of another start, or of anyone else;
# and a copy of the state folder holds the original's path in it, which is not the copy's.
TAG_ENV = "FTSLURM_DAEMON"


class Daemon:
    """Files and lifecycle of one named daemon in one state directory."""

    def __init__(
        self, state_dir: str | Path, name: str, marker: str = "", program: str | None = None
    ):
        """`marker`: a substring of the daemon's command line. When given it is the identity
        check, whatever marker the state file holds (a file someone edited must not name
        another program's pid and marker and have it stopped); it also guards a bare pidfile
        left without state (pid reuse). `program`: an exact argument of the daemon's command
        line (its script: `python <program>`), checked too."""
        self.state_dir = Path(state_dir)
        self.name = name
        self.marker = marker
        self.program = program

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
        safefile.private_dir(self.state_dir)
        with os.fdopen(safefile.open_append(self.lockfile), "ab") as f:

            def take() -> bool:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    return False

            try:
                wait_for(take, timeout, 0.05, f"the lock {self.lockfile}")
            except WaitTimeout as e:
                raise WaitTimeout(f"{self.lockfile} is held by another process") from e
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def read_state(self) -> DaemonState | None:
        """The saved state, or None (no file, a link, unreadable: treated as no state)."""
        try:
            state = DaemonState(**json.loads(safefile.read_text(self.statefile) or ""))
            if _well_typed(state):
                state.marker = self.marker or state.marker  # the code's, never the file's
                return state
        except (ValueError, TypeError):
            pass
        # A pidfile without state (written by hand, or by an older version): a bare pid.
        pid = procs.read_pidfile(self.pidfile)
        if pid is None:
            return None
        return DaemonState(self.name, pid, None, 0.0, [], marker=self.marker)

    def owns(self, state: DaemonState) -> bool:
        """`state.pid` is this daemon, by what the kernel says about it: alive, the start time
        recorded at start, and the command line this Daemon runs (`marker`, `program`)."""
        _reap(state.pid)
        return is_alive(state.pid, state.marker or None, state.start_ticks,
                        expected_arg=self.program)  # fmt: skip

    def write_state(self, state: DaemonState) -> None:
        """Write state JSON then pidfile, each atomically (rename), so readers never see half."""
        safefile.private_dir(self.state_dir)
        safefile.write_atomic(self.statefile, json.dumps(asdict(state), indent=2) + "\n")
        safefile.write_atomic(self.pidfile, f"{state.pid}\n")

    def clear(self) -> None:
        """Remove pidfile and state (the log and the lock stay)."""
        for p in (self.pidfile, self.statefile):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def lookup(self, clean_stale: bool = True) -> Lookup:
        """The live daemon, if any. With `clean_stale`, a stale pidfile (dead, zombie, reused
        pid) is removed, and so are files that name no pid at all (cut short, edited by hand:
        `1e23`), which are stale with pid 0; what a dead daemon left running (its children:
        they carry its tag) is ended first, so its port is free and nothing of it runs
        unmanaged. Without it nothing is signalled or removed: what still runs is in `left`."""
        state = self.read_state()
        if state is None:
            if not any(os.path.lexists(p) for p in (self.pidfile, self.statefile)):
                return Lookup(None)
            if clean_stale:
                self.clear()
            return Lookup(None, stale=DaemonState(self.name, 0, None, 0.0, [], self.marker))
        if self.owns(state):
            return Lookup(state)
        if not clean_stale:
            return Lookup(None, stale=state, left=tuple(self._followers(state, False)))
        ended = tuple(self._end(state, grace=1.0)[1])
        self.clear()
        return Lookup(None, stale=state, ended=ended)

    def forget_stale(self) -> Lookup:
        """`lookup` for a command that only reads (a status): the files of a stale daemon of
        which nothing runs any more are removed; nothing is ever signalled, and the state of
        one whose processes still run stays, for a `stop` to end them."""
        found = self.lookup(clean_stale=False)
        if found.stale is not None and not found.left:
            self.clear()
        return found

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
        """Start `cmd` detached (the leader of a session of its own, tagged) with its output
        appended to the log; write pidfile + state.

        Returns (Popen, DaemonState, log_offset): log_offset is the log size before the start,
        so a caller can read only what this run wrote. The caller checks readiness.
        """
        safefile.private_dir(self.state_dir)
        if log_max_bytes is not None:
            rotate_log(self.logfile, log_max_bytes)
        offset = _regular_size(self.logfile)
        tag = f"{self._tag_prefix()}{secrets.token_hex(8)}"
        proc = runner.spawn(
            cmd, log_path=self.logfile, env=env, extra_env={**(extra_env or {}), TAG_ENV: tag},
            cwd=cwd, detach=True,
        )  # fmt: skip
        state = DaemonState(
            name=self.name,
            pid=proc.pid,
            start_ticks=_ticks(proc.pid),
            started_at=time.time(),
            cmd=[str(c) for c in cmd],
            marker=marker,
            log_path=str(self.logfile),
            extra=dict(extra or {}),
            tag=tag,
        )
        self.write_state(state)
        return proc, state, offset

    def stop(self, grace: float = 10.0) -> tuple[str, DaemonState | None]:
        """Stop the daemon and every process of its session (SIGTERM, then SIGKILL after
        `grace`); idempotent.

        Returns (outcome, state): outcome as in `ftslurm.daemon.stop`; "stale" when only a stale
        pidfile was found (and removed); "foreign" when its pid is alive but not this daemon
        (reused, or the file edited by hand): left alone, the state removed; "leftovers" when
        the daemon was dead but processes it had started were still running: ended.
        """
        found = self.lookup()
        if found.state is None:
            if found.stale is None:
                return "not-running", None
            if found.ended:
                return "leftovers", found.stale
            return ("foreign" if procs.pid_alive(found.stale.pid) else "stale"), found.stale
        outcome, _ = self._end(found.state, grace)
        self.clear()
        return outcome, found.state

    def abort(self, state: DaemonState, grace: float = 2.0) -> list[int]:
        """End a daemon whose start failed (it exited, or never got ready) and everything it
        started, even when it has exited itself (a wrapper that forked the real program and
        left); remove its state. Returns the pids that had to be ended."""
        _, ended = self._end(state, grace)
        self.clear()
        return ended

    def _tag_prefix(self) -> str:
        """What the tag of every start from this state dir begins with: its real path."""
        return f"{self.state_dir.resolve() / self.name}#"

    def _followers(self, state: DaemonState, leader: bool) -> list[int]:
        """The live processes the daemon started, other than itself: every one carrying the
        tag of its start (in its session or not: setsid keeps the environment) if the tag
        is of this state dir (a copied state names the original's), while the `leader` is
        alive (identity checked) every member of its session (it leads one of its own), and
        every descendant of these (`setsid env -i` drops both the session and the tag, not
        the parent link). None started before the daemon: that one is not of it."""
        roots: set[int] = set()
        prefix = self._tag_prefix()
        if state.tag.startswith(prefix) and len(state.tag) > len(prefix):
            roots.update(procs.pids_with_env(f"{TAG_ENV}={state.tag}"))
        if leader:
            roots.add(state.pid)
            roots.update(procs.session_pids(state.pid))
        found = procs.descendants(roots) if roots else []
        return sorted(p for p in found if p != state.pid and _not_older(p, state.start_ticks))

    def _end(
        self, state: DaemonState, grace: float, kill_timeout: float = 5.0
    ) -> tuple[str, list[int]]:
        """SIGTERM the daemon (when `owns` says it is) and its `_followers`, wait up to `grace`
        s for all of them to be gone, SIGKILL what is left. A process of its session that is
        exiting (a zombie whose threads still run: they hold its port) is waited for too.
        Returns (outcome as in `stop`, the pids signalled)."""
        seen: set[ProcId] = set()  # every process identified as ours, as first seen

        def targets() -> list[int]:
            leader = self.owns(state)
            pids = ([state.pid] if leader else []) + self._followers(state, leader)
            seen.update(p for p in map(ProcId.of, pids) if p is not None)
            return pids

        def busy() -> bool:
            targets()
            _reap(state.pid)
            return any(p.present() for p in seen) or any(
                _dying(p) for p in procs.session_pids(state.pid)
            )

        def gone(timeout: float) -> bool:
            try:
                procs.wait_gone(busy, timeout, f"the processes of {self.name} to exit")
            except WaitTimeout:
                return False
            return True

        first = targets()
        if not first:
            gone(kill_timeout)
            return "not-running", []
        procs.kill_pids(list(first), signal.SIGTERM)
        if gone(grace):
            return "terminated", _pids(seen)
        # every one seen, also those no longer found from the leader (it exited first)
        left = {*targets(), *(p.pid for p in seen if p.present())}
        procs.kill_pids(sorted(left), signal.SIGKILL)
        if gone(kill_timeout):
            return "killed", _pids(seen)
        still = _pids(p for p in seen if p.present())
        if not still:  # only a dying process of the session, not one we signalled
            return "killed", _pids(seen)
        raise RuntimeError(f"pid(s) {still} survived SIGKILL for {kill_timeout:g} s "
                           "(uninterruptible?)")  # fmt: skip


def _pids(found: Iterable[ProcId]) -> list[int]:
    return sorted({p.pid for p in found})


def _not_older(pid: int, start_ticks: int | None) -> bool:
    """`pid` is alive and started no earlier than `start_ticks` (None: unknown, any)."""
    now = ProcId.of(pid)
    if now is None or not now.running():
        return False
    return start_ticks is None or (now.start_ticks or 0) >= start_ticks


def _dying(pid: int) -> bool:
    """`pid` is a zombie whose other threads are still running their exit."""
    return ProcId(pid).present() and not ProcId(pid).running()


def _ticks(pid: int) -> int | None:
    """The start time that identifies `pid` in a state file (None: it is gone already)."""
    found = ProcId.of(pid)
    return found.start_ticks if found is not None else None


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
        and isinstance(state.tag, str)
    )




def _owner(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"uid {uid}"


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & 0o022)


def unsafe_state_dir(path: Path) -> str | None:
    """Why this user must not run a daemon from the existing folder `path` (None: it may).

    A daemon's program is written into its state dir and run from there, and its state is
    trusted as this user's: so the folder must be this user's and no one else may write it
    (a user who can plant or rename a file in it can have their program run, as root under
    sudo). As root, the folders above it must be root's too, or sticky like /tmp: whoever
    owns one could rename the state dir away and put their own in its place."""
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        return f"{path} belongs to {_owner(st.st_uid)}, not to you"
    if _writable_by_others(st):
        return f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
    if os.geteuid() == 0:
        for parent in path.parents:
            pst = os.stat(parent)
            if pst.st_uid != 0:
                return (f"{parent}, a folder above it, belongs to {_owner(pst.st_uid)}, who "
                        "could put another folder in its place")
            if _writable_by_others(pst) and not pst.st_mode & stat.S_ISVTX:
                return (f"{parent}, a folder above it, can be written by other users, who "
                        "could put another folder in its place")
    return None


def unsafe_program(path: str | Path) -> str | None:
    """Why the executable `path` must not be run (None: it may): it, or the folder it is in,
    belongs to a user other than root and this one, or another user can write it (and so
    replace what runs). Links are followed: the check is of the real file."""
    real = Path(path).resolve()
    for item in (real, real.parent):
        st = item.stat()
        if st.st_uid not in (0, os.geteuid()):
            return f"{item} belongs to {_owner(st.st_uid)}"
        if _writable_by_others(st):
            return f"other users can write {item}"
    return None


def rotate_log(path: Path, max_bytes: int) -> bool:
    """Rename `path` to `path.1` (replacing an older `.1`) when it is bigger than `max_bytes`.

    Called only at start, when no process writes the file, so a rename is safe. Returns
    whether it rotated. Only a regular file is rotated: a link planted at the log's name stays
    for the start to refuse (see `safefile.open_append`).
    """
    if _regular_size(path) <= max_bytes:
        return False
    os.replace(path, path.with_name(path.name + ".1"))
    return True


def _regular_size(path: Path) -> int:
    """Size of `path` if it is a regular file (a link is not followed), else 0."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def tail_lines(path: Path, n: int, block: int = 65536) -> list[str]:
    """The last `n` lines of a log, the one being written included (`logtail.read_tail`)."""
    from ftslurm.logtail import read_tail

    try:
        return read_tail(path, max(n, 0), block, partial=True)[0]
    except FileNotFoundError:
        return []
