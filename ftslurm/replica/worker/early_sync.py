"""A restarted DiLoCo replica asks for its first quorum before its first inner step, not
after `H` steps.

Why: torchft's DiLoCo asks for a quorum every `H = sync_steps / num_fragments` inner steps,
counting from 0 when the process starts (`DiLoCo._local_step`). A replica requeued after a
failure therefore trains H inner steps on its stale weights before its first quorum, and that
quorum heals it: the heal loads the survivor's model, optimizers, DiLoCo state and data
position, so those steps are thrown away. On CPU (H = 3, ~1.1 s a step) that is ~3 s of every
heal; on GPUs with H = 10 it is 10 steps. Here the counter starts one step before its sync
point and the optimizer's post-step hook runs once when training starts (DiLoCo.__enter__,
before the first batch): the replica prepares (and, with no fragment sync delay, syncs) its
fragment right away; the quorum forms at the survivor's next sync, as upstream. (The hook
run at the start matters: with the counter alone the replica would ask after one inner step,
~1.1 s more on CPU.)

Why it is safe: the hook is what the first inner step would have run, minus a step whose
result the heal overwrites; which fragment syncs is chosen from the manager step after the
quorum (the survivor's, once healed), and the counter is reset at that sync, so the replicas
are in phase from then on -- the parameter checksums after each heal compare them (tests,
bench/soak.py). Only attempts > 0, restarts in place and warm spares (FTSLURM_ATTEMPT,
FTSLURM_RESTART, FTSLURM_SPARE): a first start forms the first quorum as upstream does. Not
for a DiLoCo whose schedule a checkpoint restored (diloco_state.py, fix 11): its counter is the
uninterrupted run's, and a sync before the first inner step would be one that run never made.
Switch: FTSLURM_EARLY_FIRST_SYNC=0 runs upstream behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ftslurm import knobs
from ftslurm.replica import patches
from ftslurm.replica.worker import diloco_state, fixes

SWITCH = "FTSLURM_EARLY_FIRST_SYNC"


def first_local_step(sync_every: int, sync_delay: int) -> int:
    """The counter value whose next inner step prepares a fragment (DiLoCo's `_step_post_hook`
    prepares at `sync_every - delay` and syncs at `sync_every`)."""
    return max(0, sync_every - sync_delay - 1)


def install(env: Mapping[str, str] | knobs.Settings | None = None) -> str | None:
    """Patch torchft's DiLoCo when this is a restarted attempt; the line to log, or None.
    `env`: this process's settings unless given."""
    s = knobs.load(env)
    spare = s.FTSLURM_SPARE  # a spare joins a running group, as a restart
    restarted = s.FTSLURM_ATTEMPT > 0 or s.FTSLURM_RESTART > 0
    if not restarted and not spare:
        return None
    if not fixes.switch_on(SWITCH, s):
        return f"[ftslurm] early first sync: OFF ({SWITCH}=0)"
    if patches.installed("early_sync.init"):
        return None
    if not patches.ready("early_sync.init", "early_sync.enter"):
        return f"[ftslurm] early first sync: SKIPPED ({patches.SKIPPED})"
    patches.install("early_sync.init", _counting_from_sync_point)
    patches.install("early_sync.enter", _syncing_at_enter)
    return (
        "[ftslurm] early first sync: ON (a restarted DiLoCo replica asks for its healing quorum "
        f"before its first inner step; {SWITCH}=0 turns it off)"
    )


def _counting_from_sync_point(upstream: Callable[..., None]) -> Callable[..., None]:
    """DiLoCo.__init__, then the inner-step counter one step before its sync point."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched __init__
        upstream(self, *args, **kwargs)
        self._local_step = first_local_step(self._sync_every, self._fragment_sync_delay)

    return __init__


def _syncing_at_enter(upstream_enter: Callable[..., Any]) -> Callable[..., Any]:
    """DiLoCo.__enter__, then the first inner step's post-step hook."""

    def __enter__(self: Any) -> Any:  # noqa: N807 - patched __enter__
        out = upstream_enter(self)
        if diloco_state.restored(self):
            return out  # the restored schedule syncs where the uninterrupted run did
        # what the first inner step's post-step hook would run: the quorum (and the heal) now
        self._step_post_hook(self._local_optimizer, (), {})
        return out

    return __enter__
