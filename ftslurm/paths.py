"""Where ftslurm keeps its state and where runs write their logs.

Everything lives under one outputs directory so a user (and `ftslurm report`) finds it all in
one place. Default: `outputs/` of the project checkout (the directory holding the sbatch
scripts), else `./outputs`; `FTSLURM_OUTPUTS` overrides it. Sub-directories have their own
overrides so tests can run side by side with a user's cluster and Lighthouse. Each override is
a knob, read through the registry (`knobs.environ()`: blank is unset, as for every knob).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ftslurm import knobs
from ftslurm.errors import UserError

# the scripts' names: the registry renders their knob tables, the commands find them here
from ftslurm.knobs import CLASSIC_SCRIPT as CLASSIC_SCRIPT
from ftslurm.knobs import FT_SCRIPT as FT_SCRIPT

NAME_MAX = 255  # bytes of one path component (Linux)
# PATH_MAX (4096) less room for the longest name ftslurm puts under a state folder
# (`torchft/tft-<job>/slots/slot-<r>/.epoch-<E>.json.<pid>.<hex>.tmp`)
DIR_MAX = 4096 - 160


def project_root() -> Path:
    """The checkout holding the sbatch scripts: the package's parent, else the cwd."""
    env = knobs.environ()["FTSLURM_PROJECT"]
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / FT_SCRIPT).exists() or (here / "pyproject.toml").exists():
        return here  # a checkout (editable install): keep state beside the scripts
    return Path.cwd()


def _state_dir(name: str) -> Path | None:
    """The folder variable `name` names, resolved; None when unset. A path no file under it
    could be opened by (a name over NAME_MAX, the whole near PATH_MAX) is a one-line
    UserError here, not an OSError traceback from the first command that stats it."""
    env = knobs.environ()[name]
    if not env:
        return None
    raw = os.fsencode(env)
    if len(raw) > DIR_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        shown = f"{env[:40]!r}... ({len(raw)} bytes)" if len(env) > 40 else repr(env)
        raise UserError(f"{name}={shown} is too long for a folder ftslurm keeps files in (at "
                        f"most {NAME_MAX} bytes a name, {DIR_MAX} in all): choose a shorter "
                        "path")  # fmt: skip
    return Path(env).resolve()


def outputs_dir() -> Path:
    return _state_dir("FTSLURM_OUTPUTS") or project_root() / "outputs"


def cluster_dir() -> Path:
    """State of the local Slurm cluster (`ftslurm cluster up`)."""
    return _state_dir("FTSLURM_CLUSTER_DIR") or outputs_dir() / "cluster"


def job_python(env: Mapping[str, str] | None = None) -> str:
    """The interpreter the sbatch scripts exec on the nodes (FTSLURM_PYTHON): this one unless
    set, so jobs run in the environment that submitted them (`sudo` resets PATH, and the
    `python3` first on a node's PATH may lack ftslurm)."""
    return knobs.load(env)["FTSLURM_PYTHON"] or sys.executable


def lighthouse_dir() -> Path:
    """State of the managed Lighthouse (`ftslurm lighthouse start`)."""
    return _state_dir("FTSLURM_LIGHTHOUSE_DIR") or outputs_dir() / "lighthouse"


def torchft_runs_dir(outputs: Path | None = None) -> Path:
    """Where the FT sbatch script writes its runs' log folders (`logvocab.run_dir`), under
    `outputs` (default: `outputs_dir()`)."""
    return (outputs_dir() if outputs is None else outputs) / "torchft"


def events_log() -> Path:
    """JSON lines of injected failures (`ftslurm simulate-failure`), read by `ftslurm report`."""
    env = knobs.environ()["FTSLURM_EVENTS"]
    # its folder resolved, not its name: a link planted there is refused when written
    return Path(env).parent.resolve() / Path(env).name if env else outputs_dir() / "events.jsonl"
