"""The process toolkit: facts read from /proc (liveness, zombie-aware; pidfiles; namespaces),
one identity (`ProcId`: "is this still the process we saw?"), one stop (`kill_pids`, the only
sender of signals besides `runner` for its own children) and the waits on processes (through
`ftslurm.wait`, so a timeout is always a `WaitTimeout`).

Why not `kill -0`: in containers PID 1 reaps lazily, so a dead daemon lingers as a zombie and
`kill -0` says it is alive. Stopping by pid needs to know the truth.
"""

from __future__ import annotations

import math
import os
import select
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ftslurm.safefile import read_text
from ftslurm.wait import wait_for


@dataclass(frozen=True)
class ProcStat:
    """The fields of `/proc/PID/stat` we need."""

    state: str  # R, S, D, Z, T, ...
    ppid: int  # field 4: the parent (init or a subreaper once the first parent died)
    start_ticks: int  # field 22: start time after boot, in clock ticks


def proc_stat(pid: int) -> ProcStat | None:
    """`/proc/PID/stat` of `pid`, or None when there is no such process.

    The command name (field 2) is in parentheses and may itself contain spaces and `)`, so we
    split after the LAST `)`.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    rest = raw.rpartition(")")[2].split()
    if len(rest) < 20:
        return None
    return ProcStat(state=rest[0], ppid=int(rest[1]), start_ticks=int(rest[19]))


_DEAD = ("Z", "X", "x")  # a zombie or a dead task: exited, whatever kill(pid, 0) says


@dataclass(frozen=True)
class ProcId:
    """A process as it was first seen: its pid and its start time (`/proc/PID/stat` field 22).

    Why both: a pid is reused once its process is reaped, so "is pid N still running" can name
    an unrelated program (after a reboot, or a long time); a pid and its start time name one
    process for as long as the machine runs. `start_ticks` None: unknown (a pidfile that holds
    only a pid), and then only the pid is checked. Daemon pidfiles, the stop of a daemon's
    processes and the attempt guard all ask this one question through it."""

    pid: int
    start_ticks: int | None = None

    @classmethod
    def of(cls, pid: int) -> ProcId | None:
        """`pid` as it is now, or None when there is no such process."""
        st = proc_stat(pid) if pid > 0 else None
        return None if st is None else cls(pid, st.start_ticks)

    def _stat(self) -> ProcStat | None:
        """The process's stat if `pid` is still this process (any state), else None."""
        st = proc_stat(self.pid) if self.pid > 0 else None
        if st is None or (self.start_ticks is not None and st.start_ticks != self.start_ticks):
            return None
        return st

    def running(self) -> bool:
        """Still this process, and not exited (a zombie has exited)."""
        st = self._stat()
        return st is not None and st.state not in _DEAD

    def present(self) -> bool:
        """Still this process, running or still exiting: a zombie whose other threads run
        their exit still holds its sockets and files (see `exiting`)."""
        st = self._stat()
        return st is not None and (st.state not in _DEAD or exiting(self.pid))


