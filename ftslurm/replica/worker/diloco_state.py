"""A DiLoCo run resumed from a model checkpoint continues as the run that never stopped
(fix 11 in fixes.py, FTSLURM_FIX_DILOCO_STATE).

Why: torchft's DiLoCo keeps, per fragment, the outer optimizer's state (SGD's momentum: lr 0.7,
momentum 0.9, nesterov, torchtitan's `maybe_semi_sync_training`) and `original_parameters`
(the fragment's weights at its last sync, from which the next pseudo-gradient is taken), plus
its inner-step counter; torchft's Manager keeps its step, which picks the fragment that syncs
next. `_StreamingDiLoCoFragment.register_state_dict_fn` gives the first two to the Manager for
a heal only (torchft issue 277, torchtitan 4209), and torchtitan 0.2.2's CheckpointManager
saves the model, optimizer, LR schedule, data position and train state only. After every
replica stopped, a resume from the step-N folder therefore starts the outer momentum from
zero, takes the loaded weights as the last sync's (wrong whenever N falls between syncs),
counts inner steps from 0 and syncs fragment 0 first: the resumed run is another run.

Fix: one more entry, `diloco`, in torchtitan's checkpoint states, so it is written into the
step-N folder with the model (only the saving replica writes it, as the model):
- per parameter (by its name in the model, so fragments need not exist to name it):
  `original.<fqn>` and, once its outer optimizer has stepped, `momentum.<fqn>` (the local
  shard of a DTensor: each rank its own keys, `rank<R>.`);
- `counters`: the inner-step counter, the Manager's step and its committed batches.
torchtitan builds the DiLoCo object inside `train()`, after `checkpointer.load`, so what the
load read is held here and applied when DiLoCo is built (its `__init__`). DCP loads only the
keys its template names, and the template comes from the checkpoint's own `.metadata`: a
momentum buffer only where one was saved (SGD has none before its first step), nothing at all
from a checkpoint saved without this fix (then one line says the outer state starts fresh).

Between syncs the replicas differ: each trained its fragments on its own data, and the inner
optimizer (AdamW) is never averaged. torchtitan's FT checkpoint is written by one replica
(participating rank 0), so every replica would resume with that replica's weights and inner
optimizer. So at each model checkpoint step every replica also writes its own model and inner
optimizer into its per-replica FT folder (`ft-replicat-<R>/step-N`, next to its data position,
kept as long as the model checkpoint is: ft_checkpoints.py), and loads them back when DiLoCo
is built; a replica without them (it was down at that save) keeps the saving replica's, as a
heal would give it. Cost: a full checkpoint per replica at each model checkpoint step.

The restored counter is the one of the uninterrupted run, so a restored replica does not take
the early first sync (early_sync.py): that sync happens before the first inner step and would
be a sync the uninterrupted run never made. A replica restarted alone while its peers train
(model checkpoints on) therefore asks for its healing quorum at its restored sync point, up to
H inner steps later, as upstream does; the heal then replaces all of this state with the
peer's. A checkpoint taken while a fragment's sync was in flight (fragment_sync_delay > 0,
between prepare and sync) cannot be resumed bit for bit (its all-reduce is not saved): the
counter is set to prepare that fragment again at the next inner step, and the line says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftslurm import logvocab, stacks
from ftslurm.replica import patches

KEY = "diloco"  # the entry in torchtitan's CheckpointManager.states
# a replica's own model and inner optimizer, in its FT folder (torchtitan's MODEL, OPTIMIZER)
OWN_MODEL, OWN_OPTIMIZER = "replica_model", "replica_optimizer"
ORIGINAL, MOMENTUM, COUNTERS = "original", "momentum", "counters"
_RESTORED = "_ftslurm_diloco_restored"  # set on a DiLoCo whose state came from a checkpoint


def prefix(rank: int) -> str:
    """The keys of one rank's state inside the `diloco` entry."""
    return f"rank{rank}."


@dataclass(frozen=True)
class Counters:
    """DiLoCo's schedule at the save: its inner-step counter and the Manager's step (which
    fragment syncs next: step % fragments) and committed batches."""

    local_step: int
    manager_step: int
    batches_committed: int


