"""The command (without the Lighthouse's own arguments) that runs torchft's Lighthouse.

torchft's `torchft_lighthouse` console script imports torch first (~3 s of a 2-core machine
before the Rust code starts), so by default the fast launcher (`launcher.py`) is copied into
the state directory and run with this interpreter (~0.1 s); the process shows as
`python <state dir>/torchft_lighthouse <args>`. A `binary` (or FTSLURM_LIGHTHOUSE_BIN) runs
that executable instead, e.g. the console script itself.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ftslurm.errors import UserError
from ftslurm.lighthouse import launcher

NAME = "lighthouse"  # of the daemon's files in the state dir: lighthouse.pid, .json, .log
MARKER = "torchft_lighthouse"  # in the command line of both launchers (pid-reuse check)


def resolve_binary(binary: str | None) -> str | None:
    """The executable to run instead of the fast launcher, if any ("" or None: none given)."""
    return binary or os.environ.get("FTSLURM_LIGHTHOUSE_BIN") or None


def lighthouse_command(state_dir: Path, binary: str | None = None) -> list[str]:
    """`binary` (or FTSLURM_LIGHTHOUSE_BIN): an executable such as `torchft_lighthouse`.
    Default: the fast launcher, else the console script on PATH."""
    binary = resolve_binary(binary)
    if binary:
        path = shutil.which(binary)
        if path is None:
            raise UserError(f"Lighthouse binary {binary!r} not found (not on PATH, not a file)")
        return [path]
    if launcher.torchft_extension() is not None:
        copy = state_dir / MARKER
        text = Path(launcher.__file__).read_bytes()
        if not copy.exists() or copy.read_bytes() != text:
            copy.write_bytes(text)
        return [sys.executable, str(copy)]
    # torchft not importable from this Python: maybe another environment provides the script.
    script = shutil.which("torchft_lighthouse")
    if script is None:
        raise UserError(
            "torchft is not installed: `pip install torchft-nightly` (or `pip install "
            "'ftslurm[cpu]'`), or name the binary with --binary / FTSLURM_LIGHTHOUSE_BIN"
        )
    return [script]
