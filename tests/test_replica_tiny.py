"""The tiny preset (ftslurm/replica/worker/tiny.py): its plan, and that its step line is the one
torchtitan prints and the report reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from ftslurm.replica.worker import tiny

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

ROOT = Path("/srv/ftslurm")
ENV = {
    "SLURM_ARRAY_JOB_ID": "42",
    "SLURM_ARRAY_TASK_ID": "7",
    "SLURM_ARRAY_TASK_COUNT": "64",
    "SLURM_RESTART_COUNT": "1",
    "FTSLURM_PRESET": "tiny",
    "FTSLURM_PYTHON": "/venv/bin/python",
    "STEPS": "300",
}
FIXTURE = Path(__file__).parent / "fixtures" / "report" / "slurm-3-replicas-tft-3"


def test_tiny_plan_runs_one_process_without_torchrun() -> None:
    p = planlib.build_ft_plan(ENV, ROOT, ["torchrun"])
    assert p.argv == ["/venv/bin/python", "-m", "ftslurm.replica.worker.tiny", "--steps=300"]
    assert (p.device, p.ft_mode, p.replica_id, p.group_size, p.attempt) == (
        "cpu", "per-step", 7, 64, 1)  # fmt: skip
    assert p.env["FTSLURM_FT_MODE"] == "per-step" and p.env["FTSLURM_REPLICA_ID"] == "7"
    assert logvocab.banner("2026-11-25 10:00:00", p, "worker-7") == (
        "[2026-11-25 10:00:00]  launching replica 7 (attempt 1) on worker-7"
    )
    assert planlib.requeue_target(p) == "42_7"


@pytest.mark.parametrize("extra", [{"FT_MODE": "diloco"}, {"PROCESS_GROUP": "nccl"}])
def test_tiny_refuses_what_it_does_not_run(extra: dict[str, str]) -> None:
    with pytest.raises(UserError, match="FTSLURM_PRESET=tiny runs per-step FT over gloo"):
        planlib.build_ft_plan({**ENV, **extra}, ROOT)


def test_tiny_refuses_a_gpu_device() -> None:
    with pytest.raises(UserError, match="preset tiny is for DEVICE=cpu"):
        planlib.build_ft_plan({**ENV, "DEVICE": "cuda"}, ROOT)


def test_step_line_has_the_recorded_torchtitan_shape() -> None:
    import gzip

    with gzip.open(FIXTURE / "tft-3_1.out.gz", "rt") as f:
        recorded = next(line for line in f if "root - INFO - step:" in line)
    body = recorded.split(" - INFO - ", 1)[1].rstrip("\n")
    ours = tiny.step_line(3, 7.90834, 0.8664, 314)
    shape = re.compile(
        r"step: +\d+  loss: +[0-9.]+  grad_norm: +[0-9.]+  memory: +[0-9.]+GiB\([0-9.]+%\)  "
        r"tps: [0-9,]+  tflops: [0-9.,]+  mfu: [0-9.]+%"
    )
    assert shape.fullmatch(body), body
    assert shape.fullmatch(ours), ours
    assert ours.startswith("step:  3  loss:  7.90834  grad_norm:  0.8664  memory: ")
    m = logvocab.STEP.search(ours.encode())
    assert m is not None and (m[1], m[2]) == (b"3", b"7.90834")
