"""Make torchtitan 0.2.2 train on a CPU-only machine (DEVICE=cpu).

Must run BEFORE torchtitan is imported: torchtitan picks its device at import time
(`_get_available_device_type() or "cuda"` in torchtitan.tools.utils), and its memory monitor
calls CUDA-only helpers on that device module. See shared notes torchtitan-cpu.md.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from types import SimpleNamespace

from ftslurm.replica import patches
from ftslurm.replica.plan import flag_values


def fix_argv(argv: Sequence[str]) -> list[str]:
    """Force float32 compute: bfloat16 autocast on a CPU without AVX512-BF16 made a step
    ~25 s instead of ~1 s. Kept if the caller chose explicitly."""
    argv = list(argv)
    if not flag_values(argv, "--training.mixed_precision_param"):
        argv.append("--training.mixed_precision_param=float32")
    return argv


# Flavors added to torchtitan's Llama 3 table on CPU, chosen with FTSLURM_EXTRA_ARGS=
# '--model.flavor=NAME': the debug model's whole healed state is 74 MB, too small for a heal's
# transfer to show beside a restart. debugmodel_wide: 107 M parameters (0.43 GB fp32); a heal
# carries them with AdamW's two moments and DiLoCo's fragment state, about 5x that (estimated).
# With --training.local_batch_size=1 --training.seq_len=64 a step takes ~2 s on one core.
FLAVORS: dict[str, dict[str, int]] = {
    "debugmodel_wide": {"dim": 1024, "n_layers": 8, "n_heads": 16, "vocab_size": 2048,
                        "rope_theta": 500000},
}  # fmt: skip


def add_flavors() -> None:
    """Register FLAVORS in torchtitan's llama3 table (llama3_ft shares the same dict). On
    torchtitan 0.3 there is no such table (a config function fixes the model; no
    `--model.flavor`): nothing to add."""
    try:
        from torchtitan.models.llama3 import TransformerModelArgs, llama3_args
    except ImportError:
        return

    for name, kw in FLAVORS.items():
        llama3_args.setdefault(name, TransformerModelArgs(**kw))


def _peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux: the step lines' "memory" then shows this replica's peak RSS.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _total_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _memory_stats(_device: object = None) -> dict[str, int]:
    peak = _peak_rss_bytes()
    return {"active_bytes.all.peak": peak, "reserved_bytes.all.peak": peak}


# torch.cpu's stand-ins for the torch.cuda helpers torchtitan calls on its device module
# (patches.py records them)
SHIMS = {
    "cpu.get_device_name": lambda _device=None: "cpu",
    "cpu.get_device_properties": lambda _device=None: SimpleNamespace(
        total_memory=_total_memory(), name="cpu"),
    "cpu.memory_stats": _memory_stats,
    # barrier(device_ids=[current_device()]) wants an int, torch.cpu returns "cpu"
    "cpu.current_device": lambda: 0,
    "cpu.reset_peak_memory_stats": lambda _device=None: None,
    "cpu.empty_cache": lambda: None,
}  # fmt: skip


def prepare() -> None:
    """Environment, torch.cpu shims and device type. sys.argv must already be final: importing
    torchtitan binds `ConfigManager.parse_args(args=sys.argv[1:])` (a default argument)."""
    if "torchtitan" in sys.modules:
        raise RuntimeError("ftslurm.replica.worker.cpu.prepare() must run before torchtitan is "
                           "imported")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    for name, value in SHIMS.items():
        patches.replace(name, value)
    with patches.swapped("cpu.device_type", lambda: "cpu"):
        import torchtitan.tools.utils as tt_utils  # binds device_type / device_module now
    assert tt_utils.device_type == "cpu", tt_utils.device_type
