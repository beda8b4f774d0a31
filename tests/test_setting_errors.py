"""A setting ftslurm cannot use is one error line, never a traceback: an FTSLURM_CLUSTER_DIR too
long for the file system, and `python -m ftslurm.knobs --write` outside a checkout (which
writes nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import ftslurm, one_error_line

pytestmark = pytest.mark.timeout(60)


def test_a_too_long_cluster_dir_is_one_error_line(tmp_path: Path) -> None:
    for long in ("/tmp/" + "a" * 5000, "/tmp/" + "/".join(["a" * 200] * 30)):
        for argv in (["cluster", "status"], ["cluster", "env"]):
            line = one_error_line(ftslurm(*argv, env={"FTSLURM_CLUSTER_DIR": long}, timeout=20))
            assert "FTSLURM_CLUSTER_DIR=" in line and "too long" in line and len(line) < 300


def test_knobs_write_outside_a_checkout_is_one_error_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "ftslurm.knobs", "--write"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "FTSLURM_PROJECT": str(tmp_path)})  # fmt: skip
    line = one_error_line(out)
    assert "docs/settings.md" in line
    assert list(tmp_path.iterdir()) == []
