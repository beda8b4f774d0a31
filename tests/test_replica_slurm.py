"""The FT sbatch script on the real local Slurm cluster (CPU): a crash of the training worker
that Slurm did not cause is turned into `scontrol requeue <job>_<task>` by the launcher (with
FT_MAX_RESTARTS=0: no restart in place first), and the requeued attempt heals from the survivor
with identical parameters.

Needs root (the session's `slurm_cluster` fixture). Everything started is cancelled / killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import runner
from ftslurm.failure_plan import is_training_worker
from ftslurm.replica.worker import checksum
from ftslurm.resources import sbatch_device_options
from ftslurm.wait import free_port, wait_for
from tests.ftjob import lighthouse_argv

pytestmark = [pytest.mark.slurm, pytest.mark.training, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "llama3.1-8b-pretraining-torchft.sh"


def _cmdline(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def _environ(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def find_worker(marker: str, replica: int) -> int | None:
    """The training worker (the launcher's child, or torchrun's with FTSLURM_SKIP_TORCHRUN=0)
    of one replica of this test's job: the interpreter running the module, never torchrun."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if not is_training_worker([a for a in _cmdline(pid) if a]):
            continue
        env = _environ(pid)
        if marker in env and f"\0FTSLURM_REPLICA_ID={replica}\0" in f"\0{env}":
            return int(pid)
    return None


def test_crashed_worker_is_requeued_and_heals(slurm_cluster, tmp_path: Path) -> None:
    port = free_port()
    lighthouse = runner.spawn(
        lighthouse_argv(tmp_path, port),
        log_path=tmp_path / "lighthouse.log",
    )
    job_id = None
    try:
        (tmp_path / "outputs" / "torchft").mkdir(parents=True)
        marker = f"TORCHFT_LIGHTHOUSE=http://login-0:{port}"
        env = dict(
            os.environ,
            STEPS="1000",
            FT_MODE="per-step",
            TORCHFT_LIGHTHOUSE=f"http://login-0:{port}",
            FTSLURM_OUTPUTS=str(tmp_path / "outputs"),
            FTSLURM_PYTHON=sys.executable,
            FT_MAX_RESTARTS="0",  # the requeue path; restarts in place: *restart_in_place_slurm
        )
        out = runner.run(
            ["sbatch", "--parsable", *sbatch_device_options("cpu"), "--array=0-1", str(SCRIPT)],
            env=env,
            cwd=tmp_path,
            timeout=30,
        )
        job_id = out.stdout.strip().split(";")[0]
        logs = tmp_path / "outputs" / "torchft" / f"tft-{job_id}"
        log0, log1 = logs / f"tft-{job_id}_0.out", logs / f"tft-{job_id}_1.out"

        def text(p: Path) -> str:
            return p.read_text(errors="replace") if p.exists() else ""

        def sums(p: Path, after: str = "") -> dict:
            body = text(p).split(after, 1)[-1] if after else text(p)
            return {(r.step, r.scope): r.sha256 for r in checksum.parse(body.splitlines())}

        wait_for(
            lambda: len(sums(log0)) >= 2 and len(sums(log1)) >= 2,
            timeout=180,
            what="2 committed steps on both array tasks",
        )
        worker = wait_for(lambda: find_worker(marker, 1), timeout=30, what="replica 1's worker")
        os.kill(worker, signal.SIGKILL)

        wait_for(
            # the worker's own code (FTSLURM_SKIP_TORCHRUN): SIGKILL; torchrun said 1
            lambda: f"requeueing {job_id}_1: training exited with code 137" in text(log1),
            timeout=60,
            what="the launcher to requeue its task",
        )
        attempt1 = "launching replica 1 (attempt 1) on worker-"
        wait_for(lambda: attempt1 in text(log1), timeout=90, what="attempt 1 to start")
        wait_for(
            lambda: "Loaded state dict" in text(log1).split(attempt1, 1)[-1],
            timeout=120,
            what="attempt 1 to heal",
        )

        def common() -> dict:
            a, b = sums(log0), sums(log1, after=attempt1)
            return {k: (a[k], b[k]) for k in set(a) & set(b)}

        wait_for(lambda: len(common()) >= 2, timeout=90, what="2 common steps after the heal")
        assert all(x == y for x, y in common().values()), common()
        assert "launching replica 0 (attempt 0) on worker-" in text(log0)
    finally:
        if job_id:
            runner.run(["scancel", job_id], check=False, timeout=30)
            for rid in (0, 1):
                pid = find_worker(f"TORCHFT_LIGHTHOUSE=http://login-0:{port}", rid)
                if pid is None:
                    continue
                try:
                    wait_for(lambda p=pid: not _running(p), timeout=30, what="worker to stop")
                except Exception:
                    os.kill(pid, signal.SIGKILL)  # a worker scancel missed: ours, by pid
        lighthouse.send_signal(signal.SIGTERM)
        try:
            lighthouse.wait(timeout=10)
        except subprocess.TimeoutExpired:
            lighthouse.kill()
            lighthouse.wait(timeout=5)
