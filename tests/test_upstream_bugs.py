"""Each fix of fixes.py still needed on the installed stack: a witness per fix that the cause is
still upstream, read from the installed torchtitan / torchft (their source and defaults, not
a copy). Run on both stacks (`python -m tests.second_stack`): a witness that fails on a stack
says that stack fixed the bug upstream, and the fix's records should then be switched off
there (patches.py) with a test that shows the upstream fix.

What the source shows is the cause; the real training tests show the effect where it can be
shown on CPU (fix 2: test_per_step_heal_without_optimizer_fix_diverges, fix 5 in the same
run, fix 9: tests/test_checkpoint_training.py), on both stacks too. The fixes that change
torchft alone (4's transport, 6, 7, 8) are tied to the torchft build, which both stacks pin
to the same nightly: the last test holds that."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path

import pytest

from ftslurm import stacks
from ftslurm.replica import patches

pytestmark = [pytest.mark.both_stacks, pytest.mark.timeout(120)]


def _source(path: str) -> str:
    obj = patches.resolve(path)
    assert obj is not patches._MISSING, path
    return inspect.getsource(obj)


def _manager_call(init_source: str) -> str:
    """The arguments of the `Manager(` call in the FT manager's __init__."""
    m = re.search(r"\.Manager\((.*?)\n\s*\)", init_source, re.S)
    assert m, init_source[:2000]
    return m.group(1)


def test_fix_1_the_ft_manager_asks_torchft_for_an_async_quorum_in_per_step_mode() -> None:
    src = _source(f"{patches.FT_MANAGER}.__init__")
    assert re.search(r"use_async_quorum\s*=\s*\w+\.semi_sync_method is None", src)
    assert "use_async_quorum=self.use_async_quorum" in _manager_call(src)


def test_fix_2_the_ft_optimizer_state_dict_is_the_start_up_cache() -> None:
    body = _source(f"{patches.STACK.ft_optimizer}.state_dict")
    assert re.search(r"return self\.cache_state_dict\s*$", body.strip())


def test_fix_3_the_cross_replica_gradient_hook_is_hung_on_fsdp_modules_only() -> None:
    src = _source(f"{patches.FT_MANAGER}.maybe_set_all_reduce_hook")
    assert "isinstance(m, FSDPModule)" in src and "register_post_accumulate_grad_hook" not in src


def test_fix_4_torchft_s_manager_gets_no_timeout_and_defaults_to_60_s() -> None:
    from torchft.manager import Manager

    assert "timeout=" not in _manager_call(_source(f"{patches.FT_MANAGER}.__init__"))
    default = inspect.signature(Manager.__init__).parameters["timeout"].default
    assert default == timedelta(seconds=60)


def test_fix_5_each_per_step_data_position_is_kept_forever() -> None:
    src = _source(f"{patches.CHECKPOINTER}._ft_save")
    assert "purge" not in src and "rmtree" not in src


def test_fix_9_a_restart_loads_the_newest_data_position_not_the_model_s() -> None:
    src = _source(f"{patches.CHECKPOINTER}._ft_load")
    assert "self._find_load_step(folder=self._ft_folder())" in src


def test_fix_10_torchtitan_sets_fsdp_s_gradient_divide_factor_to_one() -> None:
    import torchtitan

    package = Path(torchtitan.__file__).parent
    callers = [p for p in package.rglob("*.py")
               if "set_gradient_divide_factor(1.0)" in p.read_text(errors="replace")]  # fmt: skip
    assert callers


def test_the_cpu_shims_are_still_missing_from_torch_cpu() -> None:
    import torch

    for record in patches.RECORDS:
        if record.owner == "cpu" and record.kind == patches.ADD:
            name = record.target.rsplit(".", 1)[1]
            assert not hasattr(torch.cpu, name) or getattr(torch.cpu, name).__module__.startswith(
                "ftslurm"), record.target  # fmt: skip


def test_the_torchft_side_fixes_see_the_same_torchft_on_both_stacks() -> None:
    torchft = {s.name: s.versions["torchft-nightly"] for s in stacks.STACKS}
    assert len(set(torchft.values())) == 1, torchft
