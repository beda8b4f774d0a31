"""The next run of a replica's training, started ahead and waiting warm in its allocation.

A restart in place (job.py) spends most of its time before torchft's Manager exists: torchrun,
the interpreter and the imports of torch, torchft and torchtitan in every rank, which on a
replica of R ranks contend for the node's cores with the survivors' training. So, once the
current run trains (its first progress note), the launcher starts the run that would follow a
failure: the same command, in a folder of its own, its ranks stopped at the start of
torchtitan's FTManager.__init__ (standby.wait_for_go) where nothing has told the Lighthouse or
the data loader who they are. When the training fails and the replica restarts in place, the
launcher writes `go` and the waiting ranks go on from there; when it does not (a requeue, the
end of training, a stop), the launcher writes `stop` and ends them.

Only in a run without spares (a task of a run with spares comes back as a spare, which waits
warm already) and only while restarts in place are left (FT_MAX_RESTARTS). FT_WARM_RESTART
switches it; its cost is one idle copy of the replica's processes per node (their memory; on a
GPU a CUDA context per rank), which is why it is on for CPU runs and off on GPUs, where that
cost is not measured.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import knobs, procs, runner, safefile
from ftslurm.replica.handoff import GO, GO_ENV, STOP


@dataclass
class Standby:
    """A started next run: its process and its folder (the run's notes: progress, time limit,
    config error, and the go file)."""

    child: runner.Child
    folder: Path
    restart: int
    started: float = field(default_factory=time.time)

    @property
    def go_file(self) -> Path:
        return self.folder / "go"

    def alive(self) -> bool:
        return self.child.poll() is None

    def stopped(self) -> bool:
        """Whether one of its processes is stopped (SIGSTOP: a hang injected through pkill,
        which cannot tell it from the training): released, it would never train."""
        return procs.any_stopped(procs.descendants([self.child.pid]))

    def release(self) -> bool:
        """Let the waiting ranks train; False when `go` could not be written (a full disk):
        the run is then discarded and the restart starts cold."""
        try:
            safefile.write_atomic(self.go_file, GO)
        except OSError:
            return False
        return True

    def discard(self, wait_s: float = 10.0) -> None:
        """End the waiting run and remove its folder: `stop` lets its ranks exit on their
        own; whatever is left after `wait_s` is killed with every process under it."""
        if self.alive():
            try:
                safefile.write_atomic(self.go_file, STOP)
            except OSError:
                pass
            runner.wait_for_exit(self.child, wait_s)  # what is left after it: killed below
            procs.kill_pids(procs.descendants([self.child.pid]), signal.SIGKILL)
            self.child.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class Holder:
    """The launcher's side: starts the next run once the current one trains, hands it to the
    restart, ends it otherwise. `spawn(folder, restart)` starts the run of restart number
    `restart` with its notes in `folder` (job.py builds the command and the environment)."""

    def __init__(self, enabled: bool, cap: int, folder_prefix: str,
                 spawn: Callable[[Path, int], runner.Child],
                 say: Callable[[str], None] = print) -> None:  # fmt: skip
        self.enabled, self.cap, self.prefix, self.spawn = enabled, cap, folder_prefix, spawn
        self.say = say
        self.ready: Standby | None = None

    def maybe_start(self, progress: Path, restart: int, blocked: bool) -> Standby | None:
        """Start the run of restart `restart + 1` when the current one has trained a step
        (`progress` exists: its imports no longer compete with the start), restarts in place
        are left and nothing (`blocked`: a stop or time-limit signal) rules a restart out."""
        if (not self.enabled or self.ready is not None or blocked or restart >= self.cap
                or not progress.exists()):  # fmt: skip
            return None
        folder = None
        try:
            folder = Path(tempfile.mkdtemp(prefix=self.prefix, dir=tempfile.gettempdir()))
            self.ready = Standby(self.spawn(folder, restart + 1), folder, restart + 1)
        except Exception as e:  # noqa: BLE001 - a convenience: the training runs on without it
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            self.enabled = False
            self.say(f"warm restart: no warm next run in this allocation ({type(e).__name__}: "
                     f"{e}); a restart in place starts cold")  # fmt: skip
            return None
        return self.ready

    def take(self, restart: int) -> Standby | None:
        """The waiting run for restart `restart`, if one is alive and not stopped (another is
        discarded: the restart then starts cold)."""
        ready, self.ready = self.ready, None
        if ready is None:
            return None
        if ready.restart == restart and ready.alive() and not ready.stopped():
            return ready
        ready.discard(wait_s=0)  # not worth a wait: the restart starts cold at once
        return None

    def discard(self) -> None:
        if self.ready is not None:
            ready, self.ready = self.ready, None
            ready.discard()


def waiting(environ: Mapping[str, str]) -> bool:
    """Whether a process with this environment is a warm next run that has not been told to
    train: failure injection leaves it alone (it is not the replica's training)."""
    go = environ.get(GO_ENV)
    return bool(go) and safefile.read_text(Path(go)) != GO


def enabled(env: Mapping[str, str] | knobs.Settings, device: str) -> bool:
    """FT_WARM_RESTART, whose default depends on the device."""
    return bool(knobs.load(env, device).FT_WARM_RESTART)
