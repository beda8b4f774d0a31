"""Every attribute of torch, torchft and torchtitan that ftslurm's training worker patches: one
record each, the order of the wrappers that share a target, and one installer.

Why: the worker changes ~40 upstream attributes from several modules (fixes.py, peer_watch.py,
standby.py, checksum.py, early_sync.py, ft_checkpoints.py, cpu.py, startup.py and
config_error.py), some of them more than once (torchft's `Manager.start_quorum` three times).
Each patch is made for one build of the stack: a torchft nightly without
`Manager._reconfigure_pg` breaks fix 7 with an AttributeError deep in training. A record says
what a patch changes, which module of ftslurm owns it, why, the versions it was made and
tested with (PINNED), the upstream issue or PR it works around, its switch, and the further
upstream attributes it reads; `check` says in one line when this installation lacks one
(`ftslurm doctor --patches` lists them all).

The installer (`install`) applies a record's wrapper and composes the wrappers of one target
in ORDER, whatever order their modules are installed in (train.py installs the fixes, then the
checksum, the early first sync, the spares and the time limit). A patch whose target or needs
are missing is skipped with its one line on stderr, never an AttributeError. The FIXES
registry (fixes.py) stays the switch mechanism: a fix's records are those naming its switch.

Pure data and functions: the records name upstream attributes as text; upstream modules are
imported only by `check` and the installer, when a patch is applied or checked.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ftslurm import knobs, stacks

# The stack this worker runs (stacks.py: by the installed torchtitan). Every record below was
# made and tested with each stack's pins (pyproject.toml's extras and the requirements files
# pin them; tests/test_patches.py fails when a pin moves without stacks.py, so each move
# re-verifies the patches: `ftslurm doctor --patches`). The upstream names that moved between
# the stacks (the FT trainer, its manager, checkpointer and optimizer) come from the stack.
STACK = stacks.installed()
PINNED = STACK.versions
# top-level module -> the distributions that install it (torchft: the nightly, else a release)
DISTRIBUTIONS = {"torch": ("torch",), "torchft": ("torchft-nightly", "torchft"),
                 "torchtitan": ("torchtitan",)}  # fmt: skip

ALWAYS = "always"
# kinds of patch: what `check` requires of the target
WRAP = "wrap"  # the attribute is replaced by a function that calls the one before it
REPLACE = "replace"  # the attribute is replaced; the one before it is not called
ADD = "add"  # an attribute upstream lacks is created (its owner must exist)
INSTANCE = "instance"  # set on each built object, not its class (the class must exist)
SCOPED = "scoped"  # swapped while something runs, then put back
KINDS = (WRAP, REPLACE, ADD, INSTANCE, SCOPED)

FIXES_OF_MANAGER = ("FTSLURM_FIX_ASYNC_QUORUM", "FTSLURM_FIX_HEAL_TIMEOUT",
                    "FTSLURM_FIX_HEAL_TIMEOUT_FLOOR")  # fmt: skip
MANAGER = "torchft.manager.Manager"
FT_MANAGER = STACK.ft_manager
FT_TRAINER = STACK.ft_trainer
CHECKPOINTER = STACK.checkpointer
DILOCO = "torchft.local_sgd.DiLoCo"


@dataclass(frozen=True)
class Patch:
    """One upstream attribute ftslurm changes. `switches`: the knobs that turn it on (any of
    them; `always`: no switch; `NAME=value`: on when the knob has that value); `feature`:
    what stops working when it is skipped (fix records: derived from the switch); `needs`:
    further upstream attributes it reads (dotted, as `target`); `owner`: the module of
    ftslurm/replica/ that applies it."""

    name: str
    target: str
    owner: str
    why: str
    switches: tuple[str, ...]
    kind: str = WRAP
    upstream: str = ""
    needs: tuple[str, ...] = ()
    feature: str = ""
    made_for: tuple[tuple[str, str], ...] = ()  # (distribution, version): not the pins'
    # the stacks (stacks.py) it applies to: each keeps it while its upstream still has the
    # bug (tests/test_upstream_bugs.py, on both stacks); one that fixed it is left out here
    applies_to: tuple[str, ...] = tuple(s.name for s in stacks.STACKS)

    @property
    def fixes(self) -> tuple[str, ...]:
        """The FIXES names whose switches turn this patch on (fixes.SWITCHES' naming)."""
        return tuple(s.removeprefix("FTSLURM_FIX_").lower() for s in self.switches
                     if s.startswith("FTSLURM_FIX_"))  # fmt: skip

    @property
    def effect(self) -> str:
        """What a skipped patch turns off, for `check`'s line."""
        if self.fixes:
            names = ", ".join(self.fixes)
            return f"fix {names} is off" if len(self.fixes) == 1 else f"fixes {names} are off"
        return f"{self.feature} is off"

    @property
    def versions(self) -> dict[str, str]:
        """Distribution -> the version this patch was made and tested with: `made_for`, else
        the pinned version of each package its target and needs belong to."""
        if self.made_for:
            return dict(self.made_for)
        dists = {DISTRIBUTIONS[p.split(".")[0]][0] for p in (self.target, *self.needs)}
        return {d: PINNED[d] for d in sorted(dists)}


def _p(name: str, target: str, owner: str, switches: str | tuple[str, ...], why: str,
       **kw: Any) -> Patch:  # fmt: skip
    return Patch(name, target, owner, why, (switches,) if isinstance(switches, str) else switches,
                 **kw)  # fmt: skip


CPU = "DEVICE=cpu"
_ON_CPU = {"feature": "training on CPU (DEVICE=cpu)"}
RECORDS: tuple[Patch, ...] = (
    # ---- fixes.py
    _p("manager_stand_in", STACK.manager_module_alias, "fixes", FIXES_OF_MANAGER,
       "torchtitan builds torchft's Manager through this module: a stand-in sets the Manager's "
       "use_async_quorum (fix 1) and checkpoint transport (fix 4), finishes the built Manager "
       "(fix 6) and logs its quorum mode", upstream="torchtitan issue 4754",
       needs=("torchft.Manager",)),
    _p("optimizer_state.state_dict", f"{STACK.ft_optimizer}.state_dict", "fixes",
       "FTSLURM_FIX_OPTIMIZER_STATE", "the FT container's state dict is cached at start (a "
       "stale lr reaches a healing peer): the base container's fresh one instead",
       kind=REPLACE, needs=("torchtitan.components.optimizer.OptimizersContainer.state_dict",)),
    _p("unsharded_allreduce.hook", f"{FT_MANAGER}.maybe_set_all_reduce_hook", "fixes",
       "FTSLURM_FIX_UNSHARDED_ALLREDUCE", "replicas without an FSDP module (one rank) average "
       "their gradients across replicas too",
       needs=("torch.distributed._composable.fsdp.fully_shard.FSDPModule",
              "torch.distributed.distributed_c10d.ReduceOp",
              "torch.Tensor.register_post_accumulate_grad_hook")),
    _p("heal_timeout.receive_in_place", "torchft.checkpointing.pg_transport.PGTransport."
       "_state_dict", "fixes", "FTSLURM_FIX_HEAL_TIMEOUT", "a PGTransport receives a heal "
       "into the joiner's own state dict (synchronous quorum only)", kind=INSTANCE,
       needs=(f"{MANAGER}._manager_state_dict",)),
    _p("heal_timeout_floor.start_quorum", f"{MANAGER}.start_quorum", "fixes",
       "FTSLURM_FIX_HEAL_TIMEOUT_FLOOR", "each built Manager's first quorum first raises the "
       "process group's and the Manager's timeouts to cover a peer's heal", kind=INSTANCE,
       needs=(f"{MANAGER}.start_quorum", f"{MANAGER}._manager_state_dict",
              "torchft.process_group.ProcessGroup.set_timeout")),
    _p("quorum_recorder", f"{MANAGER}._client", "fixes",
       ("FTSLURM_FIX_RENDEZVOUS_NAMESPACE", "FTSLURM_FIX_PEER_ABORT"), "each built Manager's "
       "Lighthouse client keeps the last quorum it returned (fix 7 names the rendezvous by it, "
       "fix 8 watches its members)", kind=INSTANCE, needs=("torchft._torchft.ManagerClient."
                                                           "_quorum",)),  # fmt: skip
    _p("rendezvous_namespace.init", f"{MANAGER}.__init__", "fixes",
       "FTSLURM_FIX_RENDEZVOUS_NAMESPACE", "every Manager built gets the quorum recorder"),
    _p("rendezvous_namespace.reconfigure_pg", f"{MANAGER}._reconfigure_pg", "fixes",
       "FTSLURM_FIX_RENDEZVOUS_NAMESPACE", "a quorum's process group meets under its id, max "
       "step and members, not the bare quorum id a restarted Lighthouse reuses"),
    _p("gloo_fsdp.fully_shard", "torch.distributed.fsdp.fully_shard", "fixes",
       "FTSLURM_FIX_GLOO_FSDP", "FSDP on a CPU mesh reduce-scatters with SUM (gloo has no "
       "PREMUL_SUM); rebound in each torchtitan module that imported it by name",
       needs=("torch.distributed.fsdp.FSDPModule.set_force_sum_reduction_for_comms",)),
    # ---- peer_watch.py (fix 8)
    _p("peer_abort.init", f"{MANAGER}.__init__", "peer_watch", "FTSLURM_FIX_PEER_ABORT",
       "every Manager built gets its peer watch (and the quorum recorder)",
       needs=("torch.optim.optimizer.register_optimizer_step_post_hook",)),
    _p("peer_abort.start_quorum", f"{MANAGER}.start_quorum", "peer_watch",
       "FTSLURM_FIX_PEER_ABORT", "a step's span starts when its quorum returns; a quorum "
       "request that timed out (a stalled peer) is made again"),
    _p("peer_abort.async_quorum", f"{MANAGER}._async_quorum", "peer_watch",
       "FTSLURM_FIX_PEER_ABORT", "the quorum thread tells the watch when the quorum is done "
       "(heal or step)"),
    _p("peer_abort.should_commit", f"{MANAGER}.should_commit", "peer_watch",
       "FTSLURM_FIX_PEER_ABORT", "a step the watch failed, or one the process stood still "
       "in, is not committed"),
    _p("peer_abort.work_wait", "torchft.manager._ManagedWork.wait", "peer_watch",
       "FTSLURM_FIX_PEER_ABORT", "a wait on cross-replica work ends at once when a quorum "
       "member's heartbeat is lost"),
    _p("peer_abort.save", f"{CHECKPOINTER}.save", "peer_watch", "FTSLURM_FIX_PEER_ABORT",
       "a checkpoint save is a long phase for the launcher's watchdog",
       needs=(f"{CHECKPOINTER}._should_save",)),
    # ---- standby.py
    _p("warm_restart.init", f"{FT_MANAGER}.__init__", "standby", "FTSLURM_WARM_GO_FILE",
       "a warm next run waits here, imports done, until its launcher says go or stop",
       feature="restart in place (warm next runs)"),
    _p("slots.init", f"{FT_MANAGER}.__init__", "standby", "FTSLURM_SLOTS_DIR",
       "a warm spare waits here for a vacant slot and trains as its replica",
       feature="warm spares and slot fencing"),
    _p("slots.train_step", f"{FT_TRAINER}.train_step", "standby", "FTSLURM_SLOTS_DIR",
       "a worker whose slot a newer claim took stops before its next step",
       feature="warm spares and slot fencing"),
    _p("slots.start_quorum", f"{MANAGER}.start_quorum", "standby", "FTSLURM_SLOTS_DIR",
       "a worker whose slot a newer claim took stops before its next quorum (DiLoCo)",
       feature="warm spares and slot fencing"),
    # ---- checksum.py
    _p("checksum.train_step", f"{FT_TRAINER}.train_step", "checksum", "FTSLURM_CHECKSUM_EVERY",
       "a bit-exact parameter hash after committed steps", feature="parameter checksums"),
    _p("checksum.perform_sync", "torchft.local_sgd._StreamingDiLoCoFragment.perform_sync",
       "checksum", "FTSLURM_CHECKSUM_EVERY", "DiLoCo: the hash of the fragment each outer "
       "sync committed", feature="parameter checksums"),
    # ---- early_sync.py
    _p("early_sync.init", f"{DILOCO}.__init__", "early_sync", "FTSLURM_EARLY_FIRST_SYNC",
       "a restarted replica's inner-step counter starts one step before its sync point",
       feature="the early first sync"),
    _p("early_sync.enter", f"{DILOCO}.__enter__", "early_sync", "FTSLURM_EARLY_FIRST_SYNC",
       "the first inner step's post-step hook (the quorum, the heal) runs before the first "
       "batch", needs=(f"{DILOCO}._step_post_hook",), feature="the early first sync"),
    # ---- ft_checkpoints.py
    _p("ft_checkpoint_retention.ft_save", f"{CHECKPOINTER}._ft_save", "ft_checkpoints",
       "FTSLURM_FIX_FT_CHECKPOINT_RETENTION", "after each per-step FT dataloader save, the "
       "stale ones are deleted", upstream="pytorch/torchtitan PR 4424",
       needs=(f"{CHECKPOINTER}._ft_folder",)),
    _p("consistent_resume.load", f"{CHECKPOINTER}.load", "ft_checkpoints",
       "FTSLURM_FIX_CONSISTENT_RESUME", "a restart loads the data position of the model "
       "checkpoint's step and names the half-written checkpoints it skips",
       upstream="torchtitan PR 4686", needs=(f"{CHECKPOINTER}._ft_folder",)),
    _p("consistent_resume.ft_load", f"{CHECKPOINTER}._ft_load", "ft_checkpoints",
       "FTSLURM_FIX_CONSISTENT_RESUME", "the data position loaded is the planned one",
       upstream="torchtitan PR 4686",
       needs=(f"{CHECKPOINTER}.dcp_load", f"{CHECKPOINTER}._create_checkpoint_id")),
    _p("consistent_resume.ft_save", f"{CHECKPOINTER}._ft_save", "ft_checkpoints",
       "FTSLURM_FIX_CONSISTENT_RESUME", "the first save after a restart deletes a lost "
       "lineage's positions; every saved position is logged", upstream="torchtitan PR 4686"),
    _p("consistent_resume.first_heal", f"{MANAGER}._load_state_dict_fns", "ft_checkpoints",
       "FTSLURM_FIX_CONSISTENT_RESUME", "a heal before the first save moves the data position "
       "to the peer's", kind=INSTANCE, upstream="torchtitan PR 4686"),
    _p("time_limit.save", f"{CHECKPOINTER}.save", "ft_checkpoints", "FTSLURM_TIME_LIMIT_FILE",
       "at Slurm's time-limit signal: a final checkpoint at the agreed step, then training "
       "ends", needs=(f"{CHECKPOINTER}.{STACK.wait_for_saving}",),
       feature="the final checkpoint at Slurm's time limit"),
    _p("time_limit.should_save", f"{CHECKPOINTER}._should_save", "ft_checkpoints",
       "FTSLURM_TIME_LIMIT_FILE", "the final checkpoint is saved outside the interval",
       feature="the final checkpoint at Slurm's time limit"),
    _p("time_limit.should_continue", STACK.should_continue,
       "ft_checkpoints", "FTSLURM_TIME_LIMIT_FILE", "the training loop ends after the final "
       "checkpoint", feature="the final checkpoint at Slurm's time limit"),
    # ---- diloco_state.py (fix 11)
    _p("diloco_state.trainer_init", f"{FT_TRAINER}.__init__", "diloco_state",
       "FTSLURM_FIX_DILOCO_STATE", "a DiLoCo run with model checkpoints adds the outer "
       "optimizers' momentum, the last-sync weights and the schedule to the checkpoint's states",
       upstream="torchft issue 277, torchtitan 4209", needs=(f"{CHECKPOINTER}.load",)),
    _p("diloco_state.dcp_load", f"{CHECKPOINTER}.dcp_load", "diloco_state",
       "FTSLURM_FIX_DILOCO_STATE", "a load asks for the DiLoCo state the checkpoint's .metadata "
       "lists (none from one saved without it)", upstream="torchft issue 277, torchtitan 4209",
       needs=("torch.distributed.checkpoint.FileSystemReader.read_metadata",)),
    _p("diloco_state.init", f"{DILOCO}.__init__", "diloco_state", "FTSLURM_FIX_DILOCO_STATE",
       "the DiLoCo built after the load gets the loaded state (its fragments, its counter, the "
       "Manager's step)", upstream="torchft issue 277, torchtitan 4209",
       needs=(f"{MANAGER}.load_state_dict", f"{MANAGER}.state_dict",
              "torch.distributed.checkpoint.load")),
    _p("diloco_state.ft_save", f"{CHECKPOINTER}._ft_save", "diloco_state",
       "FTSLURM_FIX_DILOCO_STATE", "at a model checkpoint step each replica's data position "
       "goes with its own weights and inner optimizer (replicas differ between syncs)",
       upstream="torchft issue 277, torchtitan 4209", needs=(f"{CHECKPOINTER}._should_save",)),
    # ---- config_error.py
    _p("config_error.parse_args", "torchtitan.config.ConfigManager.parse_args", "config_error",
       "FTSLURM_CONFIG_ERROR_FILE", "a refused option is noted for the launcher (no requeue "
       "for a typo)", feature="the note of refused options"),
    # ---- cpu.py (DEVICE=cpu, before torchtitan is imported)
    _p("cpu.get_device_name", "torch.cpu.get_device_name", "cpu", CPU,
       "torchtitan's device module is torch.cpu: the CUDA-only helpers it calls", kind=ADD,
       **_ON_CPU),
    _p("cpu.get_device_properties", "torch.cpu.get_device_properties", "cpu", CPU,
       "the machine's memory as the device's", kind=ADD, **_ON_CPU),
    _p("cpu.memory_stats", "torch.cpu.memory_stats", "cpu", CPU,
       "the step lines' memory is the process's peak RSS", kind=ADD, **_ON_CPU),
    _p("cpu.current_device", "torch.cpu.current_device", "cpu", CPU,
       "an int (0), as barrier(device_ids=[...]) wants, not \"cpu\"", kind=REPLACE, **_ON_CPU),
    _p("cpu.reset_peak_memory_stats", "torch.cpu.reset_peak_memory_stats", "cpu", CPU,
       "a no-op", kind=ADD, **_ON_CPU),
    _p("cpu.empty_cache", "torch.cpu.empty_cache", "cpu", CPU, "a no-op", kind=ADD, **_ON_CPU),
    _p("cpu.device_type", "torch._utils._get_available_device_type", "cpu", CPU,
       "says cpu while torchtitan.tools.utils is imported: torchtitan picks its device then",
       kind=SCOPED, **_ON_CPU),
    # ---- startup.py
    _p("lazy_compile.compile", "torch.compile", "startup", "FTSLURM_LAZY_COMPILE",
       "torchtitan's import-time torch.compile calls compile on first use", kind=SCOPED,
       feature="the lazy compile"),
)
BY_NAME = {r.name: r for r in RECORDS}

# The wrappers of one target, outermost (called first) to innermost: the order train.py's
# installs gave them, now stated. An INSTANCE layer (set on each built Manager, after its
# class's) is always outermost.
ORDER: dict[str, tuple[str, ...]] = {
    f"{MANAGER}.start_quorum": ("heal_timeout_floor.start_quorum", "slots.start_quorum",
                                "peer_abort.start_quorum"),
    f"{MANAGER}.__init__": ("peer_abort.init", "rendezvous_namespace.init"),
    f"{FT_TRAINER}.train_step": ("slots.train_step", "checksum.train_step"),
    f"{FT_MANAGER}.__init__": ("slots.init", "warm_restart.init"),
    f"{CHECKPOINTER}.save": ("time_limit.save", "peer_abort.save"),
    f"{CHECKPOINTER}._ft_save": ("consistent_resume.ft_save", "ft_checkpoint_retention.ft_save",
                                 "diloco_state.ft_save"),
    # the restored counter wins over the early first sync's (diloco_state.py)
    f"{DILOCO}.__init__": ("diloco_state.init", "early_sync.init"),
}


def for_switch(switch: str) -> tuple[Patch, ...]:
    """The records a switch turns on (a fix's records: `Fix.records`)."""
    return tuple(r for r in RECORDS if switch in r.switches)


def order(target: str) -> tuple[str, ...]:
    """The names of the records of `target`, outermost first."""
    return ORDER.get(target) or tuple(r.name for r in RECORDS if r.target == target)


# ---------------------------------------------------------------- is a patch on, is it here


def switch_on(switch: str, settings: knobs.Settings, device: str | None = None) -> bool:
    """Whether one switch is on in `settings`: `always`; `NAME=value`; a boolean knob's value;
    a count above 0; a channel the launcher sets for a run (FTSLURM_SLOTS_DIR: not public) is
    counted on, as a run may set it."""
    if switch == ALWAYS:
        return True
    name, _, value = switch.partition("=")
    setting = settings.get(name, device or settings.DEVICE)
    if name == "DEVICE" and device:
        setting = device
    if value:
        return str(setting) == value
    if isinstance(setting, bool):
        return setting
    if isinstance(setting, (int, float)):
        return setting > 0
    return bool(setting) or per_run(name)


def per_run(switch: str) -> bool:
    """Whether `switch` is a channel the launcher sets for a run (not a user's knob)."""
    name = switch.partition("=")[0]
    return name in knobs.KNOBS and not knobs.KNOBS[name].public


def on(record: Patch, settings: knobs.Settings, device: str | None = None) -> bool:
    return any(switch_on(s, settings, device) for s in record.switches)


_MISSING = object()


def _distribution(module: str) -> str:
    """`torchft-nightly 2026.9.30`: the installed distribution of a top-level module."""
    import importlib.metadata

    names = DISTRIBUTIONS.get(module, (module,))
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"{names[0]} (not installed)"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def resolve(path: str) -> Any:
    """The object a dotted path names (modules imported on the way), or _MISSING. Raises
    what a module raises while it is imported, other than an ImportError."""
    parts = path.split(".")
    obj: Any = _MISSING
    for i, part in enumerate(parts):
        if obj is _MISSING or isinstance(obj, types.ModuleType):
            try:  # a submodule first: `fsdp.fully_shard` the module, not the function
                obj = importlib.import_module(".".join(parts[: i + 1]))
                continue
            except ImportError:
                if obj is _MISSING:
                    return _MISSING
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _split(path: str) -> tuple[str, str]:
    owner, _, attr = path.rpartition(".")
    return owner, attr


def _absent(path: str) -> str | None:
    """Why `path` is not in this installation (its owner resolved, the last part an
    attribute of it), or None when it is."""
    owner_path, attr = _split(path)
    try:
        owner = resolve(owner_path)
    except Exception as e:  # noqa: BLE001 - a module that fails at import: said in one line
        return f"cannot import {owner_path} ({_one_line(e)})"
    if owner is _MISSING or not hasattr(owner, attr):
        return f"not in {_distribution(path.split('.')[0])}"
    return None


def check(record: Patch, needs: bool = True) -> str | None:
    """One line when this installation lacks the record's target or one of its needs (with
    the installed version and what is off then), else None. `needs=False`: the target alone,
    what applying the patch needs (the installer's check)."""
    if STACK.name not in record.applies_to:
        return f"{record.target}: fixed upstream in {STACK.name}; {record.effect} there"
    target = record.target
    if record.kind in (ADD, INSTANCE):
        target = _split(target)[0]  # the attribute itself is made, or is each object's
    for path in (target, *(record.needs if needs else ())):
        if (why := _absent(path)) is not None:
            return f"{path}: {why}; {record.effect}"
    return None


# what a feature's log line says when `ready` found a target missing
SKIPPED = "an upstream attribute it patches is missing here: see `[ftslurm] patch skipped`"


def say_skipped(line: str) -> None:
    """A skipped patch's line, on stderr (the replica's log)."""
    print(f"[ftslurm] patch skipped: {line}", file=sys.stderr, flush=True)


def ready(*names: str) -> bool:
    """Whether every named record's target is here; each one that is not says its line on
    stderr (a feature of several patches is applied whole or not at all)."""
    lines = [line for name in names if (line := check(BY_NAME[name], needs=False)) is not None]
    for line in lines:
        say_skipped(line)
    return not lines


# ---------------------------------------------------------------- the installer


@dataclass
class _Chain:
    """The wrappers installed on one target: the attribute before the first of them, each
    one's factory, and the composed value set (a value that is no longer there means someone
    put the attribute back, a test: the chain starts again from what is there now)."""

    original: Any
    layers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    installed: Any = _MISSING


_CHAINS: dict[tuple[Any, str], _Chain] = {}  # (class or module, attribute) -> its chain


def _chain(owner: Any, attr: str, current: Any) -> _Chain:
    chain = _CHAINS.get((owner, attr))
    if chain is None or current is not chain.installed:
        chain = _CHAINS[(owner, attr)] = _Chain(current)
    return chain


def installed(name: str) -> bool:
    """Whether record `name`'s wrapper is in place now."""
    owner_path, attr = _split(BY_NAME[name].target)
    try:
        owner = resolve(owner_path)
    except Exception:  # noqa: BLE001 - a module that fails at import: nothing installed there
        return False
    chain = _CHAINS.get((owner, attr)) if owner is not _MISSING else None
    if chain is None or name not in chain.layers:
        return False
    return getattr(owner, attr, _MISSING) is chain.installed


def install(name: str, make: Callable[[Any], Any]) -> bool:
    """Apply record `name`: `make(upstream)` returns the new attribute, `upstream` being what
    it wraps (None for an ADD). The target's wrappers are composed again in ORDER, so the
    order of the install calls does not matter. Idempotent. False, with the one line on
    stderr, when the target or a need is missing here."""
    record = BY_NAME[name]
    if record.kind in (INSTANCE, SCOPED):
        raise ValueError(f"{name} is a {record.kind} patch: use install_on / swapped")
    if (line := check(record, needs=False)) is not None:
        say_skipped(line)
        return False
    owner_path, attr = _split(record.target)
    owner = resolve(owner_path)
    current = getattr(owner, attr, None)
    chain = _chain(owner, attr, current)
    if name in chain.layers:
        return True
    chain.layers[name] = make
    value = chain.original
    for layer in reversed(order(record.target)):
        if layer in chain.layers:
            value = chain.layers[layer](value)
    setattr(owner, attr, value)
    chain.installed = value
    return True


def replace(name: str, value: Any) -> bool:
    """Apply a REPLACE or ADD record: the attribute becomes `value`."""
    return install(name, lambda _upstream: value)


def install_on(name: str, obj: Any, make: Callable[[Any], Any]) -> bool:
    """Apply INSTANCE record `name` to one built object: its attribute becomes
    `make(attribute)`. False, with a line on stderr, when the object lacks it."""
    record = BY_NAME[name]
    attr = _split(record.target)[1]
    upstream = getattr(obj, attr, _MISSING)
    if upstream is _MISSING:
        say_skipped(f"{record.target}: not on this {type(obj).__name__}; {record.effect}")
        return False
    setattr(obj, attr, make(upstream))
    return True


@contextlib.contextmanager
def swapped(name: str, value: Any) -> Iterator[bool]:
    """SCOPED record `name`'s attribute is `value` inside the block, put back after; yields
    whether it was swapped (False, with the line on stderr, when missing here)."""
    record = BY_NAME[name]
    if (line := check(record, needs=False)) is not None:
        say_skipped(line)
        yield False
        return
    owner_path, attr = _split(record.target)
    owner = resolve(owner_path)
    before = getattr(owner, attr)
    setattr(owner, attr, value)
    try:
        yield True
    finally:
        setattr(owner, attr, before)