def exiting(pid: int) -> bool:
    """True while any thread of `pid` is still running its exit.

    A multi-threaded program (the Lighthouse is a tokio server) whose main thread is killed
    first shows as a zombie (`Z`) while its other threads still hold its sockets and files:
    "dead" by `ProcId.running`, yet its port is not free yet. Ask after identity was checked
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


def proc_cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ('' when unreadable or gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def pid_alive(pid: int | None) -> bool:
    """True if `pid` exists and is not a zombie (for pid-reuse checks: `ProcId`)."""
    return pid is not None and ProcId(pid).running()


def read_pidfile(path: Path) -> int | None:
    """The pid in `path`, or None: no file, unreadable, not UTF-8, not a pid in range, a link
    or not a regular file (a folder, a FIFO: `safefile.read_text`)."""
    text = read_text(path, limit=4096)
    return valid_pid(text) if text is not None else None


# Linux's largest pid_max (2**22): a bigger number in a pidfile is garbage, and os.kill() on
# it raises OverflowError instead of "no such process"
PID_MAX = 4_194_304


def valid_pid(value: object) -> int | None:
    """A pid read from a file someone may have edited: an int in 1..PID_MAX, else None."""
    if isinstance(value, str):
        value = value.strip()
        if not (value.isascii() and value.isdigit() and len(value) <= 7):
            return None
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= PID_MAX else None


def cmdline(pid: int) -> list[str]:
    """The arguments of `pid` ([] when unreadable or gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def pids_with_env(entry: str) -> list[int]:
    """Every process whose environment holds `entry` (`NAME=value`), among those whose
    environment we may read (our own; all of them as root)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and environ_has(int(e), entry)]


def environ_has(pid: int, entry: str) -> bool:
    """`entry` (`NAME=value`) is in the environment `pid` was started with. Readable only
    for our own processes (or as root): False otherwise, and for a zombie."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return entry.encode() in raw.split(b"\0")


def uts_ns(pid: int) -> str | None:
    """The UTS namespace id of `pid` (e.g. 'uts:[4026532301]'), None if unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return None


def pids_in_uts_ns(ns: str) -> list[int]:
    """Every live pid whose UTS namespace is `ns`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and uts_ns(int(entry)) == ns:
            out.append(int(entry))
    return out


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to each of `pids`; one that is gone already is skipped. The one place that
    signals a process by pid: callers check identity first (`ProcId`, `daemon.is_alive`)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _all_stat_fields() -> Iterator[tuple[int, list[str]]]:
    """(pid, the /proc/PID/stat fields after the command name: state, ppid, pgrp, session,
    ...) of every process, in one pass over /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        yield int(entry), stat[stat.rfind(")") + 2 :].split()


def children_map() -> dict[int, list[int]]:
    """ppid -> child pids, for every live process (one pass over /proc)."""
    out: dict[int, list[int]] = {}
    for pid, fields in _all_stat_fields():
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            out.setdefault(int(fields[1]), []).append(pid)
    return out


def session_pids(sid: int) -> list[int]:
    """Every process (zombies too) whose session id is `sid`: a detached daemon is the leader
    of its own session, so these are it and the children it started (unless they setsid)."""
    return [pid for pid, fields in _all_stat_fields() if len(fields) > 3 and fields[3] == str(sid)]


def process_tree(pid: int) -> list[int]:
    """`pid` and all its live descendants, parents first. Unlike a process group this also
    finds torchrun's worker, which torchrun starts in a session of its own."""
    kids = children_map()
    order, todo = [], [pid]
    while todo:
        p = todo.pop()
        if pid_alive(p):
            order.append(p)
        todo.extend(kids.get(p, []))
    return order


def descendants(roots: Iterable[int]) -> list[int]:
    """The live processes among `roots` and all their live descendants, in one pass over
    /proc. Why: a child that left its parent's session and cleared its environment
    (`setsid env -i ...`) is still linked to its parent (or, once that died, to the nearest
    subreaper that adopted it)."""
    kids = children_map()
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(kids.get(p, []))
    return sorted(p for p in seen if pid_alive(p))


def any_stopped(pids: Iterable[int]) -> bool:
    """Whether one of `pids` is stopped (SIGSTOP: `T`; a ptrace stop: `t`): direct evidence
    that it does not run, which a late heartbeat or a slow step is not."""
    for pid in pids:
        st = proc_stat(pid)
        if st is not None and st.state in ("T", "t"):
            return True
    return False


def descends_from(ancestor: int, pid: int) -> bool:
    """`ancestor` is the parent, grandparent, ... of `pid` (walking ppid links in /proc).

    Why: a process whose parent died is adopted by init or a subreaper, so "my parent is
    still the one I started under" can only be checked against a pid known from before."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        st = proc_stat(pid)
        if st is None:
            return False
        pid = st.ppid
        if pid == ancestor:
            return True
    return False


def wait_gone(
    alive: Callable[[], bool], timeout: float, what: str = "the processes to exit"
) -> None:
    """Wait until `alive()` is false; `WaitTimeout` after `timeout` seconds. Looks back off
    from 10 to 100 ms: a killed process is usually gone within milliseconds."""
    wait_for(lambda: not alive(), timeout, 0.01, what, max_interval=0.1)


def open_pidfd(pid: int) -> int | None:
    """A pidfd of `pid` (readable once it has exited; never another process, even if the pid
    is reused), or None where the kernel has none (before Linux 5.3). Raises
    ProcessLookupError when `pid` is gone already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        return None


def wait_exited(proc: ProcId, pidfd: int | None) -> None:
    """Block until `proc` has exited, however long that takes: on its pidfd when there is one,
    else by polling its identity (every 0.5 s: nothing waits on the answer but a cleanup)."""
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the process has exited
        return
    wait_for(lambda: not proc.running(), math.inf, 0.5, f"pid {proc.pid} to exit")


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies (PR_SET_PDEATHSIG);
    False where that cannot be set (not Linux). The parent may have died just before: callers
    compare `os.getppid()` with its value from before the call.

    Why: torchrun starts its worker in a session of its own, so a SIGKILLed torchrun (an OOM
    kill, a `kill -9` on the wrong pid) would leave the worker training, holding its devices
    and its place in the quorum, wherever the job step's processes are not tracked by cgroup.
    """
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# --------------------------------------------------------------------------------------------
# ptrace: one thread stopped while the others of its process run on (`simulate-failure --mode
# stall`: a training thread stuck in a kernel or an NCCL call while torchft's heartbeat
# threads go on; a SIGSTOP stops them all). The thread that calls `ptrace_stop` is the tracer
# and must make every later call for that thread; when the tracer exits, the kernel detaches
# and the thread runs on, so the hold lasts only as long as the process that holds it.

PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17  # linux/ptrace.h
WAIT_ALL = 0x40000000  # waitpid's __WALL: a traced thread is reported to its tracer with it
CAP_SYS_PTRACE = 19  # its bit in /proc/PID/status CapEff
YAMA_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
_libc_ptrace: Callable[..., int] | None = None


def _ptrace(request: int, tid: int, data: int = 0) -> None:
    """ptrace(2) through libc; an OSError with the errno and the request on failure."""
    global _libc_ptrace
    import ctypes

    if _libc_ptrace is None:
        fn = ctypes.CDLL(None, use_errno=True).ptrace
        fn.restype = ctypes.c_long
        fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        _libc_ptrace = fn
    ctypes.set_errno(0)
    if _libc_ptrace(request, tid, None, data or None) == -1:
        err = ctypes.get_errno()
        names = {PTRACE_SEIZE: "PTRACE_SEIZE", PTRACE_INTERRUPT: "PTRACE_INTERRUPT",
                 PTRACE_DETACH: "PTRACE_DETACH"}  # fmt: skip
        raise OSError(err, f"{names.get(request, request)} of thread {tid}: {os.strerror(err)}")


@dataclass(frozen=True)
class PtraceRights:
    """What this process may ptrace: Yama's scope (None: no Yama, the classic rules: the same
    user, or CAP_SYS_PTRACE), CAP_SYS_PTRACE in its effective set, its effective uid."""

    scope: int | None
    cap: bool
    euid: int

    @classmethod
    def here(cls) -> PtraceRights:
        try:
            text = YAMA_SCOPE.read_text().strip()
        except OSError:
            text = ""
        return cls(int(text) if text.isdigit() else None, has_capability(CAP_SYS_PTRACE),
                   os.geteuid())  # fmt: skip

    def refusal(self, pid: int, uids: tuple[int, ...], descendant: bool) -> str | None:
        """Why ptrace of `pid` (run by `uids`: real, effective, saved, fs; `descendant`: of this
        process) cannot work here, in one line; None when it may."""
        if self.scope is not None and self.scope >= 3:
            return ("ptrace is switched off on this host (kernel.yama.ptrace_scope=3, until a "
                    "reboot)")  # fmt: skip
        if self.cap:
            return None
        fix = "run as root (sudo), which has CAP_SYS_PTRACE"
        if self.scope == 2:
            return f"kernel.yama.ptrace_scope=2: only CAP_SYS_PTRACE may ptrace: {fix}"
        if self.scope == 1 and not descendant:
            return (f"kernel.yama.ptrace_scope=1: pid {pid} is no descendant of this process, "
                    f"so ptrace needs CAP_SYS_PTRACE: {fix}, or set the scope to 0")  # fmt: skip
        if any(u != self.euid for u in uids):
            return (f"pid {pid} runs as uid {uids[0] if uids else '?'}, this process as "
                    f"{self.euid}: ptrace of another user's process needs CAP_SYS_PTRACE: {fix}")
        return None


def has_capability(bit: int) -> bool:
    """Whether capability `bit` is in this process's effective set (/proc/self/status CapEff)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return os.geteuid() == 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return os.geteuid() == 0


