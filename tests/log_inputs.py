"""Replica logs as the tests of the commands that read them (`logs`, `report`, the follower)
write them: a torchtitan step line, a run folder of `tft-JOB_I.out` logs, and the environment
of a command run on them that reaches no user state (this checkout's Lighthouse, event log and
outputs/ stay out of it)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.clirun import REPO

STEP_LINE = "[titan] 2026-11-23 10:00:0{i},000 - root - INFO - step: {i}  loss:  2.5"


def run_dir(tmp_path: Path, lines: dict[int, bytes], job: str = "7") -> Path:
    """tmp_path/torchft/tft-JOB holding replica I's log `lines[I]` as tft-JOB_I.out."""
    run = tmp_path / "torchft" / f"tft-{job}"
    run.mkdir(parents=True)
    for i, data in lines.items():
        (run / f"tft-{job}_{i}.out").write_bytes(data)
    return run


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    """The environment of a command run here: this checkout, no user state."""
    state = tmp_path / "user-state"
    return {
        **os.environ, "PYTHONPATH": str(REPO), "FTSLURM_LIGHTHOUSE_DIR": str(state / "lh"),
        "FTSLURM_EVENTS": str(state / "events.jsonl"), "FTSLURM_OUTPUTS": str(state / "out"),
        **more,
    }  # fmt: skip
