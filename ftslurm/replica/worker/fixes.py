"""Fixes for torchtitan 0.2.2 + torchft bugs that hit FT runs (healing, and the dataloader
checkpoints of fix 5), one place each, each with an off switch.

Applied in the training process (ftslurm.replica.worker.train) before the trainer is built. Every
fix logs one line saying it is on; set the switch to 0 to run upstream behaviour (to
reproduce a bug, or once upstream is fixed).

1. FTSLURM_FIX_ASYNC_QUORUM (per-step mode): torchtitan's FTManager builds torchft's Manager
   with `use_async_quorum = semi_sync_method is None`. With the async quorum, the quorum
   thread serves the checkpoint to a healing peer (`send_checkpoint(self._manager_state_dict())`
   -> `model.state_dict()`), and FSDP2's state-dict pre-hook swaps sharded DTensor params back
   onto the modules while the main thread is mid-forward: the SURVIVOR crashes with
   "aten.mm.default got mixed torch.Tensor and DTensor" at a heal (torchtitan issue 4754).
   Fix: the torchft Manager gets use_async_quorum=False, so quorum + checkpoint send finish
   before forward starts (cost: quorum latency on the critical path). torchtitan's own
   `FTManager.use_async_quorum` stays True, so its cross-replica gradient all-reduce hook and
   loss sync are still installed.
2. FTSLURM_FIX_OPTIMIZER_STATE: `FTOptimizersContainer.state_dict()` returns a dict cached once
   at start (`init_cache_state_dict`). Tensors in it are shared with the live optimizer, but
   scalars such as each param group's `lr` are copied by value at cache time, so a healing
   replica loads a stale lr and its first step differs from the survivor's: the replicas
   are silently different forever after. Fix: return a fresh state dict (the base
   OptimizersContainer behaviour).
3. FTSLURM_FIX_UNSHARDED_ALLREDUCE (per-step mode, replicas of ONE rank, e.g. DEVICE=cpu):
   torchtitan hangs its cross-replica gradient all-reduce on FSDP modules only, and applies
   FSDP only when dp_shard > 1, so 1-rank replicas never average gradients and drift apart
   between heals. Fix: the same all-reduce (ReduceOp.AVG over torchft's managed process
   group) as a post-accumulate-grad hook on every parameter when the model has no FSDP module.
4. FTSLURM_FIX_HEAL_TIMEOUT (large models): torchtitan builds torchft's Manager without a
   timeout, so its HTTP checkpoint transport gets the constructor default of 60 s, and
   TORCHFT_TIMEOUT_SEC does not reach it (torchft reads that variable after the transport is
   built). The survivor's `should_commit` -> `disallow_checkpoint` takes the transport's write
   lock, which waits for a healing peer's download to end: a heal longer than 60 s (an 8B
   replica sends ~12 GB per rank, 8 ranks per node through one NIC) raises TimeoutError in the
   SURVIVOR. Fix: the Manager gets the checkpoint transport FTSLURM_HEAL_TRANSPORT selects
   (transport.py; torchft's own HTTPTransport or PGTransport, chosen by bench/heal_speed.py)
   with the timeout FTSLURM_HEAL_TIMEOUT_S [600] (also each HTTP socket's timeout); everything
   else is torchft's.
5. FTSLURM_FIX_FT_CHECKPOINT_RETENTION (every FT run): torchtitan saves each replica's
   dataloader position at every step and never deletes one. Fix: the newest complete step and
   the one being written are kept, all a restart reads (ft_checkpoints.py).
6. FTSLURM_FIX_HEAL_TIMEOUT_FLOOR (large models): with the synchronous quorum the survivor
   goes on once its state is servable, and its next cross-replica collective waits for the
   joiner's whole download (a survivor that serves no heal, with 3+ replicas, waits so with
   any transport). PG_TIMEOUT_S (10 s in the 8B preset) is sized for step skew: an 8B heal
   (~12 GB per rank) made the survivor abort its step. Fix: at the Manager's first quorum the
   state's size per rank / FTSLURM_HEAL_MBPS [500] gives the heal's time; twice that is added
   to the process group's and the Manager's timeouts (transport.HealBudget), logged with the
   numbers.
7. FTSLURM_FIX_RENDEZVOUS_NAMESPACE (a Lighthouse restart): torchft names a quorum's process
   group rendezvous by the quorum id alone (`<first member's store>/torchft/<quorum_id>`), and
   a restarted Lighthouse numbers its quorums from 1 again. The first member (replica 0,
   which outlived the restart) still holds the old quorum's keys under that id in its store,
   so the new group's ranks read their peers' old addresses: gloo's connectFullMesh fails
   (`Connection refused`, or a connect timeout of the process group's timeout) at the new
   quorums whose ids the old Lighthouse had used. With 8 replicas and the Lighthouse
   restarted after quorum 4 (tests/test_scale_slurm.py), the new quorums 2 and 3 cannot
   connect for 75 s and a replica does not heal within the test's 120 s. Fix:
   the rendezvous is named by the quorum id, its max step and its members' ids (each
   replica's id has a per-process uuid), the same for every member of a quorum and new
   after a restart.
8. FTSLURM_FIX_PEER_ABORT (a silent peer): a peer that hangs, stops or loses its node
   without closing a socket keeps every survivor inside its cross-replica collective until
   PG_TIMEOUT_S (with fix 6's floor: 82 s for the 8B preset on an H200), although the
   Lighthouse drops its heartbeat after its heartbeat timeout. Fix: once a step is overdue,
   each process reads the Lighthouse's /status page; a quorum member marked gone fails the
   step at once, so the next quorum forms as after a crash; a process that stood still
   itself does not commit that step (peer_watch.py).
9. FTSLURM_FIX_CONSISTENT_RESUME (model checkpoints on, a restart of every replica): torchtitan
   0.2.2 loads the model, optimizer, LR schedule and step from the newest complete model
   checkpoint (step M, saved every `checkpoint.interval` steps) but each replica's data
   position from its newest per-step FT dataloader checkpoint (step D, up to interval - 1
   steps later: `CheckpointManager._ft_load` picks its own newest step), so after a
   whole-array restart the steps M+1..D of every replica's data are never trained on (fixed
   upstream after 0.2.2, torchtitan PR 4686); and fix 5 would delete the data position of step
   M. A model folder without `.metadata` (a save cut off) is skipped silently. Fix
   (ft_checkpoints.install_resume): the data positions of the model checkpoints on disk are
   kept; a restart loads the data position of step M (none when no model checkpoint: the data
   starts over with the model), says so, and names each half-written checkpoint it skips; if
   its first quorum heals it from a peer that trained on without it, it takes its newest
   position instead (a replica or node failure: its steps up to there were committed); the
   positions of the lost steps after M are deleted before its first save. Every saved data
   position is logged (`[ftslurm] data position: replica R step N sample_idx K`).
10. FTSLURM_FIX_GLOO_FSDP (replicas of several ranks on CPU, GPUS_PER_NODE > 1 with
   DEVICE=cpu): torchtitan sets every FSDP module's gradient divide factor to 1.0 (it divides
   the loss by the global token count itself), so FSDP2 reduce-scatters gradients with
   `ReduceOp.PREMUL_SUM(1.0)`, and gloo has no PREMUL_SUM: the first backward fails with
   "Cannot use ReduceOp.PREMUL_SUM with Gloo". Fix: every module `fully_shard` shards on a CPU
   mesh gets FSDP's own `set_force_sum_reduction_for_comms(True)`: a SUM reduce-scatter and a
   post-division by the same factor (1.0, exact: the gradients are bit-for-bit those of
   PREMUL_SUM(1.0)). A GPU mesh is left as it is. `fully_shard` is wrapped where torchtitan
   looks it up (torch.distributed.fsdp, and each torchtitan module that imported it by name).
11. FTSLURM_FIX_DILOCO_STATE (DiLoCo, model checkpoints on, a restart of every replica):
   torchft gives DiLoCo's outer optimizer state and each fragment's last-sync weights
   (`original_parameters`) to the Manager for healing only (torchft issue 277, torchtitan
   4209), and torchtitan 0.2.2 checkpoints neither, nor DiLoCo's inner-step counter or the
   Manager's step (which fragment syncs next): a resume restarts the outer momentum at zero,
   takes the loaded weights as the last sync's and starts the sync schedule over, so the run
   goes on differently from one that never stopped; and between syncs the replicas' weights
   and inner optimizers differ, while one replica writes the checkpoint for all. Fix
   (diloco_state.py): DiLoCo's state is one more entry of torchtitan's checkpoint (the step-N
   folder), each replica's own weights and inner optimizer go into its FT folder at that step,
   and both are applied when DiLoCo is built after the load, with lines saying what was
   restored.

Each upstream attribute a fix changes is a record in patches.py (`Fix.records`: the records
naming its switch), with the versions it was made for; a fix whose target is missing in the
installed torch / torchft / torchtitan is skipped with one line on stderr (`apply`), not left
to raise AttributeError in training.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ftslurm import knobs
from ftslurm.replica import handoff, patches

SWITCHES = {
    "async_quorum": "FTSLURM_FIX_ASYNC_QUORUM",
    "optimizer_state": "FTSLURM_FIX_OPTIMIZER_STATE",
    "unsharded_allreduce": "FTSLURM_FIX_UNSHARDED_ALLREDUCE",
    "heal_timeout": "FTSLURM_FIX_HEAL_TIMEOUT",
    "ft_checkpoint_retention": "FTSLURM_FIX_FT_CHECKPOINT_RETENTION",
    "heal_timeout_floor": "FTSLURM_FIX_HEAL_TIMEOUT_FLOOR",
    "rendezvous_namespace": "FTSLURM_FIX_RENDEZVOUS_NAMESPACE",
    "peer_abort": "FTSLURM_FIX_PEER_ABORT",
    "consistent_resume": "FTSLURM_FIX_CONSISTENT_RESUME",
    "gloo_fsdp": "FTSLURM_FIX_GLOO_FSDP",
    "diloco_state": "FTSLURM_FIX_DILOCO_STATE",
}


@dataclass(frozen=True)
class Fix:
    name: str
    summary: str
    apply: Callable[[], None]

    @property
    def switch(self) -> str:
        return SWITCHES[self.name]

    @property
    def records(self) -> tuple[patches.Patch, ...]:
        """The upstream attributes this fix patches (patches.py: those naming its switch)."""
        return patches.for_switch(self.switch)

    def missing(self) -> list[str]:
        """One line per record whose target or needs this installation lacks."""
        return [line for r in self.records if (line := patches.check(r)) is not None]


def switch_on(variable: str, env: Mapping[str, str] | knobs.Settings | None = None) -> bool:
    """A launcher switch (a fix, the early first sync): a boolean knob, on unless set to
    0/false/no/off (the launcher's plan has already refused other values). `env`: this
    process's settings unless given."""
    return knobs.load(env)[variable]


def enabled(name: str, env: Mapping[str, str] | knobs.Settings | None = None) -> bool:
    """A fix is on unless its switch is 0/false/no/off."""
    return switch_on(SWITCHES[name], env)


def fix_async_quorum() -> None:
    """Bug 1: construct torchft's Manager with use_async_quorum=False."""
    if (patch := _manager_patch()) is not None:
        patch.kwargs["use_async_quorum"] = lambda _: False


def _quorum_line(manager: object) -> str:
    """How the built Manager runs its quorum, read back from it (not from the env)."""
    mode = {True: "async (quorum thread)", False: "sync (before forward)"}.get(
        getattr(manager, "_use_async_quorum", None), "unknown"
    )
    return f"[ftslurm] torchft quorum: {mode}"


def fix_heal_timeout() -> None:
    """Bug 4: the transport FTSLURM_HEAL_TRANSPORT selects, waiting FTSLURM_HEAL_TIMEOUT_S,
    not 60 s. `pg` goes through the Manager's own process group (its `pg` argument)."""
    from ftslurm.replica.worker import transport

    timeout = timedelta(seconds=knobs.environ().FTSLURM_HEAL_TIMEOUT_S)
    chosen = transport.choice()
    patch = _manager_patch()
    if patch is None:
        return
    patch.kwargs["checkpoint_transport"] = lambda kw: transport.build(chosen, timeout, kw.get("pg"))
    patch.after["receive_in_place"] = _receive_in_place
    patch.reports["heal_timeout"] = _transport_line


def _receive_in_place(manager: object) -> None:
    """A PGTransport receives into the joiner's own state dict (no fresh tensors), given once
    the Manager exists. Only with the synchronous quorum: the async quorum thread would call
    state_dict() while the main thread is mid-forward (bug 1's crash, on the joiner)."""
    made = getattr(manager, "_checkpoint_transport", None)
    if type(made).__name__ == "PGTransport" and not getattr(manager, "_use_async_quorum", True):
        patches.install_on("heal_timeout.receive_in_place", made,
                           lambda _none: manager._manager_state_dict)  # type: ignore[attr-defined]


def _transport_line(manager: object) -> str:
    """What the built Manager's transport really does and waits, read back from it (not from
    the env)."""
    from ftslurm.replica.worker import transport

    made = getattr(manager, "_checkpoint_transport", None)
    lock = getattr(made, "_checkpoint_lock", None)
    seconds = getattr(lock, "timeout", None)
    what = "a healing peer's download"
    if type(made).__name__ == "PGTransport":
        seconds, what = getattr(made, "_timeout", timedelta()).total_seconds(), "each tensor sent"
    wait = f"{seconds:g} s" if isinstance(seconds, (int, float)) else "unknown"
    name, how = transport.describe(made)
    return f"[ftslurm] heal transport: {name}, survivor waits up to {wait} for {what} ({how})"


def fix_heal_timeout_floor() -> None:
    """Fix 6: the cross-replica timeouts cover a heal, set at the Manager's first quorum."""
    mbps = knobs.environ().FTSLURM_HEAL_MBPS
    if (patch := _manager_patch()) is not None:
        patch.after["heal_timeout_floor"] = lambda m: _floor_at_first_quorum(m, mbps)


def _floor_at_first_quorum(manager: Any, mbps: int) -> None:
    """Wrap the built Manager's start_quorum: the first call sizes the timeouts, before the
    quorum (re)configures the process group with them. Then the state is complete: torchtitan
    registered its state dict and created the optimizer's state when it was built. Set on the
    Manager itself, so outside its class's wrappers (patches.ORDER)."""
    pending = [True]

    def wrap(upstream: Callable[..., Any]) -> Callable[..., Any]:
        def start_quorum(*args: Any, **kwargs: Any) -> Any:
            if pending:
                pending.clear()
                print(_raise_timeouts(manager, mbps), flush=True)
            return upstream(*args, **kwargs)

        return start_quorum

    patches.install_on("heal_timeout_floor.start_quorum", manager, wrap)


def _raise_timeouts(manager: Any, mbps: int) -> str:
    """Raise the process group's timeout (torchft applies it at every reconfiguration: a heal
    always brings one, the joiner being a new member) and the Manager's (its futures) to the
    HealBudget; the line says what was set, or why nothing was."""
    from ftslurm.replica.worker import transport

    try:
        pg = manager._pg
        budget = transport.HealBudget(
            transport.state_bytes(manager._manager_state_dict()),
            mbps,
            pg._timeout.total_seconds(),
        )
        before = manager._timeout.total_seconds()
        after = max(before, budget.timeout_s)
        pg.set_timeout(timedelta(seconds=budget.timeout_s))
        manager._timeout = timedelta(seconds=after)
    except Exception as e:  # training goes on with the configured timeouts
        return f"[ftslurm] heal timeout floor: not set ({type(e).__name__}: {e})"
    return budget.line(before, after)


class _ManagerPatch(types.ModuleType):
    """Stands in for `torchft` inside torchtitan.components.ft.manager only: everything is
    torchft's, except the Manager(...) keyword arguments the enabled fixes set (`kwargs`: name
    -> a function making the value from torchtitan's other arguments); `after` finish the
    built Manager (the in-place receive, fix 6); `reports` log what it really does."""

    def __init__(self, real: types.ModuleType) -> None:
        super().__init__(real.__name__)
        self._real = real
        self.kwargs: dict[str, Callable[[dict[str, object]], object]] = {}
        self.after: dict[str, Callable[[object], None]] = {}
        self.reports: dict[str, Callable[[object], str]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)

    def Manager(self, *args: object, **kwargs: object) -> object:  # noqa: N802 - torchft's name
        for name, make in self.kwargs.items():
            kwargs[name] = make(kwargs)
        manager = self._real.Manager(*args, **kwargs)
        for finish in self.after.values():
            finish(manager)
        for report in self.reports.values():
            print(report(manager), flush=True)
        return manager


def _manager_patch() -> _ManagerPatch | None:
    """The stand-in for torchft in torchtitan's FT manager module, installed once (None, with
    a line on stderr, when that module has no name for torchft here). The module and its name
    for torchft are the stack's (`ft` in 0.2's components.ft.manager, `torchft` in 0.3's
    experiments.torchft.manager)."""
    module, alias = patches.STACK.manager_module_alias.rsplit(".", 1)
    tt_ft = importlib.import_module(module)
    if not isinstance(getattr(tt_ft, alias, None), _ManagerPatch):
        if not patches.install("manager_stand_in", _ManagerPatch):
            return None
        getattr(tt_ft, alias).reports["quorum"] = _quorum_line  # with fix 1 off: upstream's mode
    return getattr(tt_ft, alias)


def fix_optimizer_state() -> None:
    """Bug 2: FTOptimizersContainer.state_dict() returns a fresh dict, not the start-up cache."""
    from torchtitan.components.optimizer import OptimizersContainer

    patches.replace("optimizer_state.state_dict", OptimizersContainer.state_dict)


def fix_unsharded_allreduce() -> None:
    """Gap 3: average gradients across replicas when the replica has no FSDP module."""
    patches.install("unsharded_allreduce.hook", _average_unsharded)


def _average_unsharded(upstream: Callable[..., None]) -> Callable[..., None]:
    """Gap 3: FTManager.maybe_set_all_reduce_hook, then a gradient all-reduce hook on every
    parameter when no FSDP module does it."""
    import torch.distributed as dist
    from torch.distributed._composable.fsdp.fully_shard import FSDPModule
    from torch.distributed.distributed_c10d import ReduceOp

    def maybe_set_all_reduce_hook(self: Any, model_parts: list) -> None:
        upstream(self, model_parts)
        if not (self.enabled and self.use_async_quorum):
            return  # semi-sync (DiLoCo) averages pseudo-gradients itself
        if any(isinstance(m, FSDPModule) for part in model_parts for m in part.modules()):
            return  # upstream's FSDP hook does it
        pg = self.replicate_pg

        def hook(param: object) -> None:
            dist.all_reduce(param.grad, group=pg, op=ReduceOp.AVG)  # type: ignore[attr-defined]

        for part in model_parts:
            for p in part.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(hook)

    return maybe_set_all_reduce_hook


def fix_ft_checkpoint_retention() -> None:
    """Fix 5: keep a replica's newest complete FT dataloader checkpoint, not one per step."""
    from ftslurm.replica.worker import ft_checkpoints

    ft_checkpoints.install()


def fix_consistent_resume() -> None:
    """Fix 9: a restart's data position is the model checkpoint's step, not the newest step."""
    from ftslurm.replica.worker import ft_checkpoints

    ft_checkpoints.install_resume()


def fix_diloco_state() -> None:
    """Fix 11: DiLoCo's outer state and schedule are saved with the model and restored."""
    from ftslurm.replica.worker import diloco_state

    diloco_state.install()


def force_sum_on_cpu(fully_shard: Callable[..., Any]) -> Callable[..., Any]:
    """Fix 10: `fully_shard` that makes the module it returns reduce with SUM when its mesh
    is a CPU (gloo) one; anything else it returns as `fully_shard` made it."""
    if getattr(fully_shard, "_ftslurm", False):
        return fully_shard

    def wrapped(module: Any, *args: Any, **kwargs: Any) -> Any:
        sharded = fully_shard(module, *args, **kwargs)
        if getattr(kwargs.get("mesh"), "device_type", None) == "cpu":
            # a list of modules (torchtitan's [norm, output]) is one group, returned as a list
            for m in sharded if isinstance(sharded, (list, tuple)) else [sharded]:
                if hasattr(m, "set_force_sum_reduction_for_comms"):
                    m.set_force_sum_reduction_for_comms(True)
        return sharded

    wrapped._ftslurm = True  # type: ignore[attr-defined]
    wrapped.__wrapped__ = fully_shard  # type: ignore[attr-defined]
    wrapped.__doc__ = fully_shard.__doc__
    return wrapped


def fix_gloo_fsdp() -> None:
    """Fix 10: FSDP on a CPU mesh reduce-scatters with SUM (gloo has no PREMUL_SUM)."""
    import torch.distributed.fsdp as fsdp

    upstream = fsdp.fully_shard
    if not patches.install("gloo_fsdp.fully_shard", force_sum_on_cpu):
        return
    wrapped = fsdp.fully_shard
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(module, "fully_shard", None) is upstream:
            module.fully_shard = wrapped  # type: ignore[attr-defined]


def rendezvous_id(quorum_id: int, max_step: int, replica_ids: Sequence[str]) -> int:
    """Fix 7: the communicator id a quorum's process group meets under (torchft uses it as the
    store prefix), in [0, 2**63): every member of a quorum gets the same quorum id, max step
    and member list from the Lighthouse; after a Lighthouse restart the same quorum id comes
    with a later step and new replicas' ids."""
    text = f"{quorum_id}|{max_step}|{','.join(replica_ids)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def rendezvous_line(quorum_id: int, max_step: int, members: int, communicator_id: int) -> str:
    return (f"[ftslurm] process group rendezvous torchft/{communicator_id} for quorum "
            f"{quorum_id} (max step {max_step}, {members} members)")  # fmt: skip


class _QuorumRecorder:
    """A Manager's ManagerClient that keeps the last quorum it returned (fix 7): the Manager
    reconfigures its process group from that quorum, on the same thread, right after."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.last_quorum: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        self.last_quorum = self._client._quorum(*args, **kwargs)
        return self.last_quorum


def record_quorums(manager: Any) -> None:
    """Give a built Manager's client a quorum recorder, once (fix 7 and fix 8 read it)."""
    if not isinstance(getattr(manager, "_client", None), _QuorumRecorder):
        patches.install_on("quorum_recorder", manager, _QuorumRecorder)


def fix_peer_abort() -> None:
    """Fix 8: a quorum member whose heartbeat the Lighthouse lost fails the step at once
    (peer_watch.py); a process that stood still does not commit the step it stood in."""
    from pathlib import Path

    from ftslurm.replica.worker import peer_watch

    s = knobs.environ()
    progress = s[handoff.PROGRESS_ENV]
    stall = float(s.get("FTSLURM_STALL_TIMEOUT_S", s.DEVICE))
    peer_watch.install(s.TORCHFT_LIGHTHOUSE, Path(progress) if progress else None,
                       float(s.get("FTSLURM_HANG_TIMEOUT_S", s.DEVICE)), record_quorums,
                       stall_floor_s=stall or None,
                       emulate_save_s=float(s.FTSLURM_EMULATE_SAVE_S))  # fmt: skip


def fix_rendezvous_namespace() -> None:
    """Fix 7: every Manager built from now on (torchtitan's and the tiny worker's) rendezvous
    its process group under `rendezvous_id`, not the bare quorum id."""
    if not patches.ready("rendezvous_namespace.init", "rendezvous_namespace.reconfigure_pg"):
        return
    patches.install("rendezvous_namespace.init", _recording_quorums)
    patches.install("rendezvous_namespace.reconfigure_pg", _namespaced)


def _recording_quorums(init: Callable[..., None]) -> Callable[..., None]:
    """Fix 7: Manager.__init__, then the quorum recorder on the built Manager."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched
        init(self, *args, **kwargs)
        record_quorums(self)

    return __init__


def _namespaced(reconfigure: Callable[..., None]) -> Callable[..., None]:
    """Fix 7: Manager._reconfigure_pg under `rendezvous_id`, for the quorum just recorded."""

    def _reconfigure_pg(self: Any, communicator_id: int, handles: list[str]) -> None:
        quorum = getattr(self._client, "last_quorum", None)
        if quorum is not None and quorum.quorum_id == communicator_id:
            communicator_id = rendezvous_id(quorum.quorum_id, quorum.max_step,
                                            list(quorum.replica_ids))  # fmt: skip
            print(rendezvous_line(quorum.quorum_id, quorum.max_step, len(handles),
                                  communicator_id), flush=True)  # fmt: skip
        reconfigure(self, communicator_id, handles)

    return _reconfigure_pg


FIXES = (
    Fix("async_quorum", "torchft Manager with use_async_quorum=False", fix_async_quorum),
    Fix("optimizer_state", "FT optimizer state_dict() is fresh, not cached at start",
        fix_optimizer_state),
    Fix("unsharded_allreduce", "cross-replica gradient all-reduce on 1-rank (non-FSDP) replicas",
        fix_unsharded_allreduce),
    Fix("heal_timeout",
        "the heal transport FTSLURM_HEAL_TRANSPORT selects; a healing peer's download may take "
        "FTSLURM_HEAL_TIMEOUT_S, not torchft's 60 s",
        fix_heal_timeout),
    Fix("ft_checkpoint_retention", "per-step FT dataloader checkpoints: only the newest "
        "complete one and the one being written are kept", fix_ft_checkpoint_retention),
    Fix("heal_timeout_floor", "the cross-replica timeouts cover a peer's heal (state size / "
        "FTSLURM_HEAL_MBPS, twice)", fix_heal_timeout_floor),
    Fix("rendezvous_namespace", "a quorum's process group meets under its id, max step and "
        "members, not a quorum id a restarted Lighthouse reuses", fix_rendezvous_namespace),
    Fix("peer_abort", "a quorum member whose heartbeat the Lighthouse lost fails the "
        "survivors' step at once, not after PG_TIMEOUT_S; a process that stood still does "
        "not commit that step", fix_peer_abort),
    Fix("consistent_resume", "a restart takes each replica's data position at the model "
        "checkpoint's step and skips half-written checkpoints with a log line",
        fix_consistent_resume),
    Fix("gloo_fsdp", "FSDP on a CPU (gloo) mesh reduce-scatters with SUM, not PREMUL_SUM, "
        "which gloo lacks: replicas of several ranks on CPU", fix_gloo_fsdp),
    Fix("diloco_state", "a DiLoCo resume from a model checkpoint restores the outer optimizers' "
        "momentum, the last-sync weights, the sync schedule and each replica's own weights and "
        "inner optimizer", fix_diloco_state),
)


def apply(env: Mapping[str, str] | knobs.Settings | None = None,
          only: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """Apply every enabled fix (or those of `only`: the tiny worker has no torchtitan);
    returns one log line per fix (on, off or skipped, and its switch). A fix whose patch
    targets this installation lacks is skipped whole, each missing one said on stderr."""
    env = knobs.load(env)
    lines = []
    for fix in FIXES:
        if only and fix.name not in only:
            continue
        if enabled(fix.name, env) and (missing := fix.missing()):
            for line in missing:
                patches.say_skipped(line)
            lines.append(f"[ftslurm] fix {fix.name}: SKIPPED ({missing[0]})")
        elif enabled(fix.name, env):
            fix.apply()
            lines.append(
                f"[ftslurm] fix {fix.name}: ON ({fix.summary}; {fix.switch}=0 turns it off)"
            )
        else:
            lines.append(f"[ftslurm] fix {fix.name}: OFF ({fix.switch}=0)")
    return lines
