"""Planted, stale or model-only folders in the checkpoint folder (replica/worker/ft_checkpoints.py)
must not make training lose its place: a bogus high `ft-replicat-<r>/step-<N>` must not make the
purge delete every real data position, a stale `stop-after-step-<N>` must not make a replica
ignore Slurm's time-limit signal, and a resume never loads a model-only checkpoint (torchtitan
0.2.2's save at the last step, `last_save_model_only`: no optimizer, no LR schedule).

The model checkpoints here are real DCP saves (torch.distributed.checkpoint in this process) of
the states torchtitan saves: the model's parameters, and for a full checkpoint also
`optimizer`, `lr_scheduler` and `train_state`; loading the model-only one as torchtitan does
to resume raises its own error (`Missing key in checkpoint state_dict: lr_scheduler...`).
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ftslurm.replica.worker import ft_checkpoints as ftc

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def _positions(folder: Path, *steps: int) -> None:
    """Per-step data positions as torchtitan writes them (`.metadata` + one shard)."""
    for n in steps:
        d = folder / f"step-{n}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"\0" * 64)
        (d / ".metadata").write_bytes(b"\0" * 16)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---- the purge of the per-step data positions -----------------------------------------------


def test_a_planted_high_step_does_not_make_the_purge_delete_every_real_position(
    tmp_path: Path,
) -> None:
    ft = tmp_path / "ft-replicat-0"
    _positions(ft, 8, 9, 10, 11, 99999999)
    assert ftc.purge(ft, writing=12) == [8, 9, 10]
    assert _names(ft) == ["step-11", "step-99999999"]  # the newest real one, and not ours to judge


def test_within_an_interval_ahead_the_model_checkpoints_position_is_kept(tmp_path: Path) -> None:
    """A lost lineage is at most a checkpoint interval ahead; a folder there counts, but the
    position of the newest model checkpoint (what a restart loads with fix 9) always stays."""
    ft, model = tmp_path / "ft-replicat-0", tmp_path
    _positions(ft, 8, 9, 10, 11, 15)
    (model / "step-10").mkdir()
    (model / "step-10" / ".metadata").write_bytes(b"x")
    assert ftc.purge(ft, writing=12, model_folder=model, ahead=5) == [8, 9, 11]
    assert ftc.purge(ft, writing=13, model_folder=model, ahead=1) == []  # 15: too far now
    assert "step-10" in _names(ft)


def test_links_and_absurd_steps_are_neither_counted_nor_deleted(tmp_path: Path) -> None:
    ft, elsewhere = tmp_path / "ft-replicat-0", tmp_path / "elsewhere"
    _positions(ft, 8, 9)
    _positions(elsewhere, 1)
    (ft / "step-50").symlink_to(elsewhere / "step-1")
    _positions(ft, int("9" * 200))  # no run trains 10**200 steps
    assert ftc.purge(ft, writing=10, ahead=100) == [8]
    assert (elsewhere / "step-1" / ".metadata").exists()
    assert sorted(ftc.scan(ft)) == [9]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_step_folder_is_neither_counted_nor_deleted(tmp_path: Path) -> None:
    ft = tmp_path / "ft-replicat-0"
    _positions(ft, 8, 9, 13)
    os.chown(ft / "step-13", 65534, 65534)
    assert ftc.purge(ft, writing=10, ahead=100) == [8]
    assert _names(ft) == ["step-13", "step-9"]


# ---- the agreed stop step at Slurm's time limit ---------------------------------------------


def test_a_stale_mark_far_ahead_does_not_hide_the_time_limit(tmp_path: Path) -> None:
    (tmp_path / "stop-after-step-1000000").touch()
    assert ftc.agree_stop_step(tmp_path, 50) == 51  # the first to see the signal marks 51
    assert ftc.agree_stop_step(tmp_path, 51) == 51  # its peer, a step later, stops with it
    assert (tmp_path / "stop-after-step-51").is_file()


def test_a_mark_of_an_earlier_time_limit_segment_is_not_this_ones(tmp_path: Path) -> None:
    old = tmp_path / "stop-after-step-52"  # the run's last segment, within two steps of 50
    old.touch()
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    started = time.time() - 60  # this process
    assert ftc.agree_stop_step(tmp_path, 50, started) == 51
    assert ftc.agree_stop_step(tmp_path, 50, started) == 51  # this segment's mark counts
    assert ftc.agree_stop_step(tmp_path, 51, started) == 51


def test_a_link_planted_at_the_marks_name_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("x")
    os.utime(target, (1_000_000, 1_000_000))
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "stop-after-step-6").symlink_to(target)
    assert ftc.agree_stop_step(folder, 5) == 5  # no mark can be made: stop now, not later
    assert target.stat().st_mtime == 1_000_000 and target.read_text() == "x"


# ---- the resume never loads a model-only checkpoint -----------------------------------------


def _save(folder: Path, step: int, full: bool) -> dict[str, Any]:
    """A DCP checkpoint at `folder/step-<step>`: the model alone, or torchtitan's full set."""
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(step)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    states: dict[str, Any] = dict(model.state_dict())
    if full:
        states.update(optimizer=opt.state_dict(), lr_scheduler=sched.state_dict(),
                      train_state={"step": step, "ntokens_seen": 8 * step})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group: saving in a single process"
        dcp.save(states, checkpoint_id=str(folder / f"step-{step}"))
    full_states = dict(model.state_dict())
    full_states.update(optimizer=opt.state_dict(), lr_scheduler=sched.state_dict(),
                       train_state={"step": 0, "ntokens_seen": 0})  # fmt: skip
    return full_states


