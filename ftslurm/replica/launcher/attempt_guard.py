"""`python -m ftslurm.replica.launcher.attempt_guard <launcher pid> <folder>`: remove an attempt's
temporary folder as soon as its launcher is gone, however it ended.

Why a process of its own: the launcher removes its folder when it returns, but SIGKILL (the
local demo's teardown and its injected failures, an OOM kill) ends it without any cleanup:
without a guard, every killed attempt would leave one `ftslurm-attempt-*` folder until a later
attempt happens to start on the same host (job.remove_stale_attempt_dirs, the fallback for a
node that went down with its guard).

How: the guard opens a pidfd of the launcher while the launcher waits for it (so the pid is
the launcher's, never a reused one; on a kernel without pidfds, its pid and start time:
`procs.ProcId`), then forks away and the launcher's child exits: the guard is no descendant
of the launcher, and a kill of the launcher's process tree does not reach it. It ignores
the signals a cancel sends to the whole job (the launcher cleans up itself then), waits
until the launcher has exited (`procs.wait_exited`), removes the folder (only a real folder
of this user whose name is an attempt folder's) and exits. It holds no file of
the job open: its output goes nowhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
from pathlib import Path

from ftslurm import procs

PREFIX = "ftslurm-attempt-"  # job.ATTEMPT_DIR_PREFIX (job.py imports torch-free modules only)


def remove(folder: Path) -> bool:
    """Remove `folder` when it is a real folder of this user named like an attempt folder."""
    if not folder.name.startswith(PREFIX):
        return False
    try:
        st = folder.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isascii() or not argv[0].isdigit():
        print("usage: python -m ftslurm.replica.launcher.attempt_guard <launcher pid> <folder>",
              file=sys.stderr)  # fmt: skip
        return 2
    pid, folder = int(argv[0]), Path(argv[1])
    launcher = procs.ProcId.of(pid)
    try:
        pidfd = procs.open_pidfd(pid)
    except ProcessLookupError:
        launcher = None
    if launcher is None:
        remove(folder)  # the launcher is already gone
        return 0
    if os.fork() > 0:  # the launcher reaps this child; the guard lives on, re-parented
        os._exit(0)
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    procs.wait_exited(launcher, pidfd)
    remove(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
