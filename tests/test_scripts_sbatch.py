"""The two sbatch scripts: shellcheck, and dry runs with fake SLURM_* variables that must print
the exact GPU command lines (no Slurm, no torch needed)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import resources
from tests.clirun import FakeBin
from tests.ftjob import KNOB_ENV_RE

ROOT = Path(__file__).resolve().parent.parent
FT_SCRIPT = ROOT / "llama3.1-8b-pretraining-torchft.sh"
CLASSIC_SCRIPT = ROOT / "llama3.1-8b-pretraining.sh"

pytestmark = pytest.mark.timeout(60)


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's env minus every knob and Slurm variable, so the defaults are tested."""
    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    env.update(
        FTSLURM_DRY_RUN="1",
        FTSLURM_PYTHON=sys.executable,
        FTSLURM_TORCHRUN="torchrun",
        FTSLURM_OUTPUTS=str(tmp_path / "outputs"),
    )
    env.update(extra)
    return env


def _command(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.startswith("command: ")]
    assert len(lines) == 1, text
    return shlex.split(lines[0][len("command: ") :])


@pytest.mark.parametrize("script", [FT_SCRIPT, CLASSIC_SCRIPT], ids=lambda p: p.name)
def test_shellcheck_clean(script: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck missing: apt-get install -y shellcheck")
    out = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("script", [FT_SCRIPT, CLASSIC_SCRIPT], ids=lambda p: p.name)
def test_script_basics(script: Path) -> None:
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    assert os.access(script, os.X_OK)
    code = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(code) < 12  # logic lives in Python (the header comment lists every knob)


@pytest.mark.parametrize(
    ("script", "job_name"),
    [(FT_SCRIPT, resources.FT_JOB_NAME), (CLASSIC_SCRIPT, resources.CLASSIC_JOB_NAME)],
    ids=lambda v: getattr(v, "name", v),
)
def test_script_asks_for_the_resources_defined_once(script: Path, job_name: str) -> None:
    """Slurm reads the #SBATCH lines, so they stay in the scripts; they must say what
    ftslurm.resources defines (the API asks submitit for the same, simulate-failure finds FT
    replicas by the job name). --exclusive gives every CPU and GPU of the node but only the
    memory asked for (sbatch(1)); --mem=0 asks for all of it."""
    keys = ("--job-name", "--gpus-per-task", "--cpus-per-task", "--exclusive", "--mem")
    lines = [ln for ln in script.read_text().splitlines()
             if ln.startswith("#SBATCH") and ln.split()[1].split("=")[0] in keys]  # fmt: skip
    assert lines == resources.GPU_NODE.sbatch_lines(job_name)
    assert lines[1:] == ["#SBATCH --gpus-per-task=8", "#SBATCH --cpus-per-task=128",
                         "#SBATCH --exclusive", "#SBATCH --mem=0"]  # fmt: skip


def test_sbatch_device_options_make_a_cpu_node_request() -> None:
    assert resources.sbatch_device_options("cuda") == []
    assert resources.sbatch_device_options("cpu") == [
        "--gpus-per-task=0",
        "--cpus-per-task=1",
        "--export=ALL,DEVICE=cpu",
    ]


def test_ft_script_sbatch_header() -> None:
    text = FT_SCRIPT.read_text()
    for line in (
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=outputs/torchft/slurm-%A_%a.out",
        # the time limit: the launcher gets USR1 300 s before it (final checkpoint, requeue)
        "#SBATCH --signal=B:USR1@300",
    ):
        assert line in text.splitlines()
    assert (ROOT / "outputs" / "torchft" / ".gitkeep").exists()


def test_ft_script_dry_run_gpu_defaults(tmp_path: Path) -> None:
    env = _clean_env(
        tmp_path,
        SLURM_ARRAY_JOB_ID="42",
        SLURM_ARRAY_TASK_ID="1",
        SLURM_ARRAY_TASK_COUNT="2",
        SLURM_RESTART_COUNT="1",
    )
    for _ in range(2):  # a requeued attempt appends to the same file
        out = subprocess.run(
            ["bash", str(FT_SCRIPT)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout == ""  # everything goes to the per-task log
    log = tmp_path / "outputs" / "torchft" / "tft-42" / "tft-42_1.out"
    text = log.read_text()
    banners = [ln for ln in text.splitlines() if "launching replica" in ln]
    assert len(banners) == 2
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]  launching replica 1 \(attempt 1\) on \S+", banners[0]
    )
    first = text.split("dry run (FTSLURM_DRY_RUN=1)")[0]
    assert _command(first) == [
        "torchrun",
        "--nnodes=1",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0",
        "--rdzv_id=tft_42_1",
        "-m",
        "ftslurm.replica.worker.train",
        f"--job.config_file={ROOT}/slurm/configs/llama3_8b_ft.toml",
        f"--job.dump_folder={tmp_path}/outputs/torchft/tft-42",
        f"--model.hf_assets_path={ROOT}/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
        "--parallelism.data_parallel_shard_degree=8",
        "--fault_tolerance.enable",
        "--fault_tolerance.replica_id=1",
        "--fault_tolerance.group_size=2",
        "--fault_tolerance.process_group=nccl",
    ]
    assert (
        "env: FTSLURM_ATTEMPT=1 FTSLURM_DEVICE=cuda FTSLURM_FT_MODE=per-step "
        "FTSLURM_GROUP_SIZE=2 FTSLURM_HEAL_TIMEOUT_S=600 FTSLURM_REPLICA_ID=1 "
        "TORCHFT_LIGHTHOUSE=http://login-0:29510 TORCHFT_QUORUM_RETRIES=3"
    ) in text
    assert "dry run (FTSLURM_DRY_RUN=1): nothing started" in text


def test_ft_script_wandb_key_never_printed(tmp_path: Path) -> None:
    secret = "wandb-key-do-not-print-0123456789"
    env = _clean_env(
        tmp_path,
        SLURM_ARRAY_JOB_ID="5",
        SLURM_ARRAY_TASK_ID="0",
        SLURM_ARRAY_TASK_COUNT="2",
        WANDB_API_KEY=secret,
    )
    out = subprocess.run(
        ["bash", str(FT_SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "outputs" / "torchft" / "tft-5" / "tft-5_0.out").read_text()
    assert "--metrics.enable_wandb" in _command(text)
    assert secret not in text + out.stdout + out.stderr


def test_ft_script_cpu_with_one_variable(tmp_path: Path) -> None:
    env = _clean_env(
        tmp_path,
        SLURM_ARRAY_JOB_ID="9",
        SLURM_ARRAY_TASK_ID="0",
        SLURM_ARRAY_TASK_COUNT="2",
        DEVICE="cpu",
    )
    out = subprocess.run(
        ["bash", str(FT_SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    cmd = _command((tmp_path / "outputs" / "torchft" / "tft-9" / "tft-9_0.out").read_text())
    # one rank: FTSLURM_PYTHON runs the training module, no torchrun (FTSLURM_SKIP_TORCHRUN)
    assert cmd[:4] == [sys.executable, "-u", "-m", "ftslurm.replica.worker.train"]
    assert f"--job.config_file={ROOT}/slurm/configs/debug_cpu.toml" in cmd
    assert "--fault_tolerance.process_group=gloo" in cmd


def test_ft_script_outside_an_array_says_how(tmp_path: Path) -> None:
    out = subprocess.run(
        ["bash", str(FT_SCRIPT)],
        env=_clean_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0
    assert "sbatch --array=0-1" in out.stderr


def test_ft_script_refuses_a_bad_knob_in_one_line(tmp_path: Path) -> None:
    """The launcher's own start checks every knob, also those only the training worker reads:
    one line and exit 2 (no requeue), not a traceback on every rank."""
    env = _clean_env(tmp_path, SLURM_ARRAY_JOB_ID="3", SLURM_ARRAY_TASK_ID="0",
                     SLURM_ARRAY_TASK_COUNT="2", FTSLURM_CHECKSUM_ASYNC="sometimes")  # fmt: skip
    out = subprocess.run(
        ["bash", str(FT_SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    log = (tmp_path / "outputs" / "torchft" / "tft-3" / "tft-3_0.out").read_text()
    assert log == (
        "Error: FTSLURM_CHECKSUM_ASYNC='sometimes' is not a boolean: use 1/0, true/false, "
        "yes/no or on/off\n"
    )


def test_classic_script_dry_run_gpu_defaults(tmp_path: Path, fake_bin: FakeBin) -> None:
    calls = tmp_path / "scontrol.calls"
    fake_bin.add(
        "scontrol",
        f'echo "$*" >> {shlex.quote(str(calls))}\n'
        '[ "$1 $2" = "show hostnames" ] || exit 3\n'
        "printf 'worker-3\\nworker-4\\n'\n",
        shebang="#!/bin/bash",
    )
    env = _clean_env(
        tmp_path,
        SLURM_JOB_ID="77",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="worker-[3-4]",
        PATH=os.environ["PATH"],  # fake_bin's first
    )
    out = subprocess.run(
        ["bash", str(CLASSIC_SCRIPT)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert calls.read_text() == "show hostnames worker-[3-4]\n"
    assert re.match(r"\[[\d :-]+\]  launching classic job 77 on \S+\n", out.stdout)
    assert _command(out.stdout) == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "torchrun",
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=worker-3:29500",
        "--rdzv_id=classic_77",
        "-m",
        "ftslurm.replica.worker.train",
        f"--job.config_file={ROOT}/slurm/configs/llama3_8b.toml",
        f"--job.dump_folder={tmp_path}/outputs/classic-77",
        f"--model.hf_assets_path={ROOT}/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
    ]


def test_classic_script_without_allocation_says_how(tmp_path: Path) -> None:
    env = _clean_env(tmp_path, SLURM_NNODES="2")
    out = subprocess.run(
        ["bash", str(CLASSIC_SCRIPT)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "sbatch -N" in out.stderr and "Traceback" not in out.stderr
