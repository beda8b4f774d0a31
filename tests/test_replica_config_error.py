"""A mistyped torchtitan option fails every attempt the same way: the launcher says so and does
not requeue (it used to requeue FT_MAX_REQUEUES times). Real launcher, torchrun, torchtitan."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm.replica import plan as planlib

ROOT = Path(__file__).resolve().parent.parent


def _launch(tmp_path: Path, extra_args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """One FT attempt inside a (pretend) array task, with an `scontrol` that records calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol.calls"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
        DEVICE="cpu",
        STEPS="5",
        FTSLURM_REPLICA_ID="0",
        FTSLURM_GROUP_SIZE="1",
        SLURM_ARRAY_JOB_ID="99",
        SLURM_ARRAY_TASK_ID="0",
        FTSLURM_OUTPUTS=str(tmp_path / "outputs"),
        TORCHFT_LIGHTHOUSE="http://127.0.0.1:1",  # never reached: the options fail first
        FTSLURM_EXTRA_ARGS=extra_args,
        PYTHONUNBUFFERED="1",
    )
    r = subprocess.run([sys.executable, "-m", "ftslurm.replica", "job"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=240)  # fmt: skip
    return r, calls


@pytest.mark.timeout(300)
def test_a_mistyped_option_is_not_requeued(tmp_path: Path):
    r, calls = _launch(tmp_path, "--training.stepz=3")
    out = r.stdout + r.stderr
    assert r.returncode == 2  # a user mistake: the SkyPilot loop does not restart it either
    assert "Unrecognized options" in out  # torchtitan's own message, kept
    assert "torchtitan refused its options" in out and "fix FTSLURM_EXTRA_ARGS" in out
    assert "not requeueing: torchtitan refused its options" in out
    assert not calls.exists(), calls.read_text()  # no `scontrol requeue`


def test_should_requeue_a_refused_option_never():
    env = {"DEVICE": "cpu", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"}
    p = planlib.build_ft_plan(env, ROOT)
    assert planlib.should_requeue(p, 1, cancelled=False)[0] is True
    ok, why = planlib.should_requeue(p, 1, cancelled=False, refused="bad flag")
    assert not ok and "every attempt would fail the same way" in why


def test_a_missing_file_that_is_there_now_is_requeued(tmp_path: Path):
    """NFS on a compute node may not see a TOML just written on the login node: the worker's
    note names it; if the launcher sees it afterwards, the attempt counts as a crash."""
    from ftslurm.replica import config_error

    note, toml = tmp_path / "note", tmp_path / "late.toml"
    config_error._write(str(note), f"FileNotFoundError: {toml}", str(toml))
    assert config_error.read(note) == f"FileNotFoundError: {toml}"
    toml.write_text("")
    assert config_error.read(note) is None
    config_error._write(str(note), "torchtitan's option parser refused them")
    assert config_error.read(note) == "torchtitan's option parser refused them"
    assert config_error.read(tmp_path / "absent") is None