def proc_uids(pid: int) -> tuple[int, ...]:
    """The uids of `pid` (real, effective, saved, fs; () when unreadable or gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ()
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return tuple(int(u) for u in line.split()[1:])
    return ()


def ptrace_refusal(pids: Iterable[int], rights: PtraceRights | None = None) -> str | None:
    """Why this process cannot ptrace one of `pids`, in one line (the first such); None when
    it may stop each of them. Checked before anything is stopped."""
    rights = rights or PtraceRights.here()
    for pid in pids:
        why = rights.refusal(pid, proc_uids(pid), descends_from(os.getpid(), pid))
        if why:
            return why
    return None


@dataclass
class ThreadStop:
    """A thread held stopped by this thread's ptrace (`ptrace_stop`), until `ptrace_release`."""

    tid: int
    stopped: bool = False  # its stop was reported (waitpid): it runs no instruction now
    exited: bool = False  # it exited while held; reaped here, so its parent learns it at once
    resume_sig: int = 0  # a signal it was taking when it stopped: handed back on release


def ptrace_poll(stop: ThreadStop) -> ThreadStop:
    """Collect what waitpid has for the held thread: its stop, or its exit. Why poll while
    holding: the exit of a traced thread goes to the tracer first, and its parent (torchrun)
    learns of it only once the tracer has collected it."""
    while not stop.exited:
        try:
            pid, status = os.waitpid(stop.tid, os.WNOHANG | WAIT_ALL)
        except ChildProcessError:  # not ours to wait for any more: gone, or never attached
            stop.exited = not ProcId(stop.tid).running()
            return stop
        if pid == 0:
            return stop
        if os.WIFSTOPPED(status):
            stop.stopped = True
            if status >> 16 == 0:  # a signal-delivery stop, not PTRACE_INTERRUPT's event stop
                stop.resume_sig = os.WSTOPSIG(status)
        elif os.WIFEXITED(status) or os.WIFSIGNALED(status):
            stop.exited = True
    return stop