def resume_local_step(saved: int, sync_every: int, delay: int) -> tuple[int, bool]:
    """The inner-step counter to resume with, and whether the run goes on exactly as before.
    DiLoCo prepares a fragment's sync when its counter reaches `sync_every - delay` and syncs
    at `sync_every` (then 0). A counter inside [prepare, sync) means an all-reduce was in
    flight at the save, which no checkpoint holds: the fragment is prepared again at the next
    inner step (the Manager's restored step picks the same fragment)."""
    prepare_at = sync_every - delay
    if 0 <= saved < prepare_at:
        return saved, True
    return max(0, prepare_at - 1), False


def saved_items(keys: Iterable[str], rank: int) -> list[str]:
    """The keys (inside the `diloco` entry) of `rank`'s state among a checkpoint's flattened
    keys (`diloco.rank0.original.<fqn>`, ...)."""
    head = f"{KEY}.{prefix(rank)}"
    return sorted(k.removeprefix(f"{KEY}.") for k in keys if k.startswith(head))


def complete(items: Iterable[str], rank: int, fqns: Iterable[str]) -> bool:
    """Whether a checkpoint's items hold the counters and an original for every parameter of
    the fragments (`fqns`): anything less is not this model's DiLoCo state."""
    have = set(items)
    p = prefix(rank)
    return f"{p}{COUNTERS}" in have and all(f"{p}{ORIGINAL}.{f}" in have for f in fqns)


def _local(t: Any) -> Any:
    """A DTensor's local shard (each rank saves its own), else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _on_param(p: Any, saved: Any) -> Any:
    """A saved local tensor as the momentum buffer of parameter `p` (a DTensor like `p`)."""
    from torch.distributed.tensor import DTensor

    if isinstance(p, DTensor):
        local = saved.to(device=p.to_local().device, dtype=p.dtype)
        return DTensor.from_local(local, p.device_mesh, p.placements, shape=p.shape,
                                  stride=p.stride())  # fmt: skip
    return saved.to(device=p.device, dtype=p.dtype).clone()


def _params(diloco: Any, fqn_of: Mapping[int, str]) -> Iterable[tuple[Any, str, str, Any]]:
    """(fragment, name in the fragment, name in the model, parameter) of every fragment
    parameter."""
    for frag in diloco._fragments:
        for name, p in frag._model_fragment.named_parameters():
            yield frag, name, fqn_of[id(p)], p


def capture(diloco: Any, fqn_of: Mapping[int, str], rank: int) -> dict[str, Any]:
    """The state to save, live tensors (DCP copies them as it saves the model)."""
    import torch

    p_ = prefix(rank)
    out: dict[str, Any] = {}
    for frag, name, fqn, p in _params(diloco, fqn_of):
        out[f"{p_}{ORIGINAL}.{fqn}"] = frag.original_parameters[name]
        buf = frag._outer_optimizer.state.get(p, {}).get("momentum_buffer")
        if buf is not None:
            out[f"{p_}{MOMENTUM}.{fqn}"] = _local(buf)
    m = diloco._manager.state_dict()
    out[f"{p_}{COUNTERS}"] = torch.tensor(
        [diloco._local_step, m["step"], m["batches_committed"]], dtype=torch.int64
    )
    return out


@dataclass(frozen=True)
class Restored:
    """What `restore` put back, for its log line."""

    fragments: int
    momentum: tuple[int, ...]  # the fragments whose outer optimizer had stepped
    counters: Counters
    local_step: int
    sync_every: int
    exact: bool

    def line(self, source: str) -> str:
        return logvocab.diloco_state_line(
            source, self.fragments, self.momentum, self.local_step, self.sync_every,
            self.counters.manager_step, self.counters.manager_step % max(self.fragments, 1),
            self.exact)  # fmt: skip


def restore(diloco: Any, saved: Mapping[str, Any], fqn_of: Mapping[int, str],
            rank: int) -> Restored:  # fmt: skip
    """Put a checkpoint's state (`complete`) into a built DiLoCo and its Manager."""
    p_ = prefix(rank)
    momentum = set()
    for frag, name, fqn, p in _params(diloco, fqn_of):
        frag.original_parameters[name].copy_(saved[f"{p_}{ORIGINAL}.{fqn}"])
        if (buf := saved.get(f"{p_}{MOMENTUM}.{fqn}")) is not None:
            frag._outer_optimizer.state[p]["momentum_buffer"] = _on_param(p, buf)
            momentum.add(frag._fragment_id)
    counters = Counters(*(int(v) for v in saved[f"{p_}{COUNTERS}"].tolist()))
    local, exact = resume_local_step(counters.local_step, diloco._sync_every,
                                     diloco._fragment_sync_delay)  # fmt: skip
    diloco._local_step = local
    diloco._manager.load_state_dict({"step": counters.manager_step,
                                     "batches_committed": counters.batches_committed})
    setattr(diloco, _RESTORED, True)
    return Restored(len(diloco._fragments), tuple(sorted(momentum)), counters, local,
                    diloco._sync_every, exact)  # fmt: skip


