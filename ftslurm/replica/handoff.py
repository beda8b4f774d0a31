"""What the launcher and its training worker pass each other: the variables the launcher sets
in the worker's environment, the words of the warm next run's go file, and the notes the
worker leaves for the launcher.

Why a module of its own: the two processes live in `replica/launcher/` and `replica/worker/`,
and neither side imports the other's modules (tests/test_architecture.py); the names both must
spell the same way live here, next to the notes they name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftslurm.knobs import Settings

# The launcher's pid: torchrun may die before the worker's interpreter even starts, and an
# orphan's parent is then init, so `os.getppid()` alone cannot tell; the launcher must still
# be an ancestor of a worker that may train (worker/train.check_lifeline).
LAUNCHER_ENV = "FTSLURM_LAUNCHER_PID"
# The file each rank writes its progress to (worker/peer_watch.py), read by the launcher's
# watchdog: where the worker is in its step, and since when.
PROGRESS_ENV = "FTSLURM_PROGRESS_FILE"
# The file the launcher creates when Slurm signals the time limit (`--signal=B:USR1@<s>`): the
# worker finishes its step, saves a final checkpoint and ends training (the launcher requeues).
TIME_LIMIT_ENV = "FTSLURM_TIME_LIMIT_FILE"
# A warm next run (launcher/warm_restart.py) waits in every rank until the launcher writes GO
# (train) or STOP into this file (worker/standby.wait_for_go).
GO_ENV = "FTSLURM_WARM_GO_FILE"
GO, STOP = "go", "stop"


def stopped_early_note(flag: Path) -> Path:
    """Where the worker says it ended training at the time limit, before its last step (the
    step it stopped after): a worker that exits 0 without it finished its training, even when
    Slurm's signal came during its last step."""
    return flag.with_name(flag.name + ".stopped")


def signal_margin_line(env: Mapping[str, str] | Settings | None = None) -> str | None:
    """The line that says how long before the time limit Slurm signals this job, when known:
    Slurm does not tell a job its `--signal`, so only what `ftslurm submit` passed on
    (FTSLURM_TIME_LIMIT_SIGNAL_S, from --time-limit-signal, sbatch's --signal or the script's
    #SBATCH line) is said; None without it (a bare `sbatch`). The launcher says it at the
    start and the worker when it arms its time-limit save."""
    from ftslurm import knobs

    s = knobs.load(env)
    if not s.is_set(knobs.TIME_LIMIT_SIGNAL):
        return None
    margin = s[knobs.TIME_LIMIT_SIGNAL]
    return (f"[ftslurm] time-limit signal: USR1 {margin} s before the limit (up to 60 s "
            "earlier): the replicas then finish their step, save a final checkpoint and "
            f"requeue ({knobs.TIME_LIMIT_SIGNAL}={margin})")
