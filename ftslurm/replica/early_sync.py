"""A restarted DiLoCo replica asks for its first quorum after one inner step, not `H` steps.

Why: torchft's DiLoCo asks for a quorum every `H = sync_steps / num_fragments` inner steps,
counting from 0 when the process starts (`DiLoCo._local_step`). A replica requeued after a
failure therefore trains H inner steps on its stale weights before its first quorum, and that
quorum heals it: the heal loads the survivor's model, optimizers and DiLoCo state, so those
steps are thrown away. On CPU (H = 3, ~1.7 s a step) that is ~5 s of every heal; on GPUs with
H = 10 it is 10 steps. Starting a restarted replica's counter one step before its sync point
makes it ask after one step; the quorum then forms at the survivor's next sync, as before.

Why it is safe: which fragment syncs is chosen from the manager step after the quorum (the
survivor's, once healed), and the counter is reset at that sync, so the replicas are in phase
from then on -- the parameter checksums after each heal compare them (tests, bench/soak.py).
Only attempts > 0 (FTSLURM_ATTEMPT): a first start forms the first quorum as upstream does.
Switch: FTSLURM_EARLY_FIRST_SYNC=0 runs upstream behaviour.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ftslurm import knobs
from ftslurm.replica import fixes

SWITCH = "FTSLURM_EARLY_FIRST_SYNC"


def first_local_step(sync_every: int, sync_delay: int) -> int:
    """The counter value whose next inner step prepares a fragment (DiLoCo's `_step_post_hook`
    prepares at `sync_every - delay` and syncs at `sync_every`)."""
    return max(0, sync_every - sync_delay - 1)


def install(env: Mapping[str, str] | None = None) -> str | None:
    """Patch torchft's DiLoCo when this is a restarted attempt; the line to log, or None."""
    env = os.environ if env is None else env
    spare = knobs.get(env, "FTSLURM_SPARE")  # a spare joins a running group, as a restart
    if knobs.get(env, "FTSLURM_ATTEMPT") <= 0 and not spare:
        return None
    if not fixes.switch_on(SWITCH, env):
        return f"[ftslurm] early first sync: OFF ({SWITCH}=0)"
    from torchft import local_sgd

    upstream = local_sgd.DiLoCo.__init__
    if getattr(upstream, "_ftslurm", False):
        return None

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched __init__
        upstream(self, *args, **kwargs)
        self._local_step = first_local_step(self._sync_every, self._fragment_sync_delay)

    __init__._ftslurm = True  # type: ignore[attr-defined]
    local_sgd.DiLoCo.__init__ = __init__  # type: ignore[method-assign]
    return (
        "[ftslurm] early first sync: ON (a restarted DiLoCo replica asks for its healing quorum "
        f"after one inner step; {SWITCH}=0 turns it off)"
    )