def restored(diloco: Any) -> bool:
    """Whether this DiLoCo's schedule came from a checkpoint (early_sync.py leaves it)."""
    return bool(getattr(diloco, _RESTORED, False))


def checkpoint_keys(checkpoint_id: str | Path) -> list[str]:
    """The flattened keys a DCP checkpoint folder lists in its `.metadata` (none: no complete
    checkpoint there)."""
    from torch.distributed.checkpoint import FileSystemReader

    if not (Path(checkpoint_id) / ".metadata").is_file():
        return []
    return list(FileSystemReader(str(checkpoint_id)).read_metadata().state_dict_metadata)


def holds_own_state(keys: Iterable[str]) -> bool:
    """Whether a replica's FT folder step holds its own model and inner optimizer."""
    heads = {k.split(".", 1)[0] for k in keys}
    return OWN_MODEL in heads and OWN_OPTIMIZER in heads


def own_entries(checkpointer: Any) -> dict[str, Any]:
    """This replica's model and inner optimizer, as entries of a DCP state dict (Statefuls:
    torchtitan's own, which DCP saves and loads as in its model checkpoint)."""
    states = checkpointer.states
    return {OWN_MODEL: states["model"], OWN_OPTIMIZER: states["optimizer"]}


def checkpoint_tensors(checkpoint_id: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """The `diloco` tensors a DCP checkpoint holds: flattened key -> (shape, dtype), from its
    `.metadata` (nothing is loaded)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    md = FileSystemReader(checkpoint_id).read_metadata().state_dict_metadata
    return {k: (tuple(v.size), v.properties.dtype) for k, v in md.items()
            if k.startswith(f"{KEY}.") and isinstance(v, TensorStorageMetadata)}  # fmt: skip


class DiLoCoState:
    """The `diloco` entry of torchtitan's checkpoint states (a DCP Stateful). Saving: the live
    DiLoCo's state. Loading: a template of what the checkpoint holds; what is read is kept
    until DiLoCo is built (`attach`), then applied."""

    def __init__(self, model: Any, rank: int, checkpointer: Any = None) -> None:
        self.model = model
        self.rank = rank
        self.checkpointer = checkpointer
        self.diloco: Any = None
        self.template: dict[str, Any] | None = None
        self.loaded: dict[str, Any] | None = None
        self.source = ""

    def fqn_of(self) -> dict[int, str]:
        return {id(p): n for n, p in self.model.named_parameters()}

    def expect(self, tensors: Mapping[str, tuple[tuple[int, ...], Any]], source: str) -> bool:
        """Prepare the template of a load from `source`; False (and a line) when it holds no
        state of this rank's."""
        import torch

        self.source = source
        items = saved_items(tensors, self.rank)
        if not items:
            print(logvocab.diloco_state_missing_line(source), flush=True)
            return False
        self.template = {}
        for item in items:
            shape, dtype = tensors[f"{KEY}.{item}"]
            self.template[item] = torch.empty(shape, dtype=dtype)
        return True

    def state_dict(self) -> dict[str, Any]:
        if self.template is not None:
            return self.template  # a load: DCP reads into it
        if self.diloco is None:
            return {}
        return capture(self.diloco, self.fqn_of(), self.rank)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.loaded, self.template = dict(state_dict), None
        if self.diloco is not None:
            self._apply()

    def attach(self, diloco: Any) -> None:
        self.diloco = diloco
        if self.loaded is not None:
            self._load_own()
            self._apply()

    def _load_own(self) -> None:
        """This replica's own model and inner optimizer of the step loaded, from its FT
        folder, over the saving replica's."""
        if self.checkpointer is None or not self.source:
            return
        import torch.distributed.checkpoint as dcp

        folder = Path(self.checkpointer._ft_folder()) / Path(self.source).name
        found = holds_own_state(checkpoint_keys(folder))
        if found:
            dcp.load(own_entries(self.checkpointer), checkpoint_id=str(folder))
        print(logvocab.diloco_own_state_line(folder, found), flush=True)

    def _apply(self) -> None:
        loaded, self.loaded = self.loaded or {}, None
        fqns = [fqn for _, _, fqn, _ in _params(self.diloco, self.fqn_of())]
        if not complete(loaded, self.rank, fqns):
            print(logvocab.diloco_state_missing_line(self.source, "not this model's"), flush=True)
            return
        print(restore(self.diloco, loaded, self.fqn_of(), self.rank).line(self.source),
              flush=True)  # fmt: skip


HOLDER: list[DiLoCoState] = []  # the trainer's entry, for the DiLoCo train() builds


def install() -> None:
    """Fix 11: the DiLoCo state goes into torchtitan's checkpoints and comes back from them."""
    names = ("diloco_state.trainer_init", "diloco_state.dcp_load", "diloco_state.init",
             "diloco_state.ft_save")
    if patches.installed(names[0]) or not patches.ready(*names):
        return
    makers = (_adding_the_entry, _reading_what_is_there, _attaching, _saving_own_state)
    for name, make in zip(names, makers, strict=True):
        patches.install(name, make)


def _adding_the_entry(upstream: Callable[..., None]) -> Callable[..., None]:
    """The FT trainer's __init__, then the `diloco` entry in its checkpointer's states
    (DiLoCo runs with model checkpoints on). 0.2's FTTrainer(job_config), 0.3's
    FaultTolerantTrainer(config=...): the config is read back from the built trainer."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched __init__
        upstream(self, *args, **kwargs)
        config = stacks.trainer_config(self)
        method = getattr(config.fault_tolerance, "semi_sync_method", None) or ""
        checkpointer = getattr(self, "checkpointer", None)
        if method.lower() != "diloco" or not getattr(checkpointer, "enable", False):
            return
        holder = DiLoCoState(self.model_parts[0], int(os.environ.get("RANK", "0")), checkpointer)
        checkpointer.states[KEY] = holder
        HOLDER[:] = [holder]

    return __init__


def _reading_what_is_there(upstream: Callable[..., None]) -> Callable[..., None]:
    """CheckpointManager.dcp_load: the `diloco` entry's template is what the checkpoint holds;
    none at all when it holds nothing of it."""

    def dcp_load(self: Any, state_dict: dict[str, Any], checkpoint_id: str, from_hf: bool,
                 from_quantized: bool) -> None:  # fmt: skip
        holder = state_dict.get(KEY)
        if isinstance(holder, DiLoCoState):
            there = {} if from_hf else checkpoint_tensors(checkpoint_id)
            if not holder.expect(there, checkpoint_id):
                state_dict = {k: v for k, v in state_dict.items() if k != KEY}
        return upstream(self, state_dict, checkpoint_id, from_hf, from_quantized)

    return dcp_load


def _attaching(upstream: Callable[..., None]) -> Callable[..., None]:
    """DiLoCo.__init__, then the trainer's entry is bound to it (a loaded state applied)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched __init__
        upstream(self, *args, **kwargs)
        if HOLDER:
            HOLDER[0].attach(self)

    return __init__


def _saving_own_state(upstream: Callable[..., None]) -> Callable[..., None]:
    """CheckpointManager._ft_save: at a model checkpoint step, this replica's data position
    goes with its own model and inner optimizer (the replicas differ between syncs)."""

    def _ft_save(self: Any, step: int) -> None:
        if not isinstance(self.states.get(KEY), DiLoCoState) or not self._should_save(step):
            upstream(self, step)
            return
        positions = self.ft_states
        self.ft_states = {**positions, **own_entries(self)}
        try:
            upstream(self, step)  # DCP stages what it saves before it returns
        finally:
            self.ft_states = positions

    return _ft_save
