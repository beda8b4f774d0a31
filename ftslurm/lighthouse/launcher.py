"""The program that runs torchft's own Lighthouse entry point, fast, with a capped log.

It calls torchft._torchft.lighthouse_main -- the function the `torchft_lighthouse` console
script calls -- loading the compiled module directly, so the torchft package __init__ (which
imports torch, ~3 s) is skipped. Same code, same arguments (read from argv by the Rust side,
so this program takes none of its own).

Standard library only: `ftslurm lighthouse start` copies this file into the state directory
as `torchft_lighthouse` and runs it there with this interpreter, so that the state dir's path
is in the process's command line (how a Lighthouse is told to be that dir's).

With FTSLURM_LIGHTHOUSE_BINARY set (`--binary`), it runs that executable instead, as its
child (see `main`). Started with FTSLURM_LIGHTHOUSE_LOG set, the Lighthouse runs in a child
whose output comes through a pipe; this process appends it to the log and, when the log passes
FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES, renames it to <log>.1 (replacing the older one) at a line
end and goes on in a new file: a Lighthouse left running for weeks keeps a bounded log (at
most about twice the cap) whose two files hold the newest lines, whole.
(lighthouse_main holds the GIL while it runs, so a thread beside it could not do this.)
On its way to the log the output goes through ftslurm's LighthouseLogFilter (logfilter.py,
standard library only, copied beside this file): the quorum lines torchft repeats every round
are folded (with 1,024 replicas, from ~660 KB a round to a few KB), the first quorum line of
each new log file is whole; FTSLURM_LOG_FILTER=0 (`ftslurm lighthouse start` passes 1 or 0)
copies the output as it comes.

While it runs as the Lighthouse's parent, this process also keeps the newest /status page in
<state>/status.html (`snapshot_pages`), its mtime the moment the read began: with 1,024
replicas the page waits seconds behind torchft's quorum lock, and `ftslurm lighthouse status`,
`status` and `metrics` read this copy (with its age) instead of waiting for it themselves.
"""

import http.client
import importlib.util
import json
import os
import select
import signal
import sys
import threading
import time
import urllib.parse
from pathlib import Path

SNAPSHOT = "status.html"  # the newest /status page, in the state dir (see `snapshot_pages`)
SNAPSHOT_PAUSE_S = 1.0  # between the end of one read and the next
SNAPSHOT_READ_S = 60.0  # a read's limit (the page of 1,024 replicas under load: seconds)
SNAPSHOT_MAX_BYTES = 16 << 20  # status_page.MAX_ANSWER: 10,000 replicas' page is ~5 MiB
STATE_FILE = "lighthouse.json"  # the daemon's state (ftslurm.daemon), with the probe URL


def torchft_extension() -> Path | None:
    """Path of torchft's compiled `_torchft` module, found without importing torchft."""
    try:
        spec = importlib.util.find_spec("torchft")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        for cand in sorted(Path(loc).glob("_torchft*.so")):
            return cand
    return None


def lighthouse() -> int | None:
    ext = torchft_extension()
    if ext is None:
        sys.exit("torchft_lighthouse: torchft's compiled module (_torchft*.so) not found")
    spec = importlib.util.spec_from_file_location("torchft._torchft", ext)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.lighthouse_main()


def log_filter(switch: str) -> "GuardedFilter | None":
    """The Lighthouse's log filter, or None: switched off (`switch`, FTSLURM_LOG_FILTER, is
    0, false, no or off), or logfilter.py neither beside this file nor in an importable
    ftslurm (the log is then copied as it comes)."""
    if switch.strip().lower() in ("0", "false", "no", "off"):
        return None
    module = _logfilter_module()
    return GuardedFilter(module.LighthouseLogFilter()) if module is not None else None


class GuardedFilter:
    """A LighthouseLogFilter that is dropped at its first error, the output then copied as it
    comes (a partial line it held may be lost): the Lighthouse must never die of its log."""

    def __init__(self, filt) -> None:
        self.filt = filt

    def feed(self, data: bytes) -> bytes:
        try:
            return self.filt.feed(data) if self.filt is not None else data
        except Exception:
            self.filt = None
            return data

    def flush(self) -> bytes:
        try:
            return self.filt.flush() if self.filt is not None else b""
        except Exception:
            self.filt = None
            return b""

    def reset(self) -> None:
        try:
            if self.filt is not None:
                self.filt.reset()
        except Exception:
            self.filt = None


def _logfilter_module():
    """logfilter.py: the copy beside this file first (written by the ftslurm that started this
    Lighthouse, so it matches; an ftslurm on the path may be another checkout's), else
    ftslurm's own (this file run from the package)."""
    beside = Path(__file__).with_name("logfilter.py")
    if beside.is_file():
        try:
            spec = importlib.util.spec_from_file_location("ftslurm_logfilter", beside)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except Exception:  # a damaged copy: ftslurm's, else none
            pass
    try:
        from ftslurm import logfilter
    except ImportError:
        return None
    return logfilter