def test_a_model_only_checkpoint_is_told_from_a_full_one(tmp_path: Path) -> None:
    _save(tmp_path, 80, full=True)
    _save(tmp_path, 90, full=False)
    assert not ftc.holds_model_only(tmp_path / "step-80")
    assert ftc.holds_model_only(tmp_path / "step-90")
    assert ftc.model_only_steps(tmp_path, ftc.scan(tmp_path)) == (90,)
    r = ftc.plan_resume(ftc.scan(tmp_path), {80: True, 90: True}, -1, (90,))
    assert (r.model_step, r.data_step, r.model_only) == (80, 80, (90,))
    assert ftc.finished_step(tmp_path, 90) == 90 and ftc.finished_step(tmp_path, 100) is None


class _Manager:
    """torchtitan 0.2.2's CheckpointManager where fix 9 wraps it: `load` picks the newest
    complete step unless told one, and loads every state a resume needs from it (a real DCP
    load, which fails on a model-only checkpoint as torchtitan's does)."""

    def __init__(self, folder: Path, states: dict[str, Any], steps: int) -> None:
        self.folder = str(folder)
        self.enable = self.enable_ft_dataloader_checkpoints = True
        self.ft_replica_id = 0
        self.trainer = SimpleNamespace(step=0, job_config=SimpleNamespace(
            training=SimpleNamespace(steps=steps)))  # fmt: skip
        self.states = {"train_state": self.trainer}
        self.ft_manager = SimpleNamespace(_load_state_dict_fns={})
        self.to_load, self.loaded = states, []

    def _ft_folder(self) -> str:
        return os.path.join(self.folder, "ft-replicat-0")

    def load(self, step: int = -1) -> bool:
        import torch.distributed.checkpoint as dcp

        self._ft_load()
        if step == -1:
            step = max(ftc.scan(Path(self.folder)), default=-1)
        if step == -1:
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(self.to_load, checkpoint_id=os.path.join(self.folder, f"step-{step}"))
        self.loaded.append(step)
        return True

    def _ft_load(self) -> None:
        pass

    def _ft_save(self, step: int) -> None:
        pass


@pytest.fixture
def manager_class(monkeypatch: pytest.MonkeyPatch) -> type[_Manager]:
    """`_Manager` in torchtitan's place, fix 9 installed on it (and undone after)."""
    import torchtitan.components.checkpoint as tt_checkpoint

    cls = type("Manager", (_Manager,), {})
    monkeypatch.setattr(tt_checkpoint, "CheckpointManager", cls)
    monkeypatch.setattr(ftc, "KEEP_MODEL_STEPS", False)
    ftc.install_resume()
    return cls


def test_a_resume_passes_over_a_model_only_checkpoint(tmp_path, manager_class, capsys) -> None:
    """The run's steps were raised after it finished: it goes on from the last full one."""
    _save(tmp_path, 80, full=True)
    states = _save(tmp_path, 90, full=False)
    m = manager_class(tmp_path, states, steps=200)
    assert m.load() is True and m.loaded == [80]
    out = capsys.readouterr().out
    assert f"skipping model-only checkpoint {tmp_path / 'step-90'}" in out
    assert "resuming from step 80" in out


def test_a_replica_started_after_the_last_step_says_training_is_finished(
    tmp_path, manager_class, capsys
) -> None:
    _save(tmp_path, 80, full=True)
    states = _save(tmp_path, 90, full=False)
    m = manager_class(tmp_path, states, steps=90)
    assert m.load() is False and m.loaded == []
    assert m.trainer.step == 90  # the trainer's loop ends before a step
    lines = [x for x in capsys.readouterr().out.splitlines() if "finished" in x]
    assert lines == [f"[ftslurm] training already finished: {tmp_path / 'step-90'} is the last "
                     "step's checkpoint (step 90 of --training.steps=90); nothing to resume or "
                     "train"]  # fmt: skip
