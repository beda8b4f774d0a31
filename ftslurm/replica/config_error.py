"""A note from the training worker to the launcher: torchtitan refused its options.

A mistyped flag in FTSLURM_EXTRA_ARGS (`--training.stepz=3`), a bad value or a missing TOML
fails every attempt the same way, seconds after torchrun started. torchrun only reports
"exit code 1", so without this note the launcher took it for a crash and requeued the replica
FT_MAX_REQUEUES times. The launcher names a file in FTSLURM_CONFIG_ERROR_FILE; the worker writes
one line there when torchtitan's option parser fails; the launcher reads it after torchrun.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FTSLURM_CONFIG_ERROR_FILE"


def install() -> None:
    """Wrap torchtitan's `ConfigManager.parse_args` (worker side; needs ENV set)."""
    path = os.environ.get(ENV)
    if not path:
        return
    from torchtitan.config import ConfigManager

    original = ConfigManager.parse_args

    def parse_args(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return original(self, *args, **kwargs)
        except SystemExit as e:  # tyro: unknown option, bad value (it printed why)
            if e.code not in (0, None):
                _write(path, "torchtitan's option parser refused them (its message is above)")
            raise
        except (FileNotFoundError, IsADirectoryError, ValueError) as e:  # no TOML, or a bad one
            # (other OSErrors, a shared-filesystem hiccup, may pass: requeued as before)
            _write(path, f"{type(e).__name__}: {e}")
            raise

    ConfigManager.parse_args = parse_args  # type: ignore[method-assign]


def _write(path: str, line: str) -> None:
    try:
        Path(path).write_text(line.replace("\n", " ") + "\n")
    except OSError:
        pass  # the launcher then treats the failure as any other


def read(path: Path) -> str | None:
    """The worker's note (launcher side), or None when torchtitan took its options."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None
