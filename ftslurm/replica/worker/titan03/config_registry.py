"""The presets as torchtitan 0.3 config functions: one per slurm/configs/<preset>.toml, the same
values (the TOMLs' comments say why each is what it is), built on torchtitan 0.3's own configs.

Why ftslurm's own: torchtitan 0.3.0 dropped TOML, ships no 8B FT config, and its FT debug
model uses flex attention, which has no backward on CPU (`FlexAttention does not support
backward on CPU`). `debug_cpu` swaps every layer's inner attention for plain causal SDPA (what
0.2.2's debug model ran, and what torchtitan's graph_trainer does); `sdpa` as an
`attn_backend` is refused for language models in 0.3, so the swap is made on the built spec.

The launcher passes per run what the TOMLs' comments list (dump folder, assets, steps,
replica id, group size, process group, ...) as flags; tests/test_titan03_configs.py checks
these functions against the TOMLs field by field.
"""

from __future__ import annotations

from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.config import CommConfig, CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.experiments.torchft.checkpoint import TorchFTCheckpointManager
from torchtitan.experiments.torchft.config.job_config import FaultTolerance
from torchtitan.experiments.torchft.llama3 import model_registry
from torchtitan.experiments.torchft.optimizer import TorchFTOptimizersContainer
from torchtitan.experiments.torchft.trainer import FaultTolerantTrainer
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.tools.profiler import Profiler


def _sdpa(model_spec):  # noqa: ANN001, ANN202 - torchtitan's ModelSpec
    """Plain causal SDPA in every layer (CPU: flex attention has no backward there)."""
    for layer in model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return model_spec


def _config(flavor: str, *, lr: float, warmup: int, batch: int, seq_len: int, steps: int,
            dataset: str, assets: str, shard: int, checkpoint: TorchFTCheckpointManager.Config,
            fault_tolerance: FaultTolerance, comm: CommConfig, selective_ac: bool,
            cpu: bool = False, decay: dict | None = None,
            ) -> FaultTolerantTrainer.Config:  # fmt: skip
    model_spec = model_registry(flavor)
    if cpu:
        model_spec = _sdpa(model_spec)
    config = FaultTolerantTrainer.Config(
        loss=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),
        hf_assets_path=assets,
        profiler=Profiler.Config(enable_profiling=False),
        metrics=MetricsProcessor.Config(log_freq=1, disable_color_printing=cpu,
                                        enable_tensorboard=False, enable_wandb=False),
        model_spec=model_spec,
        optimizer=TorchFTOptimizersContainer.Config(
            param_groups=default_adamw(lr=lr, eps=1e-8).param_groups),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=warmup, **(decay or {})),
        training=TrainingConfig(local_batch_size=batch, seq_len=seq_len, steps=steps,
                                max_norm=1.0),
        dataloader=HuggingFaceTextDataLoader.Config(dataset=dataset),
        parallelism=ParallelismConfig(data_parallel_replicate_degree=1,
                                      data_parallel_shard_degree=shard),
        checkpoint=checkpoint,
        compile=CompileConfig(enable=False),
        comm=comm,
        fault_tolerance=fault_tolerance,
    )
    # 0.3's trainer defaults to selective AC (the TOMLs' "none" is None here); the debug model
    # recomputes nothing, as on 0.2.2
    config.activation_checkpoint = SelectiveAC.Config() if selective_ac else None
    if cpu:
        config.training.dtype = "float32"
        config.training.mixed_precision_param = "float32"
    return config


def debug_cpu() -> FaultTolerantTrainer.Config:
    """slurm/configs/debug_cpu.toml: the Llama-3 debug model on CPU, DiLoCo, one gloo rank."""
    return _config(
        "debugmodel", lr=8e-4, warmup=2, batch=8, seq_len=256, steps=200, dataset="c4_test",
        assets="./assets/local/tokenizer", shard=1, cpu=True, selective_ac=False,
        decay={"decay_ratio": 0.8, "decay_type": "linear", "min_lr_factor": 0.0},
        checkpoint=TorchFTCheckpointManager.Config(
            enable=True, folder="checkpoint", interval=60, async_mode="async",
            keep_latest_k=2, last_save_model_only=False),
        comm=CommConfig(init_timeout_seconds=120, train_timeout_seconds=60),
        fault_tolerance=FaultTolerance(
            enable=True, process_group="gloo", process_group_timeout_ms=10000,
            semi_sync_method="diloco", sync_steps=6, num_fragments=2),
    )


def _llama3_8b_ft(semi_sync_method: str | None, **diloco: int) -> FaultTolerantTrainer.Config:
    return _config(
        "8B", lr=3e-4, warmup=200, batch=1, seq_len=8192, steps=1000, dataset="c4",
        assets="./assets/hf/Llama-3.1-8B", shard=8, selective_ac=True,
        checkpoint=TorchFTCheckpointManager.Config(
            enable=True, folder="checkpoint", interval=1200, async_mode="async",
            keep_latest_k=2, last_save_model_only=True, export_dtype="float32"),
        comm=CommConfig(trace_buf_size=0, train_timeout_seconds=300),
        fault_tolerance=FaultTolerance(
            enable=True, process_group="nccl", process_group_timeout_ms=10000,
            semi_sync_method=semi_sync_method, **diloco),
    )


def llama3_8b_ft() -> FaultTolerantTrainer.Config:
    """slurm/configs/llama3_8b_ft.toml: per-step FT-HSDP, FSDP over the node's 8 GPUs."""
    return _llama3_8b_ft(None)


def llama3_8b_diloco() -> FaultTolerantTrainer.Config:
    """slurm/configs/llama3_8b_diloco.toml: streaming DiLoCo, 20 inner steps, 2 fragments."""
    return _llama3_8b_ft("diloco", sync_steps=20, num_fragments=2)


def llama3_8b() -> FaultTolerantTrainer.Config:
    """slurm/configs/llama3_8b.toml: classic (FT off), FSDP over every GPU of every node."""
    config = _llama3_8b_ft(None)
    config.fault_tolerance.enable = False
    config.parallelism.data_parallel_shard_degree = -1
    config.metrics.log_freq = 10
    config.checkpoint.last_save_model_only = True
    return config
