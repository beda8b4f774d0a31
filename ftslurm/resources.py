"""What a job of this project asks Slurm for, defined once.

The sbatch scripts carry it as #SBATCH lines (Slurm reads those, so they stay in the scripts;
tests/test_scripts_sbatch.py asserts they equal `GPU_NODE.sbatch_lines(...)`), the Python API
passes it to submitit (`ftslurm.api.executor_parameters`), `ftslurm simulate-failure` finds
FT replicas by the job name, and `ftslurm submit` / the demo turn a GPU request into a
CPU-node one with `device_overrides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ftslurm import knobs, paths

FT_JOB_NAME = "tft_replica"  # the FT script's --job-name: how FT array tasks are recognised
CLASSIC_JOB_NAME = "llama3_8b"


@dataclass(frozen=True)
class NodeRequest:
    """One task per node, and what that task gets. `mem_gb`: 0 = all the node's memory
    (`--exclusive` alone gives only the memory asked for, sbatch(1)); None = Slurm's default."""

    gpus_per_task: int
    cpus_per_task: int
    exclusive: bool
    mem_gb: int | None

    def sbatch_lines(self, job_name: str) -> list[str]:
        """The #SBATCH lines a script carries for this request."""
        return [
            f"#SBATCH --job-name={job_name}",
            f"#SBATCH --gpus-per-task={self.gpus_per_task}",
            f"#SBATCH --cpus-per-task={self.cpus_per_task}",
            *(["#SBATCH --exclusive"] if self.exclusive else []),
            *([f"#SBATCH --mem={self.mem_gb}"] if self.mem_gb is not None else []),
        ]


# A whole GPU node: all its GPUs (the cuda default of GPUS_PER_NODE), 128 CPUs, all its memory.
GPU_NODE = NodeRequest(knobs.KNOBS["GPUS_PER_NODE"].default, 128, exclusive=True, mem_gb=0)
# A CPU node (the local cluster's CPUs=1 nodes, no GRES). As sbatch options it overrides only
# the GPU and CPU counts of the scripts' #SBATCH lines (their --exclusive --mem=0 stay).
CPU_NODE = NodeRequest(0, 1, exclusive=False, mem_gb=None)


def sbatch_device_options(device: str) -> list[str]:
    """sbatch options that turn the scripts' GPU #SBATCH lines into a CPU-node request.

    The scripts carry GPU_NODE so a plain `sbatch` works on GPU nodes; on a CPU cluster
    (CPUs=1 per node, no GRES) these command-line options override them (command line beats
    #SBATCH), and DEVICE=cpu reaches the job. Verified with Slurm 22.05: `--gpus-per-task=0`
    is accepted without a gpu GRES.
    """
    if device == "cpu":
        return [f"--gpus-per-task={CPU_NODE.gpus_per_task}",
                f"--cpus-per-task={CPU_NODE.cpus_per_task}", "--export=ALL,DEVICE=cpu"]  # fmt: skip
    return []


def device_overrides(env: Mapping[str, str], script: str = "") -> list[str]:
    """sbatch options implied by the device (DEVICE, or FTSLURM_PRESET=debug_cpu) that moves a
    job to CPU nodes. For this project's two scripts every knob is checked here as the
    launcher will check it on each node (the API does the same): a typo fails now, not after
    the queue wait."""
    from ftslurm.replica import plan as planlib

    name = Path(script).name
    if name == paths.FT_SCRIPT:
        device = planlib.preflight_ft(env, paths.project_root()).device
    elif name == paths.CLASSIC_SCRIPT:
        device = planlib.preflight_classic(env, paths.project_root()).device
    else:
        device = knobs.load(env).DEVICE
    return sbatch_device_options(device)
