"""torchtitan 0.3's presets (ftslurm/replica/worker/titan03/config_registry.py) hold the values of
the TOML presets torchtitan 0.2.2 runs (slurm/configs/*.toml), field by field: the two stacks
train the same model the same way. Runs on the second stack (`python -m tests.second_stack`);
on the pinned stack it is skipped (the config functions import torchtitan 0.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomllib

from ftslurm import stacks
from ftslurm.replica import plan as planlib

pytestmark = [pytest.mark.both_stacks, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[1]
# TOML (section, key) -> the 0.3 config's path where the name moved; None: no counterpart
# (0.2.2's job/model plumbing, chosen by the config function itself)
MOVED: dict[tuple[str, str], str | None] = {
    ("job", "dump_folder"): None, ("job", "description"): None, ("job", "print_config"): None,
    ("job", "custom_config_module"): None, ("model", "name"): None, ("model", "flavor"): None,
    ("model", "hf_assets_path"): "hf_assets_path",
    ("training", "dataset"): "dataloader.dataset",
    ("training", "dataset_path"): None,  # the launcher passes it (local assets)
    ("profiling", "enable_profiling"): "profiler.enable_profiling",
    ("activation_checkpoint", "mode"): None,  # checked below
    ("activation_checkpoint", "selective_ac_option"): None,
    ("optimizer", "name"): None, ("optimizer", "lr"): None, ("optimizer", "eps"): None,
}  # fmt: skip
FLAVOR_DIMS = {"debugmodel": 256, "8B": 4096}


def _get(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _presets() -> list[str]:
    return [name for name, p in planlib.PRESETS.items() if p.toml]


@pytest.fixture(scope="module")
def registry() -> Any:
    if stacks.installed() is not stacks.TITAN03:
        pytest.skip("torchtitan 0.3's config functions: run by python -m tests.second_stack")
    from ftslurm.replica.worker.titan03 import config_registry

    return config_registry


@pytest.mark.parametrize("preset", _presets())
def test_the_config_function_holds_the_toml_s_values(registry: Any, preset: str) -> None:
    toml = tomllib.loads((ROOT / planlib.CONFIG_DIR / planlib.PRESETS[preset].toml).read_text())
    config = getattr(registry, preset)()
    checked = 0
    for section, values in toml.items():
        for key, want in values.items():
            path = MOVED.get((section, key), f"{section}.{key}")
            if path is None:
                continue
            assert _get(config, path) == want, (preset, section, key)
            checked += 1
    assert checked >= 25, checked
    group = config.optimizer.param_groups[0]
    assert group.optimizer_name == toml["optimizer"]["name"]
    assert group.optimizer_kwargs["lr"] == toml["optimizer"]["lr"]
    assert group.optimizer_kwargs["eps"] == toml["optimizer"]["eps"]
    mode = toml["activation_checkpoint"]["mode"]
    assert (config.activation_checkpoint is None) == (mode == "none"), mode
    assert config.model_spec.model.dim == FLAVOR_DIMS[toml["model"]["flavor"]]
    assert config.fault_tolerance.enable == toml.get("fault_tolerance", {}).get("enable", False)
    assert config.fault_tolerance.semi_sync_method == toml.get("fault_tolerance", {}).get(
        "semi_sync_method")  # fmt: skip


def test_the_cpu_preset_runs_plain_sdpa_in_every_layer(registry: Any) -> None:
    """Flex attention has no backward on CPU (torch 2.15): the CPU preset swaps it."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    sdpa = ScaledDotProductAttention.Config
    layers = registry.debug_cpu().model_spec.model.layers
    assert layers and all(isinstance(la.attention.inner_attention, sdpa) for la in layers)
    gpu = registry.llama3_8b_ft().model_spec.model.layers
    assert not any(isinstance(la.attention.inner_attention, sdpa) for la in gpu)
