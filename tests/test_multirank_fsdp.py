"""Fix 10 (FTSLURM_FIX_GLOO_FSDP) on real FSDP2 over gloo, two processes, a tiny model: with
torchtitan's gradient divide factor 1.0 the reduce-scatter is PREMUL_SUM and gloo refuses it;
with the fix it is a SUM, and each rank's gradient shard is bit-for-bit the sum of the two
ranks' own gradients (what PREMUL_SUM(1.0) means)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ftslurm.wait import free_port

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


def _rank(rank: int, port: int, fix: bool, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2")  # fmt: skip
    dist.init_process_group("gloo")
    try:
        sys.path.insert(0, str(ROOT))
        if fix:
            from ftslurm.replica.worker import fixes

            fixes.fix_gloo_fsdp()
        from torch.distributed.fsdp import fully_shard  # as torchtitan imports it: by name

        def model() -> torch.nn.Module:
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))

        torch.manual_seed(100 + rank)
        batch = torch.randn(4, 8)
        ref = model()  # this rank's own gradient, summed over the ranks with a plain SUM
        ref(batch).sum().backward()
        want = ref[0].weight.grad.clone()
        dist.all_reduce(want)

        mesh = init_device_mesh("cpu", (2,))
        sharded = model()
        fully_shard(sharded[0], mesh=mesh)
        fully_shard([sharded[1]], mesh=mesh)  # a list is one group (torchtitan's [norm, output])
        fully_shard(sharded, mesh=mesh)
        for m in sharded.modules():  # what torchtitan's disable_fsdp_gradient_division does
            if hasattr(m, "set_gradient_divide_factor"):
                m.set_gradient_divide_factor(1.0)
        try:
            sharded(batch).sum().backward()
        except RuntimeError as e:
            result = f"error: {e}"
        else:
            got = sharded[0].weight.grad.to_local()
            same = torch.equal(got, want[4 * rank : 4 * rank + 4])
            result = "equal" if same else f"differs: {got} vs {want}"
        Path(out, str(rank)).write_text(result)
    finally:
        dist.destroy_process_group()
    # A spawned gloo process can abort in the interpreter's finalization, after this function
    # has returned ("terminate called without an active exception", pytorch/pytorch#190489),
    # with or without the fix. The result is written and the group destroyed: exit without
    # finalizing, so the spawn reports this rank's work, not torch's teardown.
    os._exit(0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fix", [False, True])
def test_fsdp_over_gloo_reduces_with_sum_under_fix_10(fix: bool, tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(free_port(), fix, str(tmp_path)), nprocs=2)
    results = [(tmp_path / str(r)).read_text() for r in (0, 1)]
    if fix:
        assert results == ["equal", "equal"], results
    else:  # upstream: the first backward fails on gloo
        assert all("Cannot use ReduceOp.PREMUL_SUM with Gloo" in r for r in results), results
