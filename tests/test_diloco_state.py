"""diloco_state.py (fix 11): the DiLoCo state a checkpoint holds, and how it comes back.

Unit tier: the pure rules, then a round trip through a real DCP checkpoint on disk between two
real torchft DiLoCo objects (a stub Manager, as tests/test_replica_early_sync.py: no quorum is
formed). That a resumed run is bit-identical is checked by tests/test_diloco_resume.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ftslurm import logvocab
from ftslurm.replica.worker import diloco_state as ds

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120), pytest.mark.both_stacks]


def test_the_counter_resumes_where_it_was_unless_a_sync_was_in_flight() -> None:
    assert ds.resume_local_step(0, 3, 0) == (0, True)
    assert ds.resume_local_step(2, 3, 0) == (2, True)  # the CPU preset: H = 6 / 2
    # delay 2 on H = 10: prepared at 8, synced at 10; a save at 8 or 9 had an all-reduce in
    # flight: prepare again at the next inner step
    assert ds.resume_local_step(7, 10, 2) == (7, True)
    assert ds.resume_local_step(8, 10, 2) == (7, False)
    assert ds.resume_local_step(9, 10, 2) == (7, False)


def test_only_this_ranks_items_are_read_and_a_state_must_be_whole() -> None:
    keys = ["model.w", "diloco.rank0.counters", "diloco.rank0.original.a.w",
            "diloco.rank0.momentum.a.w", "diloco.rank1.original.a.w", "diloco.rank10.counters"]
    assert ds.saved_items(keys, 0) == ["rank0.counters", "rank0.momentum.a.w",
                                       "rank0.original.a.w"]
    assert ds.saved_items(keys, 1) == ["rank1.original.a.w"]
    items = ds.saved_items(keys, 0)
    assert ds.complete(items, 0, ["a.w"])
    assert not ds.complete(items, 0, ["a.w", "b.w"])  # another model's fragments
    assert not ds.complete(ds.saved_items(keys, 1), 1, ["a.w"])  # no counters


class Manager:
    """What DiLoCo's constructor and the state's save and restore touch."""

    _use_async_quorum = False

    def __init__(self) -> None:
        self.state = {"step": 0, "batches_committed": 0}

    def register_state_dict_fn(self, *a: Any, **k: Any) -> None:
        pass

    def state_dict(self) -> dict[str, int]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.state = dict(state)


def _diloco(seed: int) -> tuple[Any, Any]:
    """A model of two fragments (as torchtitan's fragment_llm: modules of one model) and its
    DiLoCo, with torchtitan's outer optimizers."""
    import torch
    from torchft import local_sgd

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    parts = [model[0], model[1]]
    inner = torch.optim.AdamW(model.parameters())
    outer = [torch.optim.SGD(m.parameters(), lr=0.7, momentum=0.9, nesterov=True) for m in parts]
    return model, local_sgd.DiLoCo(Manager(), parts, inner, outer, sync_every=6)


def _outer_step(diloco: Any, fragment: int) -> None:
    """An outer step of one fragment with a pseudo-gradient (its momentum buffer is made)."""
    import torch

    frag = diloco._fragments[fragment]
    for p in frag._model_fragment.parameters():
        p.grad = torch.full_like(p, 0.25)
    frag._outer_optimizer.step()
    frag.save_parameters()


def test_a_checkpoint_round_trip_restores_fragments_momentum_and_schedule(tmp_path: Path,
                                                                          capsys) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    model, first = _diloco(0)
    _outer_step(first, 0)  # fragment 0 stepped, fragment 1 not yet (SGD: no state)
    first._local_step = 2
    first._manager.state = {"step": 1, "batches_committed": 2}
    saving = ds.DiLoCoState(model, 0)
    saving.attach(first)
    dcp.save({ds.KEY: saving}, checkpoint_id=str(tmp_path))

    there = ds.checkpoint_tensors(str(tmp_path))
    assert not any(k.startswith("diloco.rank0.momentum.1.") for k in there)  # none to save
    model2, second = _diloco(1)
    loading = ds.DiLoCoState(model2, 0)
    assert loading.expect(there, "step-5")
    dcp.load({ds.KEY: loading}, checkpoint_id=str(tmp_path))
    assert not ds.restored(second)
    loading.attach(second)  # DiLoCo is built after the load: the state waits for it

    assert ds.restored(second) and second._local_step == 2
    assert second._manager.state == {"step": 1, "batches_committed": 2}
    for a, b in zip(first._fragments, second._fragments, strict=True):
        for name, t in a.original_parameters.items():
            assert torch.equal(t, b.original_parameters[name])
    p0, q0 = (list(d._fragments[0]._model_fragment.parameters()) for d in (first, second))
    for p, q in zip(p0, q0, strict=True):
        assert torch.equal(first._fragments[0]._outer_optimizer.state[p]["momentum_buffer"],
                           second._fragments[0]._outer_optimizer.state[q]["momentum_buffer"])
    assert not second._fragments[1]._outer_optimizer.state  # still no outer step there
    line = ds.Restored(2, (0,), ds.Counters(2, 1, 2), 2, 3, True).line("step-5")
    assert line in capsys.readouterr().out
    assert "outer momentum of fragments 0," in line and "fragment 1 syncs next" in line


def test_a_checkpoint_saved_without_the_fix_loads_no_diloco_state(tmp_path: Path,
                                                                  capsys) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.ones(2)}, checkpoint_id=str(tmp_path))
    model, _ = _diloco(0)
    holder = ds.DiLoCoState(model, 0)
    assert not holder.expect(ds.checkpoint_tensors(str(tmp_path)), "step-4")
    assert logvocab.diloco_state_missing_line("step-4") in capsys.readouterr().out
