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

With fix 9 (FTSLURM_FIX_CONSISTENT_RESUME, `install_resume`) the steps of the model checkpoints
still on disk are kept too, and a restart takes its data position from the model checkpoint's
step, not from the newest per-step folder (see `install_resume`).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftslurm.knobs import Settings

from ftslurm import logvocab

STEP_DIR_RE = re.compile(r"step-(\d+)")
# fix 9 on: the FT dataloader checkpoints of the model checkpoints' steps are kept
KEEP_MODEL_STEPS = False


def stale_steps(
    complete: Mapping[int, bool], writing: int, keep: Collection[int] = ()
) -> list[int]:
    """The step folders to delete, oldest first.

    `complete` maps each `step-<N>` folder's N to whether it has its `.metadata`; `writing`
    is the step whose save was just started (its folder may be half written); `keep`: steps
    a restart may still load (fix 9: those of the model checkpoints on disk)."""
    done = [step for step, ok in complete.items() if ok and step != writing]
    if not done:
        return []
    keep_from = max(done)
    return sorted(
        step for step in complete if step < keep_from and step != writing and step not in keep
    )


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


def purge(folder: Path, writing: int, model_folder: Path | None = None) -> list[int]:
    """Delete the stale step folders under `folder`; returns the steps deleted. With
    `model_folder`, the steps of the model checkpoints in it (complete or being written) stay."""
    keep = scan(model_folder) if model_folder is not None else {}
    steps = stale_steps(scan(folder), writing, keep)
    for step in steps:
        shutil.rmtree(folder / f"step-{step}", ignore_errors=True)
    return steps