def ptrace_stop(tid: int, timeout: float = 5.0) -> ThreadStop | None:
    """Stop thread `tid` alone (PTRACE_SEIZE, then PTRACE_INTERRUPT): the other threads of
    its process run on. None when it is gone already; OSError when ptrace refuses (EPERM:
    see `ptrace_refusal`). Waits up to `timeout` for the stop to be reported: a thread inside
    an uninterruptible call stops only when it leaves it, and is held from then on."""
    try:
        _ptrace(PTRACE_SEIZE, tid)
    except ProcessLookupError:
        return None
    stop = ThreadStop(tid)
    try:
        _ptrace(PTRACE_INTERRUPT, tid)
    except ProcessLookupError:  # it exited after the seize: collect that for its parent
        return ptrace_poll(stop)
    try:
        wait_for(lambda: ptrace_poll(stop).stopped or stop.exited, timeout, 0.001,
                 f"thread {tid} to stop", max_interval=0.05)  # fmt: skip
    except TimeoutError:
        pass  # still in the kernel: the interrupt stops it when it comes out
    return stop


def ptrace_release(stop: ThreadStop, timeout: float = 5.0) -> bool:
    """Let the held thread run on (PTRACE_DETACH). True: it runs again; False: it exited
    while held (a watchdog killed its process: that is what a stall may lead to)."""
    ptrace_poll(stop)
    if not stop.exited and not stop.stopped:  # a detach needs the thread in its stop
        try:
            wait_for(lambda: ptrace_poll(stop).stopped or stop.exited, timeout, 0.01,
                     f"thread {stop.tid} to stop before its detach")  # fmt: skip
        except TimeoutError:
            pass  # the detach below fails, and says so
    if stop.exited:
        return False
    try:
        _ptrace(PTRACE_DETACH, stop.tid, stop.resume_sig)
    except ProcessLookupError:
        if not ProcId(stop.tid).running():
            ptrace_poll(stop)
            stop.exited = True
            return False
        raise
    return True


def environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with ({} when unreadable: another user's process
    without root, or gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out