def probe_url(state_dir: Path) -> str | None:
    """The /status URL `ftslurm lighthouse start` recorded for this process once the
    Lighthouse answered (None before that, or when the state is another process's)."""
    try:
        state = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("pid") != os.getpid():
        return None
    url = (state.get("extra") or {}).get("probe_url")
    return url if isinstance(url, str) and url.startswith("http://") else None


def read_status(url: str) -> bytes | None:
    """The body of a 200 answer to GET `url`, or None (no answer, another code, too big)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80,
                                      timeout=SNAPSHOT_READ_S)  # fmt: skip
    try:
        conn.request("GET", parts.path or "/")
        with conn.getresponse() as r:
            body = r.read(SNAPSHOT_MAX_BYTES + 1)
            ok = r.status == 200 and len(body) <= SNAPSHOT_MAX_BYTES
            return body if ok else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def write_snapshot(state_dir: Path, body: bytes, began: float) -> None:
    """`body` as <state>/status.html, whole or not at all (a reader never sees half), its
    mtime `began`; made with O_EXCL and O_NOFOLLOW like the log (`rotate`)."""
    tmp = state_dir / (SNAPSHOT + ".new")
    try:
        os.unlink(tmp)
    except OSError:
        pass
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.utime(tmp, (began, began))
        os.replace(tmp, state_dir / SNAPSHOT)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def snapshot_pause(raw: str) -> float | None:
    """FTSLURM_LIGHTHOUSE_SNAPSHOT_S (`ftslurm lighthouse start` passes the registry's value)
    as the pause between reads; None: no copy (0). Unset or unreadable: the default."""
    try:
        pause = float(raw) if raw.strip() else SNAPSHOT_PAUSE_S
    except ValueError:
        pause = SNAPSHOT_PAUSE_S
    if pause != pause or pause < 0:  # NaN, negative
        pause = SNAPSHOT_PAUSE_S
    return pause if pause > 0 else None


def snapshot_pages(state_dir: Path, pause_s: float = SNAPSHOT_PAUSE_S) -> None:
    """Read the Lighthouse's /status page, one read at a time with `pause_s` between them,
    and keep the newest whole 200 answer in <state>/status.html (a thread, for as long as
    this process runs). Why: every quorum request runs torchft's whole quorum check under
    one lock, so with 1,024 replicas a read of the page waits seconds behind a round; a
    person's `status` reads this copy, and its age, at once. Never raises: the Lighthouse
    must not die of its snapshot (a failed read leaves the last copy, which ages)."""
    url = None
    while True:
        try:
            url = url or probe_url(state_dir)
            if url is not None:
                began = time.time()
                body = read_status(url)
                if body is not None:
                    write_snapshot(state_dir, body, began)
        except Exception:
            pass
        time.sleep(pause_s)


def write_all(data: bytes) -> None:
    while data:
        data = data[os.write(1, data) :]


def rotate(log: str) -> None:
    """Rename the log to .1 and go on in a new one; on any error go on in the same file (the
    Lighthouse must never die of its log). The new file is made with O_EXCL and O_NOFOLLOW
    (ftslurm.safefile's rule, written out here: this file imports nothing of ftslurm), so a
    link planted at `<log>.new` is never written through."""
    new = log + ".new"
    try:
        os.unlink(new)  # a leftover of a failed try (or a planted name): never opened
    except OSError:
        pass
    try:
        fd = os.open(new, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600)  # fmt: skip
    except OSError:
        return
    try:
        os.replace(log, log + ".1")
        os.replace(new, log)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    except OSError:
        try:
            os.unlink(new)  # not left beside the log for every failed try
        except OSError:
            pass
    finally:
        os.close(fd)


def run(binary: str) -> int | None:
    """The Lighthouse itself, in this process: `binary` (exec'd with our arguments) if given,
    else torchft's, loaded directly."""
    if binary:
        try:
            os.execv(binary, [binary, *sys.argv[1:]])
        except OSError as e:
            sys.exit(f"torchft_lighthouse: cannot run {binary}: {e.strerror}")
    return lighthouse()


def main() -> int | None:
    """Run the Lighthouse; in a child when its log is capped or filtered (this process writes
    the log) or when it is a `binary` (FTSLURM_LIGHTHOUSE_BINARY: a --binary of `ftslurm
    lighthouse start`): this process, whose command line names its state directory, stays
    its parent, so `stop` and `status` recognise it by what the kernel says (never by a
    state file).
    The child dies with this process (PR_SET_PDEATHSIG); signals are passed on to it.

    This process is a child subreaper: a process the binary starts that leaves the session,
    clears its environment and loses its parent (`(setsid env -i prog &)`) is adopted here,
    not by init, so `stop` still finds it among this process's descendants; this process
    runs until no child is left."""
    log = os.environ.pop("FTSLURM_LIGHTHOUSE_LOG", "")
    cap = int(os.environ.pop("FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES", "0") or 0)
    binary = os.environ.pop("FTSLURM_LIGHTHOUSE_BINARY", "")
    filt = log_filter(os.environ.pop("FTSLURM_LOG_FILTER", "1")) if log else None
    # the output comes through this process when it caps or filters the log
    piped = bool(log) and (cap > 0 or filt is not None)
    if not piped and not binary:
        return lighthouse()
    import ctypes

    libc = ctypes.CDLL(None)
    libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER (not inherited by the children)
    r, w = os.pipe() if piped else (-1, -1)
    # SIGCHLD wakes the loop below (select on this pipe) when the Lighthouse exits
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)
        if piped:
            os.close(r)
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.close(w)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: die with the writer
        if os.getppid() != parent:
            os._exit(1)
        sys.exit(run(binary))

    running = [pid]  # emptied once it is reaped: its pid may then be another process's

    def forward(signum: int, _frame: object) -> None:
        for child in running:
            try:
                os.kill(child, signum)
            except OSError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    if piped:
        os.close(w)
    pause = snapshot_pause(os.environ.pop("FTSLURM_LIGHTHOUSE_SNAPSHOT_S", ""))
    if pause is not None:
        threading.Thread(target=snapshot_pages, args=(Path(__file__).resolve().parent, pause),
                         name="status-snapshot", daemon=True).start()  # fmt: skip
    status = serve(running, r, log, cap, wake_r, filt)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def reap(pid: int, status: int | None) -> tuple[int | None, bool]:
    """Reap every child that has exited (the Lighthouse, and processes adopted as a
    subreaper): (the wait status of `pid` once it was reaped, else `status`; whether any
    child is left)."""
    while True:
        try:
            child, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if child == 0:
            return status, True
        if child == pid:
            status = st


def drain(fd: int) -> bytes:
    """What can be read from the non-blocking `fd` now (b"" at its end)."""
    out = b""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


def serve(running: list[int], r: int, log: str, cap: int, wake: int,
          filt: "GuardedFilter | None" = None) -> int:  # fmt: skip
    """Copy the Lighthouse's output from pipe `r` (-1: none) to the log (through `filt`, a
    LighthouseLogFilter, if any), and reap children, until the pipe is closed and no child is
    left: the Lighthouse, or what it started and left behind (adopted here), for as long as
    any of it runs, this process is there to be found and stopped by its state dir.
    `running` holds the Lighthouse's pid until it is reaped. Returns the Lighthouse's wait
    status."""
    pid = running[0]
    size = os.fstat(1).st_size if r >= 0 else 0
    status: int | None = None
    while True:
        status, children = reap(pid, status)
        if status is not None:
            running.clear()
        if not children:
            if r >= 0:  # nothing of ours holds the pipe any more: what is left in it
                os.set_blocking(r, False)
                copy_capped(drain(r), size, log, cap, filt)
                if filt is not None:  # its held partial last line
                    write_all(filt.flush())
            return status if status is not None else 0
        fds = [wake] + ([r] if r >= 0 else [])
        ready = select.select(fds, [], [])[0]
        if wake in ready:
            drain(wake)
        if r in ready:
            data = os.read(r, 1 << 16)
            if data:
                size = copy_capped(data, size, log, cap, filt)
            else:  # every writer closed it: only the children's exits are left to wait for
                if filt is not None:  # its held partial last line
                    write_all(filt.flush())
                os.close(r)
                r = -1


def copy_capped(data: bytes, size: int, log: str, cap: int,
                filt: "GuardedFilter | None" = None) -> int:  # fmt: skip
    """Append `data`, the Lighthouse's output, to the log (fd 1) of `size` bytes, through
    `filt` (a LighthouseLogFilter) if given, renaming it to .1 at a line end when it would
    pass `cap` bytes (0: never); the log's new size. After a rotation the filter starts
    afresh, so that the new file's first quorum line is whole (a reader of that file alone
    finds the quorum in it)."""
    if filt is not None:
        data = filt.feed(data)
    cut = data.rfind(b"\n") + 1
    if cap > 0 and size + len(data) > cap and cut:
        write_all(data[:cut])
        rotate(log)
        if filt is not None:
            filt.reset()
        write_all(data[cut:])
        return len(data) - cut
    write_all(data)
    return size + len(data)


if __name__ == "__main__":
    sys.exit(main())
