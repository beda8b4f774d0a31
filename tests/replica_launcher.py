"""The replica launcher run for real (`python -m ftslurm.replica job`, what the sbatch script
execs) with a stand-in torchrun, for the tests of its attempt folders: the guard that removes
them, and the next launcher's fallback when the guard is off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.clirun import REPO


def launcher(tmp_path: Path, torchrun: str, **env: str) -> subprocess.Popen:
    """`python -m ftslurm.replica job` with `torchrun` standing in for torchrun, its temporary
    folders under tmp_path/tmp, no FTSLURM_* knob of this environment and `env` on top; no
    node check (no GPU here: it is not under test)."""
    from tests.ftjob import KNOB_ENV_RE

    tok = tmp_path / "tok"
    tok.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tok / name).write_text("{}")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    full = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    full.update(FTSLURM_PROJECT=str(tmp_path), FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
                FTSLURM_TORCHRUN=torchrun, FTSLURM_EXTRA_ARGS=f"--model.hf_assets_path={tok}",
                TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(REPO), FTSLURM_PREFLIGHT="0",
                **env)  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "ftslurm.replica", "job"], env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
