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
"""

import importlib.util
import os
import signal
import sys
from pathlib import Path


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
    """Run the Lighthouse; in a child when its log is capped (this process writes the log) or
    when it is a `binary` (FTSLURM_LIGHTHOUSE_BINARY: a --binary of `ftslurm lighthouse
    start`): this process, whose command line names its state directory, stays its parent,
    so `stop` and `status` recognise it by what the kernel says (never by a state file).
    The child dies with this process (PR_SET_PDEATHSIG); signals are passed on to it."""
    log = os.environ.pop("FTSLURM_LIGHTHOUSE_LOG", "")
    cap = int(os.environ.pop("FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES", "0") or 0)
    binary = os.environ.pop("FTSLURM_LIGHTHOUSE_BINARY", "")
    capped = bool(log) and cap > 0
    if not capped and not binary:
        return lighthouse()
    r, w = os.pipe() if capped else (-1, -1)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        if capped:
            os.close(r)
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.close(w)
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: die with the writer
        if os.getppid() != parent:
            os._exit(1)
        sys.exit(run(binary))

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except OSError:  # already reaped
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    if capped:
        os.close(w)
        copy_capped(r, log, cap)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def copy_capped(r: int, log: str, cap: int) -> None:
    """Copy the child's output from pipe `r` to the log (fd 1) until it closes, renaming the
    log to .1 at a line end whenever it would pass `cap` bytes."""
    size = os.fstat(1).st_size
    while True:
        data = os.read(r, 1 << 16)
        if not data:
            break
        cut = data.rfind(b"\n") + 1
        if size + len(data) > cap and cut:
            write_all(data[:cut])
            rotate(log)
            write_all(data[cut:])
            size = len(data) - cut
        else:
            write_all(data)
            size += len(data)


if __name__ == "__main__":
    sys.exit(main())
