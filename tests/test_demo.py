"""`ftslurm demo` end to end on both backends (a short run: one failure), and nothing left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import procs

pytestmark = pytest.mark.training


def _processes_marked_with(marker: str) -> list[str]:
    """Live processes whose command line or environment mentions `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not procs.pid_alive(int(entry)):
            continue
        try:
            blob = Path(f"/proc/{entry}/cmdline").read_bytes()
            blob += Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in blob:
            found.append(f"{entry}: {' '.join(procs.cmdline(int(entry)))[:120]}")
    return found


def _run_demo(tmp_path: Path, backend: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "FTSLURM_OUTPUTS": str(tmp_path / "outputs"),
        "FTSLURM_CLUSTER_DIR": str(tmp_path / "cluster"),
    }
    env.pop("SLURM_CONF", None)  # the demo's own cluster, not the test session's
    return subprocess.run(
        [sys.executable, "-m", "ftslurm", "demo", "--backend", backend, "--failures", "1",
         "--no-plot", "--timeout", "240"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _check_story(out: subprocess.CompletedProcess, tmp_path: Path) -> None:
    assert out.returncode == 0, out.stderr[-3000:]
    assert "healed from a peer" in out.stderr
    assert "1/2 replicas from step" in out.stdout  # a degraded interval
    assert "recovery: replica 0 -> replica 1" in out.stdout
    assert "cleaning up" in out.stderr
    left = _processes_marked_with(str(tmp_path))
    assert not left, left


@pytest.mark.timeout(600)
def test_demo_local_backend(tmp_path):
    out = _run_demo(tmp_path, "local")
    _check_story(out, tmp_path)
    assert "killed: SIGKILL" in out.stderr


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_demo_slurm_backend(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the Slurm backend needs root")
    out = _run_demo(tmp_path, "slurm")
    _check_story(out, tmp_path)
    assert "State=DOWN" in out.stderr and "RESUMEd" in out.stderr
    assert "local Slurm cluster stopped" in out.stderr


def test_demo_dry_run_starts_nothing(tmp_path):
    env = {**os.environ, "FTSLURM_OUTPUTS": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "demo", "--dry-run", "--backend", "local", "-k", "3"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0
    assert out.stdout.count("failure ") == 3
    assert not any(tmp_path.iterdir())


def test_demo_rejects_one_replica():
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "demo", "--replicas", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "at least 2" in out.stderr and "Traceback" not in out.stderr
