"""Retention for torchtitan's per-replica FT dataloader checkpoints (fix 5 in fixes.py).

With fault tolerance on, torchtitan 0.2.2 saves each replica's dataloader position at EVERY
training step, whatever `checkpoint.interval` and `checkpoint.enable` say
(`CheckpointManager.save` -> `_ft_save`, before the interval check), as a DCP folder
`<dump>/<checkpoint.folder>/ft-replicat-<replica>/step-<N>` (a `.metadata` file plus one
`.distcp` file per rank), and never deletes one: `keep_latest_k` purges only the model
checkpoint folder. On a shared file system a GPU run leaves 9 files per step per 8-GPU node
(upstream: pytorch/torchtitan PR 4424, open). A restarted replica reads only the newest
complete one (`_find_load_step`: the highest step with a `.metadata`).

What is kept: the step being written now, and the newest COMPLETE step other than it (the one
a restart would load). Everything older goes. A step folder without `.metadata` (a save cut
short by a kill) is deleted only once a newer complete one exists, so a kill at any moment
leaves something to load. Only the replica's rank 0 deletes, on a background thread, after
torchtitan has waited for the previous step's asynchronous save (so that step's `.metadata` is
written by then).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

STEP_DIR_RE = re.compile(r"step-(\d+)")


def stale_steps(complete: Mapping[int, bool], writing: int) -> list[int]:
    """The step folders to delete, oldest first.

    `complete` maps each `step-<N>` folder's N to whether it has its `.metadata`; `writing`
    is the step whose save was just started (its folder may be half written)."""
    done = [step for step, ok in complete.items() if ok and step != writing]
    if not done:
        return []
    keep_from = max(done)
    return sorted(step for step in complete if step < keep_from and step != writing)


def scan(folder: Path) -> dict[int, bool]:
    """The `step-<N>` folders under `folder`: N -> whether its `.metadata` is there."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        if m := STEP_DIR_RE.fullmatch(name):
            found[int(m[1])] = (folder / name / ".metadata").is_file()
    return found


def purge(folder: Path, writing: int) -> list[int]:
    """Delete the stale step folders under `folder`; returns the steps deleted."""
    steps = stale_steps(scan(folder), writing)
    for step in steps:
        shutil.rmtree(folder / f"step-{step}", ignore_errors=True)
    return steps


class Purger:
    """One daemon thread per training process that runs `purge` off the training loop.

    Requests queue up in order; a request that fails is reported once and the next one
    tries again (deleting is housekeeping: it must never stop training)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Path, int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failed: str | None = None

    def request(self, folder: Path, writing: int) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ftslurm-ft-checkpoint-purge", daemon=True
                )
                self._thread.start()
        self._queue.put((folder, writing))

    def _run(self) -> None:
        while True:
            folder, writing = self._queue.get()
            try:
                purge(folder, writing)
            except OSError as e:
                if self.failed is None:
                    self.failed = str(e)
                    print(f"[ftslurm] could not delete old FT dataloader checkpoints: {e}",
                          flush=True)  # fmt: skip


PURGER = Purger()


def install() -> None:
    """Make torchtitan's CheckpointManager purge after every per-step FT dataloader save."""
    import torch.distributed as dist
    from torchtitan.components.checkpoint import CheckpointManager

    upstream = CheckpointManager._ft_save
    if getattr(upstream, "_ftslurm", False):
        return

    def _ft_save(self: CheckpointManager, step: int) -> None:
        upstream(self, step)
        if not dist.is_initialized() or dist.get_rank() == 0:
            PURGER.request(Path(self._ft_folder()), step)

    _ft_save._ftslurm = True  # type: ignore[attr-defined]
    CheckpointManager._ft_save = _ft_save  # type: ignore[method-assign]
