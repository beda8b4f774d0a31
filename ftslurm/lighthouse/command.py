"""The command (without the Lighthouse's own arguments) that runs torchft's Lighthouse.

torchft's `torchft_lighthouse` console script imports torch first (~3 s of a 2-core machine
before the Rust code starts), so by default the fast launcher (`launcher.py`) is copied into
the state directory (with logfilter.py, which it folds the log's repeated quorum lines with)
and run with this interpreter (~0.1 s); the process shows as
`python <state dir>/torchft_lighthouse <args>`. A `binary` (or FTSLURM_LIGHTHOUSE_BIN), e.g.
the console script itself, is run by that launcher as its child: the daemon's own process is
always the launcher of its state dir, which is how it is recognised (no state file can fake
a command line).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ftslurm import daemon, knobs, logfilter, safefile
from ftslurm.errors import UserError
from ftslurm.lighthouse import launcher

NAME = "lighthouse"  # of the daemon's files in the state dir: lighthouse.pid, .json, .log
MARKER = "torchft_lighthouse"  # the launcher's name in the state dir (its identity check)
BINARY_ENV = "FTSLURM_LIGHTHOUSE_BINARY"  # what the launcher runs instead of torchft's own
FILTER = "logfilter.py"  # beside the launcher in the state dir: it imports it from there


def resolve_binary(binary: str | None) -> str | None:
    """The executable to run instead of the fast launcher, if any ("" or None: none given)."""
    return binary or os.environ.get("FTSLURM_LIGHTHOUSE_BIN") or None


def lighthouse_command(
    state_dir: Path, binary: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment to add) of a Lighthouse of `state_dir`: always the launcher, copied
    into the state dir (its path in the command line is how `stop` and `status` know the
    process is this dir's Lighthouse; see `Daemon.owns`). `binary` (or FTSLURM_LIGHTHOUSE_BIN),
    an executable such as `torchft_lighthouse`, is run by the launcher as its child; so is
    the console script on PATH when torchft is not importable from this Python. Either must
    belong to root or this user, and no other user may write it or its folder."""
    binary = resolve_binary(binary)
    # the launcher cannot read the registry: it gets the switch parsed, 1 or 0
    known = knobs.environ()
    env = {"FTSLURM_LOG_FILTER": "1" if known["FTSLURM_LOG_FILTER"] else "0",
           "FTSLURM_LIGHTHOUSE_SNAPSHOT_S": repr(float(known["FTSLURM_LIGHTHOUSE_SNAPSHOT_S"]))}
    path = None
    if binary:
        path = shutil.which(binary)
        if path is None:
            raise UserError(f"Lighthouse binary {binary!r} not found (not on PATH, not a file)")
    elif launcher.torchft_extension() is None:
        # torchft not importable here: maybe another environment provides the script
        path = shutil.which("torchft_lighthouse")
        if path is None:
            raise UserError(
                "torchft is not installed: `pip install torchft-nightly` (or `pip install "
                "'ftslurm[cpu]'`), or name the binary with --binary / FTSLURM_LIGHTHOUSE_BIN"
            )
    unsafe = daemon.unsafe_program(path) if path else None
    if unsafe:  # root must never run what another user can replace
        raise UserError(f"refusing to run the Lighthouse binary {binary or path}: {unsafe}; "
                        "use one only you and root can change")  # fmt: skip
    copy = state_dir / MARKER
    for source, dest in ((launcher.__file__, copy), (logfilter.__file__, state_dir / FILTER)):
        text = Path(source).read_bytes()
        if safefile.read_bytes(dest) != text:  # missing, changed, or a link: (re)written
            safefile.write_atomic(dest, text)
    if path:
        env[BINARY_ENV] = os.path.abspath(path)
    return [sys.executable, str(copy)], env
