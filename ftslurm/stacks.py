"""The training stacks ftslurm supports, side by side: what each pins, where each keeps the FT
trainer's classes, and which one is installed here.

Why: torchtitan 0.3 moved the FT trainer (`torchtitan.experiments.torchft`), renamed its
classes and their attributes (`trainer.config`, was `trainer.job_config`), and dropped TOML
configs for Python config functions; a user who starts today gets it from `pip install
torchtitan`, one on a cluster image may have 0.2.2. The launcher, the worker's patches
(patches.py) and `ftslurm doctor` ask this module which stack they run on instead of each
spelling the upstream names or versions: one table, one rule for which stack is here
(torchtitan's installed version, read from its metadata: nothing is imported).

Pure data and functions, no torch.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass


@dataclass(frozen=True)
class Stack:
    """One supported build of torch + torchtitan + torchft and the upstream names that differ
    between builds. `extra`: the pip extra that installs it on CPU (pyproject.toml);
    `requirements`: the file that installs it for GPU nodes."""

    name: str
    pins: tuple[tuple[str, str], ...]  # (distribution, exact version)
    extra: str
    requirements: str
    # how torchtitan is told its config: "toml" (--job.config_file) or "module" (--module,
    # --config: a function of ftslurm.replica.worker.titan03's config_registry)
    config: str
    ft_trainer: str  # the FT trainer class
    ft_manager: str  # torchtitan's class that builds torchft's Manager
    manager_module_alias: str  # that module's name for the torchft package (the stand-in's target)
    checkpointer: str  # the checkpoint manager class whose _ft_save/_ft_load the FT run calls
    ft_optimizer: str  # the FT optimizers container
    wait_for_saving: str  # the checkpointer's method that waits for an async save
    should_continue: str  # the trainer's should_continue_training
    trainer_config_attr: str  # the trainer's attribute for its parsed config
    # torchtitan flags whose names changed
    dump_flag: str
    assets_flag: str
    dataset_path_flag: str

    @property
    def versions(self) -> dict[str, str]:
        return dict(self.pins)

    @property
    def torchtitan(self) -> str:
        return self.versions["torchtitan"]

    def describe(self) -> str:
        """`torchtitan 0.2.2, torch 2.13.0, torchft-nightly 2026.10.26`."""
        return ", ".join(f"{d} {v}" for d, v in
                         sorted(self.pins, key=lambda p: p[0] != "torchtitan"))  # fmt: skip


TITAN022 = Stack(
    name="torchtitan-0.2",
    pins=(("torch", "2.13.0"), ("torchtitan", "0.2.2"), ("torchft-nightly", "2026.10.26")),
    extra="cpu",
    requirements="requirements.txt",
    config="toml",
    ft_trainer="torchtitan.experiments.ft.train.FTTrainer",
    ft_manager="torchtitan.components.ft.manager.FTManager",
    manager_module_alias="torchtitan.components.ft.manager.ft",
    checkpointer="torchtitan.components.checkpoint.CheckpointManager",
    ft_optimizer="torchtitan.components.optimizer.FTOptimizersContainer",
    wait_for_saving="_async_wait",
    should_continue="torchtitan.train.Trainer.should_continue_training",
    trainer_config_attr="job_config",
    dump_flag="--job.dump_folder",
    assets_flag="--model.hf_assets_path",
    dataset_path_flag="--training.dataset_path",
)
TITAN03 = Stack(
    name="torchtitan-0.3",
    pins=(("torch", "2.15.0"), ("torchtitan", "0.3.0"), ("torchft-nightly", "2026.10.26")),
    extra="titan03",
    requirements="requirements-titan03.txt",
    config="module",
    ft_trainer="torchtitan.experiments.torchft.trainer.FaultTolerantTrainer",
    ft_manager="torchtitan.experiments.torchft.manager.TorchFTManager",
    manager_module_alias="torchtitan.experiments.torchft.manager.torchft",
    checkpointer="torchtitan.experiments.torchft.checkpoint.TorchFTCheckpointManager",
    ft_optimizer="torchtitan.experiments.torchft.optimizer.TorchFTOptimizersContainer",
    wait_for_saving="maybe_wait_for_saving",
    should_continue="torchtitan.trainer.Trainer.should_continue_training",
    trainer_config_attr="config",
    dump_flag="--dump_folder",
    assets_flag="--hf_assets_path",
    dataset_path_flag="--dataloader.dataset_path",
)
STACKS: tuple[Stack, ...] = (TITAN022, TITAN03)
DEFAULT = TITAN022  # README command 1's extra; what a machine without torchtitan is told
BY_NAME = {s.name: s for s in STACKS}
# the package of config functions torchtitan 0.3 is given with --module (it imports its
# config_registry); its functions are the presets' names
CONFIG_MODULE = "ftslurm.replica.worker.titan03"


def for_torchtitan(version: str | None) -> Stack | None:
    """The stack whose torchtitan is `version` (its major.minor: 0.3.1 would be 0.3's), or
    None: not a stack ftslurm knows."""
    if version is None:
        return None
    minor = ".".join(version.split("+", 1)[0].split(".")[:2])
    for stack in STACKS:
        if ".".join(stack.torchtitan.split(".")[:2]) == minor:
            return stack
    return None


def torchtitan_version() -> str | None:
    try:
        return importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> Stack:
    """The stack this environment runs: by the installed torchtitan (DEFAULT when torchtitan
    is not installed or is a release no stack is for: versions.check_stack says why)."""
    return for_torchtitan(torchtitan_version()) or DEFAULT


def trainer_config(trainer: object) -> object:
    """A trainer's parsed config on either stack (`job_config` on 0.2, `config` on 0.3)."""
    for attr in ("job_config", "config"):
        if (value := getattr(trainer, attr, None)) is not None:
            return value
    raise AttributeError(f"{type(trainer).__name__} has neither job_config nor config")
