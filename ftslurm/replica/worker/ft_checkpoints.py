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
step, not from the newest per-step folder (see `install_resume`); it never resumes from a
model-only checkpoint (the last step's, `last_save_model_only`): it has no optimizer or LR
schedule to load.

Only step folders of this user's (or root's) are judged (`scan`), and one further above the
step being written than a lost lineage can reach (`stale_steps`' `ahead`) is neither the newest
position nor deleted: a planted `step-99999999` must not make the purge delete every real one.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftslurm import logvocab, safefile
from ftslurm.errors import UserError
from ftslurm.replica import patches
from ftslurm.replica.handoff import signal_margin_line, stopped_early_note

STEP_DIR_RE = re.compile(r"step-([0-9]{1,12})")
# fix 9 on: the FT dataloader checkpoints of the model checkpoints' steps are kept
KEEP_MODEL_STEPS = False


def stale_steps(
    complete: Mapping[int, bool], writing: int, keep: Collection[int] = (),
    ahead: int | None = None,
) -> list[int]:  # fmt: skip
    """The step folders to delete, oldest first.

    `complete` maps each `step-<N>` folder's N to whether it has its `.metadata`; `writing`
    is the step whose save was just started (its folder may be half written); `keep`: steps
    a restart may still load (fix 9: those of the model checkpoints on disk). `ahead`: how
    far above `writing` a real position can be (None: any). Positions above the step being
    written are a lost lineage's, after a restart from an older model checkpoint, so at most
    one checkpoint interval ahead; a folder further up (planted, or another run's) is neither
    the newest position, which would make every real one below it stale, nor deleted."""
    ceiling = None if ahead is None else writing + max(ahead, 0)
    done = [step for step, ok in complete.items()
            if ok and step != writing and (ceiling is None or step <= ceiling)]  # fmt: skip
    if not done:
        return []
    keep_from = max(done)
    return sorted(
        step for step in complete if step < keep_from and step != writing and step not in keep
    )


def _ours(st: os.stat_result) -> bool:
    """Whether a file or folder was made by this user (or root): the training's own."""
    return st.st_uid in (os.geteuid(), 0)


def _own_dir(path: str | Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and _ours(st)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def scan(folder: Path) -> dict[int, bool]:
    """The `step-<N>` folders under `folder`: N -> whether its `.metadata` is there. Only
    real folders of this user's (or root's) are listed: a link, a file or another user's
    folder under a step's name is neither loaded from, kept, nor deleted."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        if (m := STEP_DIR_RE.fullmatch(name)) and _own_dir(folder / name):
            found[int(m[1])] = _regular(folder / name / ".metadata")
    return found


def purge(folder: Path, writing: int, model_folder: Path | None = None,
          ahead: int = 0) -> list[int]:  # fmt: skip
    """Delete the stale step folders under `folder`; returns the steps deleted. With
    `model_folder`, the steps of the model checkpoints in it (complete or being written) stay.
    `ahead`: how far above `writing` a position still counts (`stale_steps`; the checkpoint
    interval when model checkpoints are on)."""
    keep = scan(model_folder) if model_folder is not None else {}
    steps = stale_steps(scan(folder), writing, keep, ahead)
    for step in steps:
        shutil.rmtree(folder / f"step-{step}", ignore_errors=True)
    return steps


class Purger:
    """One daemon thread per training process that runs `purge` off the training loop.

    Requests queue up in order; a request that fails is reported once and the next one
    tries again (deleting is housekeeping: it must never stop training)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Path, int, Path | None, int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failed: str | None = None

    def request(self, folder: Path, writing: int, model_folder: Path | None = None,
                ahead: int = 0) -> None:  # fmt: skip
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ftslurm-ft-checkpoint-purge", daemon=True
                )
                self._thread.start()
        self._queue.put((folder, writing, model_folder, ahead))

    def _run(self) -> None:
        while True:
            folder, writing, model_folder, ahead = self._queue.get()
            try:
                purge(folder, writing, model_folder, ahead)
            except OSError as e:
                if self.failed is None:
                    self.failed = str(e)
                    print(f"[ftslurm] could not delete old FT dataloader checkpoints: {e}",
                          flush=True)  # fmt: skip


PURGER = Purger()


def install() -> None:
    """Make torchtitan's CheckpointManager purge after every per-step FT dataloader save."""
    patches.install("ft_checkpoint_retention.ft_save", _purging)


def _purging(upstream: Callable[..., None]) -> Callable[..., None]:
    """CheckpointManager._ft_save, then a purge request (rank 0)."""
    import torch.distributed as dist

    def _ft_save(self: Any, step: int) -> None:
        upstream(self, step)
        if not dist.is_initialized() or dist.get_rank() == 0:
            model_folder = Path(self.folder) if KEEP_MODEL_STEPS and self.enable else None
            ahead = _interval(self) if self.enable else 0
            PURGER.request(Path(self._ft_folder()), step, model_folder, ahead)

    return _ft_save


def _interval(manager: Any) -> int:
    """The model checkpoint interval of a CheckpointManager (0 when it has none)."""
    interval = getattr(manager, "interval", 0)
    return interval if type(interval) is int and interval > 0 else 0


# ---------------------------------------------------------------- fix 9: a consistent resume


@dataclass(frozen=True)
class Resume:
    """What a (re)started replica loads: the model checkpoint's step and the data position.

    `model_step`: the newest complete model checkpoint (-1: none; 0: a seed checkpoint, the
    model only); `data_step`: the step of this replica's data position to load (None: from the
    start of its data); `newest_data`: its newest complete per-step data position (what a heal
    into a running group continues from); `half_written`: model step folders newer than
    `model_step` without `.metadata` (saves cut off by the failure); `model_only`: complete
    ones newer than `model_step` that hold the model alone (passed over)."""

    model_step: int
    data_step: int | None
    newest_data: int | None
    half_written: tuple[int, ...] = ()
    note: str = ""
    model_only: tuple[int, ...] = ()


def plan_resume(model: Mapping[int, bool], data: Mapping[int, bool], load_step: int = -1,
                model_only: Collection[int] = ()) -> Resume:  # fmt: skip
    """The data position that matches the model checkpoint torchtitan is about to load.

    `model`/`data`: `scan` of the model checkpoint folder and of this replica's FT folder;
    `load_step`: `--checkpoint.load_step` (-1: the newest complete one, as torchtitan picks,
    but not one of `model_only`: no training resumes from the model alone, see
    `model_only_steps`)."""
    model_step = load_step if load_step != -1 else max(
        (s for s, ok in model.items() if ok and s not in model_only), default=-1)  # fmt: skip
    half = tuple(sorted(s for s, ok in model.items() if not ok and s > model_step))
    only = tuple(sorted(s for s in model_only if model.get(s) and s > model_step))
    done = [s for s, ok in data.items() if ok]
    newest = max(done, default=None)
    if model_step <= 0:
        return Resume(model_step, None, newest, half, model_only=only)
    if data.get(model_step):
        return Resume(model_step, model_step, newest, half, model_only=only)
    older = max((s for s in done if s < model_step), default=None)
    note = (f"no complete data position at step {model_step}: "
            + (f"step {older} (steps {older + 1}..{model_step} of this replica's data are "
               "repeated)" if older is not None else "from the start"))  # fmt: skip
    return Resume(model_step, older, newest, half, note, only)


# What a checkpoint to resume training from holds besides the model (the keys DCP lists in its
# `.metadata`: `optimizer.state...`, `lr_scheduler.base_lrs`); a model-only save has neither.
TRAINING_STATE_KEYS = (b"optimizer.", b"lr_scheduler.")
MAX_METADATA_BYTES = 1 << 30


def holds_model_only(step_dir: Path) -> bool:
    """Whether the complete model checkpoint `step_dir` lacks the optimizer or the LR
    schedule: torchtitan's save at the last step with `last_save_model_only` (on by default,
    and in the 8B presets). Loading it to resume fails (`Missing key in checkpoint
    state_dict: lr_scheduler.base_lrs`). Read from its `.metadata` as bytes (DCP pickles it:
    it is never unpickled here), a chunk at a time; a file that cannot be read through is
    taken as a full checkpoint (torchtitan's own choice stands)."""
    try:
        fd = os.open(step_dir / ".metadata", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)  # fmt: skip
    except OSError:
        return False
    found: set[bytes] = set()
    tail, total = b"", 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        while len(found) < len(TRAINING_STATE_KEYS):
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return True  # read to its end without both
            total += len(chunk)
            if total > MAX_METADATA_BYTES:
                return False
            window = tail + chunk
            found.update(k for k in TRAINING_STATE_KEYS if k in window)
            tail = window[-32:]
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def model_only_steps(folder: Path, model: Mapping[int, bool]) -> tuple[int, ...]:
    """The newest complete model checkpoints (`model`: `scan(folder)`) that hold the model
    alone, down to the newest full one: those a resume passes over. A seed checkpoint (step
    0) is model-only by design, and torchtitan loads it as such: it is not judged."""
    out = []
    for step in sorted((s for s, ok in model.items() if ok and s > 0), reverse=True):
        if not holds_model_only(folder / f"step-{step}"):
            break
        out.append(step)
    return tuple(sorted(out))


def finished_step(folder: Path, steps: int) -> int | None:
    """The step of a complete model checkpoint at or past the run's last step `steps`
    (`--training.steps`) in the model checkpoint folder `folder`: training is finished and
    there is nothing to resume (None: no such checkpoint). For a launcher that asks whether
    to start or requeue a replica at all."""
    done = [s for s, ok in scan(folder).items() if ok and s >= steps > 0]
    return max(done, default=None)


def finished_line(folder: Path, step: int, steps: int) -> str:
    return (f"[ftslurm] training already finished: {folder / f'step-{step}'} is the last "
            f"step's checkpoint (step {step} of --training.steps={steps}); nothing to resume "
            "or train")


def skipped_line(folder: Path, step: int, resume_step: int) -> str:
    start = (f"resuming from step {resume_step}" if resume_step > 0
             else "no other checkpoint: training starts at step 1")  # fmt: skip
    return (f"[ftslurm] skipping model-only checkpoint {folder / f'step-{step}'} (no optimizer "
            f"or LR schedule to resume from): {start}")


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

    names = ("consistent_resume.load", "consistent_resume.ft_load", "consistent_resume.ft_save")
    if patches.installed(names[0]) or not patches.ready(*names):
        return
    KEEP_MODEL_STEPS = True
    for name, make in zip(names, (_resuming_load, _resuming_ft_load, _resuming_ft_save),
                          strict=True):
        patches.install(name, make)


def _resuming_load(upstream_load: Callable[..., bool]) -> Callable[..., bool]:
    """Fix 9: CheckpointManager.load plans the resume (data position, skipped checkpoints)."""

    def load(self: Any, step: int = -1) -> bool:
        if self.enable and self.enable_ft_dataloader_checkpoints:
            folder = Path(self.folder)
            model = scan(folder)
            only = model_only_steps(folder, model) if step == -1 else ()
            resume = plan_resume(model, scan(Path(self._ft_folder())), step, only)
            self._ftslurm_resume = resume
            for half in resume.half_written:
                print(logvocab.half_written_line(folder / f"step-{half}"), flush=True)
            if _finish_at_once(self, folder, resume):
                return False
            for skipped in resume.model_only:
                print(skipped_line(folder, skipped, resume.model_step), flush=True)
            _watch_first_heal(self, resume)
            if resume.model_only:  # torchtitan would pick the newest: the model-only one
                if resume.model_step >= 0:
                    return upstream_load(self, resume.model_step)
                self._ft_load()  # what torchtitan does when it finds no checkpoint
                return False
        return upstream_load(self, step)

    return load


def _resuming_ft_load(upstream_ft_load: Callable[..., None]) -> Callable[..., None]:
    """Fix 9: CheckpointManager._ft_load loads the planned data position."""

    def _ft_load(self: Any) -> None:
        resume: Resume | None = getattr(self, "_ftslurm_resume", None)
        if resume is None:  # no model checkpoints: upstream's newest position
            upstream_ft_load(self)
            return
        print(logvocab.resume_line(self.ft_replica_id, resume.model_step, resume.data_step,
                                   resume.note), flush=True)  # fmt: skip
        if resume.data_step is not None:
            _load_data(self, resume.data_step)

    return _ft_load


def _resuming_ft_save(upstream_ft_save: Callable[..., None]) -> Callable[..., None]:
    """Fix 9: CheckpointManager._ft_save deletes a lost lineage's positions first, and logs
    each saved position."""
    import torch.distributed as dist

    def _ft_save(self: Any, step: int) -> None:
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

    return _ft_save


def _finish_at_once(manager: Any, folder: Path, resume: Resume) -> bool:
    """Whether the newest checkpoint is the model-only one of the run's last step (a replica
    started again after the run finished): then it is said in one line and the trainer's step
    set to it, so that its loop ends before a step (nothing loaded: nothing is left to train)."""
    trainer = getattr(manager, "states", {}).get("train_state")
    config = getattr(trainer, patches.STACK.trainer_config_attr, None)
    steps = getattr(getattr(config, "training", None), "steps", None)
    if type(steps) is not int or not resume.model_only or max(resume.model_only) < steps:
        return False
    last = max(resume.model_only)
    print(finished_line(folder, last, steps), flush=True)
    trainer.step = last  # type: ignore[union-attr]
    return True


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

STOP_RE = re.compile(r"stop-after-step-([0-9]{1,12})")
# how far ahead of this process's step a peer's mark can be: a peer one step ahead saw the
# signal after its step, this one + 1, and marked the step after that
STOP_WINDOW = 2
# a mark older than this process by more than this (clocks of the nodes and of a shared file
# system differ a little) is an earlier time-limit segment's: the run stopped, was requeued,
# and its new processes started after it
MARK_SLACK_S = 5.0


def _marks(folder: Path, since: float | None) -> list[int]:
    """The steps of the stop marks in `folder`: regular files of this user's (or root's),
    made after `since` (less MARK_SLACK_S) when given."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        if (m := STOP_RE.fullmatch(name)) is None:
            continue
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and _ours(st) and (
                since is None or st.st_mtime >= since - MARK_SLACK_S):  # fmt: skip
            out.append(int(m[1]))
    return out


def agree_stop_step(folder: Path | None, step: int, since: float | None = None) -> int:
    """The step after which this process stops, having seen Slurm's signal after `step`.

    Every replica (and every rank of one) sees the signal after its own step: one after step
    5, its peer after step 6. So the first to see it marks `stop-after-step-<step + 1>` in the
    shared checkpoint folder, and everyone stops after the lowest mark not behind them: all
    save their final checkpoint at the same step (one step later at most). A mark counts only
    from `step` to `step + STOP_WINDOW` (no peer is further apart), and with `since` (when
    this process started) only when made since: a mark far ahead (a stale
    `stop-after-step-1000000`) would keep this replica training through the time limit,
    without its final checkpoint, and one of an earlier time-limit segment is not this one's."""
    if folder is None:
        return step
    ahead = [s for s in _marks(folder, since) if step <= s <= step + STOP_WINDOW]
    if ahead:
        return min(ahead)
    try:  # a stale mark of the same name counts again once touched; a link is refused
        fd = safefile.open_append(folder / f"stop-after-step-{step + 1}", 0o644)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except (OSError, UserError):
        return step
    return step + 1


def install_time_limit(flag: Path, env: Mapping[str, str] | None = None) -> None:
    """After each step's save, once `flag` exists and the step agreed (`agree_stop_step`) is
    reached: save a model checkpoint at this step (unless the interval just saved one), wait
    until it is written, and end the training loop. Says the signal's margin when known."""
    names = ("time_limit.save", "time_limit.should_save", "time_limit.should_continue")
    if patches.installed(names[0]) or not patches.ready(*names):
        return
    # the interval's rule, without the force
    upstream_should = patches.resolve(f"{patches.CHECKPOINTER}._should_save")
    wait = patches.STACK.wait_for_saving  # the checkpointer's wait for an async save
    started = time.time()  # stop marks made before this process are an earlier segment's
    if (line := signal_margin_line(env)) is not None:
        print(line, flush=True)

    def wrap_should(upstream: Callable[..., bool]) -> Callable[..., bool]:
        def _should_save(self: Any, curr_step: int, last_step: bool = False) -> bool:
            if getattr(self, "_ftslurm_force", False) and self.enable and not self.load_only:
                return True
            return upstream(self, curr_step, last_step)

        return _should_save

    def wrap_save(upstream_save: Callable[..., None]) -> Callable[..., None]:
        def save(self: Any, curr_step: int, last_step: bool = False) -> None:
            upstream_save(self, curr_step, last_step)
            if last_step or not flag.exists():
                return
            trainer = self.states.get("train_state") if hasattr(self, "states") else None
            if getattr(trainer, "_ftslurm_stop", False):
                return
            folder = Path(self.folder) if getattr(self, "folder", None) else None
            if curr_step < agree_stop_step(folder, curr_step, started):
                return  # a peer saw the signal a step later: stop after the next step together
            saved = "off"  # model checkpoints off: nothing to resume from but the data positions
            if getattr(self, "enable", False):
                if not upstream_should(self, curr_step, False):
                    self._ftslurm_force = True
                    try:
                        upstream_save(self, curr_step, False)
                    finally:
                        self._ftslurm_force = False
                getattr(self, wait)()  # the checkpoint is on disk before the process ends
                saver = getattr(self, "ft_manager", None)
                saved = "saved" if saver is None or saver.participating_rank() == 0 else "peer"
            elif getattr(self, "enable_ft_dataloader_checkpoints", False):
                getattr(self, wait)()
            print(logvocab.final_checkpoint_line(curr_step, saved), flush=True)
            try:  # the launcher requeues only a run that says it stopped early (job.py)
                stopped_early_note(flag).write_text(str(curr_step))
            except OSError:
                pass  # the launcher then ends the attempt as finished: the requeue is lost
            if trainer is not None:
                trainer._ftslurm_stop = True

        return save

    def wrap_continue(upstream_continue: Callable[..., bool]) -> Callable[..., bool]:
        def should_continue_training(self: Any) -> bool:
            return not getattr(self, "_ftslurm_stop", False) and upstream_continue(self)

        return should_continue_training

    for name, make in zip(names, (wrap_save, wrap_should, wrap_continue), strict=True):
        patches.install(name, make)
