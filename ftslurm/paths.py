"""Where ftslurm keeps its state and where runs write their logs.

Everything lives under one outputs directory so a user (and `ftslurm report`) finds it all in
one place. Default: `outputs/` of the project checkout (the directory holding the sbatch
scripts), else `./outputs`; `FTSLURM_OUTPUTS` overrides it. Sub-directories have their own
overrides so tests can run side by side with a user's cluster and Lighthouse.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

FT_SCRIPT = "llama3.1-8b-pretraining-torchft.sh"
CLASSIC_SCRIPT = "llama3.1-8b-pretraining.sh"


def project_root() -> Path:
    """The checkout holding the sbatch scripts: the package's parent, else the cwd."""
    env = os.environ.get("FTSLURM_PROJECT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / FT_SCRIPT).exists() or (here / "pyproject.toml").exists():
        return here  # a checkout (editable install): keep state beside the scripts
    return Path.cwd()


def outputs_dir() -> Path:
    env = os.environ.get("FTSLURM_OUTPUTS")
    return Path(env).resolve() if env else project_root() / "outputs"


def cluster_dir() -> Path:
    """State of the local Slurm cluster (`ftslurm cluster up`)."""
    env = os.environ.get("FTSLURM_CLUSTER_DIR")
    return Path(env).resolve() if env else outputs_dir() / "cluster"


def job_python(env: Mapping[str, str] | None = None) -> str:
    """The interpreter the sbatch scripts exec on the nodes (FTSLURM_PYTHON): this one unless
    set, so jobs run in the environment that submitted them (`sudo` resets PATH, and the
    `python3` first on a node's PATH may lack ftslurm)."""
    return (os.environ if env is None else env).get("FTSLURM_PYTHON") or sys.executable


def lighthouse_dir() -> Path:
    """State of the managed Lighthouse (`ftslurm lighthouse start`)."""
    env = os.environ.get("FTSLURM_LIGHTHOUSE_DIR")
    return Path(env).resolve() if env else outputs_dir() / "lighthouse"


def torchft_runs_dir(outputs: Path | None = None) -> Path:
    """Where the FT sbatch script writes its runs' log folders (`logvocab.run_dir`), under
    `outputs` (default: `outputs_dir()`)."""
    return (outputs_dir() if outputs is None else outputs) / "torchft"


def events_log() -> Path:
    """JSON lines of injected failures (`ftslurm simulate-failure`), read by `ftslurm report`."""
    env = os.environ.get("FTSLURM_EVENTS")
    # its folder resolved, not its name: a link planted there is refused when written
    return Path(env).parent.resolve() / Path(env).name if env else outputs_dir() / "events.jsonl"
