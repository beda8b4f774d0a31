"""A note from the training worker to the launcher: torchtitan refused its options.

A mistyped flag in FTSLURM_EXTRA_ARGS (`--training.stepz=3`), a bad value or a missing TOML
fails every attempt the same way, seconds after torchrun started. torchrun only reports
"exit code 1", so without this note the launcher would take it for a crash and requeue the
replica FT_MAX_REQUEUES times, failing the same way each time. The launcher names a file in
FTSLURM_CONFIG_ERROR_FILE; the worker writes one line there when torchtitan's option parser
fails; the launcher reads it after torchrun.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

ENV = "FTSLURM_CONFIG_ERROR_FILE"


def install() -> None:
    """Wrap torchtitan's `ConfigManager.parse_args` (worker side; needs ENV set)."""
    path = os.environ.get(ENV)
    if not path:
        return
    from ftslurm.replica import patches

    def wrap(original):  # type: ignore[no-untyped-def]
        def parse_args(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return original(self, *args, **kwargs)
            except SystemExit as e:  # tyro: unknown option, bad value (it printed why)
                if e.code not in (0, None):
                    _write(path, "torchtitan's option parser refused them (its message is above)")
                raise
            except (FileNotFoundError, IsADirectoryError, ValueError) as e:  # no TOML, a bad one
                # (other OSErrors, a shared-filesystem hiccup, may pass: requeued as any crash)
                missing = e.filename if isinstance(e, FileNotFoundError) else None
                _write(path, f"{type(e).__name__}: {e}", missing)
                raise

        return parse_args

    patches.install("config_error.parse_args", wrap)


def _write(path: str, line: str, missing: str | None = None) -> None:
    with contextlib.suppress(OSError):  # the launcher then treats the failure as any other
        Path(path).write_text(json.dumps({"why": line.replace("\n", " "), "missing": missing}))


def read(path: Path) -> str | None:
    """The worker's note (launcher side), or None when torchtitan took its options. A file
    reported missing that is there now (written on the login node, not yet seen by this
    node's NFS cache) is no mistake: None, and the attempt is requeued as any crash."""
    try:
        note = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or not note.get("why"):
        return None
    missing = note.get("missing")
    if isinstance(missing, str) and Path(missing).exists():
        return None
    return str(note["why"])