class Purger:
    """One daemon thread per training process that runs `purge` off the training loop.

    Requests queue up in order; a request that fails is reported once and the next one
    tries again (deleting is housekeeping: it must never stop training)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Path, int, Path | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failed: str | None = None

    def request(self, folder: Path, writing: int, model_folder: Path | None = None) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ftslurm-ft-checkpoint-purge", daemon=True
                )
                self._thread.start()
        self._queue.put((folder, writing, model_folder))

    def _run(self) -> None:
        while True:
            folder, writing, model_folder = self._queue.get()
            try:
                purge(folder, writing, model_folder)
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
            model_folder = Path(self.folder) if KEEP_MODEL_STEPS and self.enable else None
            PURGER.request(Path(self._ft_folder()), step, model_folder)

    _ft_save._ftslurm = True  # type: ignore[attr-defined]
    CheckpointManager._ft_save = _ft_save  # type: ignore[method-assign]


# ---------------------------------------------------------------- fix 9: a consistent resume


@dataclass(frozen=True)
class Resume:
    """What a (re)started replica loads: the model checkpoint's step and the data position.

    `model_step`: the newest complete model checkpoint (-1: none; 0: a seed checkpoint, the
    model only); `data_step`: the step of this replica's data position to load (None: from the
    start of its data); `newest_data`: its newest complete per-step data position (what a heal
    into a running group continues from); `half_written`: model step folders newer than
    `model_step` without `.metadata` (saves cut off by the failure)."""

    model_step: int
    data_step: int | None
    newest_data: int | None
    half_written: tuple[int, ...] = ()
    note: str = ""


def plan_resume(model: Mapping[int, bool], data: Mapping[int, bool], load_step: int = -1) -> Resume:
    """The data position that matches the model checkpoint torchtitan is about to load.

    `model`/`data`: `scan` of the model checkpoint folder and of this replica's FT folder;
    `load_step`: `--checkpoint.load_step` (-1: the newest complete one, as torchtitan picks)."""
    model_step = load_step if load_step != -1 else max(
        (s for s, ok in model.items() if ok), default=-1)  # fmt: skip
    half = tuple(sorted(s for s, ok in model.items() if not ok and s > model_step))
    done = [s for s, ok in data.items() if ok]
    newest = max(done, default=None)
    if model_step <= 0:
        return Resume(model_step, None, newest, half)
    if data.get(model_step):
        return Resume(model_step, model_step, newest, half)
    older = max((s for s in done if s < model_step), default=None)
    note = (f"no complete data position at step {model_step}: "
            + (f"step {older} (steps {older + 1}..{model_step} of this replica's data are "
               "repeated)" if older is not None else "from the start"))  # fmt: skip
    return Resume(model_step, older, newest, half, note)


def heal_data_step(resume: Resume, healed_step: int, peer_restarted: bool = False) -> int | None:
    """The data position to switch to when the first quorum heals this replica to a peer's
    state whose last completed step is `healed_step`, or None to keep `resume.data_step`.

    A peer at or past this replica's newest position trained on while it was gone (a replica
    or node failure): its steps up to that position were committed, so it goes on from there.
    A peer that restarted from the model checkpoint too (a late replica of a whole-array
    restart: `peer_restarted`, or a peer below this replica's newest position) trained a new
    lineage from it: the steps after the checkpoint were lost for everyone, so their data is
    read again, however far the peer got before this replica came back."""
    newest = resume.newest_data
    if peer_restarted or newest is None or newest == resume.data_step or healed_step < newest:
        return None
    return newest


# In the model checkpoint folder: a replica trained on from model checkpoint <N> without a peer
# to heal from (the first back after a failure of every replica)
TRAINED_ON_PREFIX = "trained-on-from-step-"


def mark_trained_on(folder: Path, step: int) -> None:
    """Say that this replica trains on from model checkpoint `step` (housekeeping: a file that
    cannot be written only costs a late peer its exact data position)."""
    try:
        (folder / f"{TRAINED_ON_PREFIX}{step}").touch()
    except OSError:
        pass


def peer_restarted_since(folder: Path, model_step: int, newest_data: Path) -> bool:
    """Whether a replica trained on from model checkpoint `model_step` after this replica saved
    its newest data position (`newest_data`, a `step-<N>` folder): then every replica had
    stopped and the group started again from that checkpoint, and this replica's positions
    after it belong to a lost lineage. An older mark (an earlier restart) does not count."""
    try:
        marked = (folder / f"{TRAINED_ON_PREFIX}{model_step}").stat().st_mtime
        mine = (newest_data / ".metadata").stat().st_mtime
    except OSError:
        return False
    return marked > mine


def install_resume() -> None:
    """Fix 9: torchtitan's CheckpointManager loads each replica's data position at the step of
    the model checkpoint it loads (and says so), skips half-written checkpoints with a log
    line, switches to the newest position when the first quorum heals the replica from a
    peer, and logs each saved data position."""
    global KEEP_MODEL_STEPS
    import torch.distributed as dist
    from torchtitan.components.checkpoint import CheckpointManager

    upstream_load, upstream_ft_load = CheckpointManager.load, CheckpointManager._ft_load
    upstream_ft_save = CheckpointManager._ft_save
    if getattr(upstream_load, "_ftslurm", False):
        return
    KEEP_MODEL_STEPS = True

    def load(self: CheckpointManager, step: int = -1) -> bool:
        if self.enable and self.enable_ft_dataloader_checkpoints:
            folder = Path(self.folder)
            resume = plan_resume(scan(folder), scan(Path(self._ft_folder())), step)
            self._ftslurm_resume = resume
            for half in resume.half_written:
                print(logvocab.half_written_line(folder / f"step-{half}"), flush=True)
            _watch_first_heal(self, resume)
        return upstream_load(self, step)

    def _ft_load(self: CheckpointManager) -> None:
        resume: Resume | None = getattr(self, "_ftslurm_resume", None)
        if resume is None:  # no model checkpoints: upstream's newest position
            upstream_ft_load(self)
            return
        print(logvocab.resume_line(self.ft_replica_id, resume.model_step, resume.data_step,
                                   resume.note), flush=True)  # fmt: skip
        if resume.data_step is not None:
            _load_data(self, resume.data_step)

    def _ft_save(self: CheckpointManager, step: int) -> None:
        resume: Resume | None = getattr(self, "_ftslurm_resume", None)
        if resume is not None and not getattr(self, "_ftslurm_saved", False):
            # the first save after a restart: the positions of a lost lineage (steps after
            # the one loaded) go before this lineage writes the same step numbers
            self._ftslurm_saved = True
            loaded = getattr(self, "_ftslurm_data_step", resume.data_step)
            if (resume.model_step > 0 and not getattr(self, "_ftslurm_healed", False)
                    and (not dist.is_initialized() or dist.get_rank() == 0)):  # fmt: skip
                mark_trained_on(Path(self.folder), resume.model_step)  # no peer healed it
            if not dist.is_initialized() or dist.get_rank() == 0:
                for newer in sorted(scan(Path(self._ft_folder()))):
                    if loaded is None or newer > loaded:
                        shutil.rmtree(Path(self._ft_folder()) / f"step-{newer}",
                                      ignore_errors=True)  # fmt: skip
        upstream_ft_save(self, step)
        position = _sample_idx(self.ft_states.get("dataloader"))
        print(logvocab.data_position_line(self.ft_replica_id, step, position), flush=True)

    for f in (load, _ft_load, _ft_save):
        f._ftslurm = True  # type: ignore[attr-defined]
    CheckpointManager.load = load  # type: ignore[method-assign]
    CheckpointManager._ft_load = _ft_load  # type: ignore[method-assign]
    CheckpointManager._ft_save = _ft_save  # type: ignore[method-assign]


def _load_data(manager: Any, step: int) -> None:
    """Load this replica's data position of `step` (torchtitan's own `_ft_load`, at a step,
    with its log line)."""
    from torchtitan.tools.logging import logger

    logger.info(f"Loading the FT checkpoint at step {step}.")
    manager.dcp_load(manager.ft_states, checkpoint_id=manager._create_checkpoint_id(
        step, folder=manager._ft_folder()), from_hf=False, from_quantized=False)  # fmt: skip
    manager._ftslurm_data_step = step


def _sample_idx(dataloader: Any) -> int | None:
    """The live dataset's count of documents read (torchtitan's HF text datasets), if any."""
    return getattr(getattr(dataloader, "dataset", None), "_sample_idx", None)


def _watch_first_heal(manager: Any, resume: Resume) -> None:
    """Wrap the torchft Manager's load of a peer's state: a heal before this replica's first
    save (no batch read yet) moves its data position per `heal_data_step`."""
    ft = manager.ft_manager
    fns = getattr(ft, "_load_state_dict_fns", None)
    if not fns:
        return
    for key, upstream in list(fns.items()):

        def healed(state: Any, upstream: Any = upstream) -> None:
            upstream(state)
            if getattr(manager, "_ftslurm_saved", False) or getattr(manager, "_ftslurm_healed",
                                                                     False):  # fmt: skip
                return
            manager._ftslurm_healed = True
            # the peer's state is taken inside its step S (the trainer counts S before
            # train_step), after its step S - 1
            step = getattr(manager.states.get("train_state"), "step", None)
            done = step - 1 if isinstance(step, int) else None
            restarted = resume.model_step > 0 and resume.newest_data is not None and (
                peer_restarted_since(Path(manager.folder), resume.model_step,
                                     Path(manager._ft_folder()) / f"step-{resume.newest_data}"))
            target = heal_data_step(resume, done, restarted) if done is not None else None
            print(logvocab.heal_position_line(manager.ft_replica_id, done, target,
                                              resume.data_step), flush=True)  # fmt: skip
            if target is not None:
                _load_data(manager, target)

        fns[key] = healed


# ---------------------------------------------------------------- Slurm's time limit

# The file the launcher creates when Slurm signals the time limit (`--signal=B:USR1@<s>`): the
# worker finishes its step, saves a final checkpoint and ends training (job.py requeues).
TIME_LIMIT_ENV = "FTSLURM_TIME_LIMIT_FILE"


STOP_RE = re.compile(r"stop-after-step-(\d+)")


def agree_stop_step(folder: Path | None, step: int) -> int:
    """The step after which this process stops, having seen Slurm's signal after `step`.

    Every replica (and every rank of one) sees the signal after its own step: one after step
    5, its peer after step 6. So the first to see it marks `stop-after-step-<step + 1>` in the
    shared checkpoint folder, and everyone stops after the lowest mark not behind them: all
    save their final checkpoint at the same step (one step later at most)."""
    if folder is None:
        return step
    try:
        marks = [int(m[1]) for name in os.listdir(folder) if (m := STOP_RE.fullmatch(name))]
    except OSError:
        marks = []
    ahead = [s for s in marks if s >= step]
    if ahead:
        return min(ahead)
    try:
        (folder / f"stop-after-step-{step + 1}").touch()
    except OSError:
        return step
    return step + 1


def signal_margin_line(env: Mapping[str, str] | Settings | None = None) -> str | None:
    """The line that says how long before the time limit Slurm signals this job, when known:
    Slurm does not tell a job its `--signal`, so only what `ftslurm submit` passed on
    (FTSLURM_TIME_LIMIT_SIGNAL_S, from --time-limit-signal, sbatch's --signal or the script's
    #SBATCH line) is said; None without it (a bare `sbatch`)."""
    from ftslurm import knobs

    s = knobs.load(env)
    if not s.is_set(knobs.TIME_LIMIT_SIGNAL):
        return None
    margin = s[knobs.TIME_LIMIT_SIGNAL]
    return (f"[ftslurm] time-limit signal: USR1 {margin} s before the limit (up to 60 s "
            "earlier): the replicas then finish their step, save a final checkpoint and "
            f"requeue ({knobs.TIME_LIMIT_SIGNAL}={margin})")


def install_time_limit(flag: Path, env: Mapping[str, str] | None = None) -> None:
    """After each step's save, once `flag` exists and the step agreed (`agree_stop_step`) is
    reached: save a model checkpoint at this step (unless the interval just saved one), wait
    until it is written, and end the training loop. Says the signal's margin when known."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.train import Trainer

    upstream_save, upstream_should = CheckpointManager.save, CheckpointManager._should_save
    upstream_continue = Trainer.should_continue_training
    if getattr(upstream_save, "_ftslurm", False):
        return
    if (line := signal_margin_line(env)) is not None:
        print(line, flush=True)

    def _should_save(self: CheckpointManager, curr_step: int, last_step: bool = False) -> bool:
        if getattr(self, "_ftslurm_force", False) and self.enable and not self.load_only:
            return True
        return upstream_should(self, curr_step, last_step)

    def save(self: CheckpointManager, curr_step: int, last_step: bool = False) -> None:
        upstream_save(self, curr_step, last_step)
        if last_step or not flag.exists():
            return
        trainer = self.states.get("train_state") if hasattr(self, "states") else None
        if getattr(trainer, "_ftslurm_stop", False):
            return
        folder = Path(self.folder) if getattr(self, "folder", None) else None
        if curr_step < agree_stop_step(folder, curr_step):
            return  # a peer saw the signal a step later: stop after the next step together
        saved = "off"  # model checkpoints off: nothing to resume from but the data positions
        if getattr(self, "enable", False):
            if not upstream_should(self, curr_step, False):
                self._ftslurm_force = True
                try:
                    upstream_save(self, curr_step, False)
                finally:
                    self._ftslurm_force = False
            self._async_wait()  # the checkpoint is on disk before the process ends
            saver = getattr(self, "ft_manager", None)
            saved = "saved" if saver is None or saver.participating_rank() == 0 else "peer"
        elif getattr(self, "enable_ft_dataloader_checkpoints", False):
            self._async_wait()
        print(logvocab.final_checkpoint_line(curr_step, saved), flush=True)
        if trainer is not None:
            trainer._ftslurm_stop = True

    def should_continue_training(self: Trainer) -> bool:
        return not getattr(self, "_ftslurm_stop", False) and upstream_continue(self)

    save._ftslurm = True  # type: ignore[attr-defined]
    CheckpointManager.save = save  # type: ignore[method-assign]
    CheckpointManager._should_save = _should_save  # type: ignore[method-assign]
    Trainer.should_continue_training = should_continue_training  # type: ignore[method-assign]
