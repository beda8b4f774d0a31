"""Fix 9 (fixes.py, ft_checkpoints.py): which data position a restart loads, what a heal changes,
which FT dataloader checkpoints stay, and the log lines that say so. The real training tests
(test_checkpoint_training.py) check the same on real saves and a real whole-array restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.replica.worker.ft_checkpoints import heal_data_step, plan_resume, purge, stale_steps

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_a_restart_reads_the_data_position_of_the_model_checkpoint_not_the_newest() -> None:
    # model checkpoints every 5 steps; the replica's per-step positions went on to step 13
    r = plan_resume({5: True, 10: True}, {10: True, 12: True, 13: True})
    assert (r.model_step, r.data_step, r.newest_data) == (10, 10, 13)
    assert r.half_written == () and r.note == ""


def test_a_half_written_model_checkpoint_is_skipped_and_named() -> None:
    r = plan_resume({5: True, 10: True, 15: False}, {10: True, 15: True})
    assert (r.model_step, r.data_step, r.half_written) == (10, 10, (15,))
    line = logvocab.half_written_line(Path("/ckpt/step-15"))
    assert "skipping half-written checkpoint /ckpt/step-15" in line


def test_no_model_checkpoint_starts_the_data_over_with_the_model() -> None:
    r = plan_resume({}, {3: True, 4: True})
    assert (r.model_step, r.data_step, r.newest_data) == (-1, None, 4)
    assert plan_resume({0: True}, {3: True}).data_step is None  # a seed checkpoint: model only


def test_a_missing_position_at_the_model_step_falls_back_to_an_older_one_and_says_so() -> None:
    r = plan_resume({10: True}, {9: True, 10: False, 11: True})
    assert r.data_step == 9 and "repeated" in r.note
    assert plan_resume({10: True}, {11: True}).data_step is None


def test_an_explicit_load_step_is_followed() -> None:
    assert plan_resume({5: True, 10: True}, {5: True, 10: True}, load_step=5).data_step == 5


def test_a_heal_from_a_peer_that_went_on_takes_the_newest_position() -> None:
    r = plan_resume({10: True}, {10: True, 13: True})
    assert heal_data_step(r, 25) == 13  # a replica failure: its steps to 13 were committed
    assert heal_data_step(r, 13) == 13
    # a late replica of a whole-array restart: its peers restarted from step 10 too
    assert heal_data_step(r, 11) is None
    assert heal_data_step(plan_resume({10: True}, {10: True}), 30) is None


def test_retention_keeps_the_positions_of_the_model_checkpoints() -> None:
    data = {5: True, 6: True, 9: True, 10: True, 11: True, 12: False}
    assert stale_steps(data, writing=12) == [5, 6, 9, 10]  # fix 5 alone
    assert stale_steps(data, writing=12, keep={5, 10}) == [6, 9]


def test_purge_reads_the_model_folder(tmp_path: Path) -> None:
    ft, model = tmp_path / "ft-replicat-0", tmp_path
    for step in (4, 5, 6, 7):
        (ft / f"step-{step}").mkdir(parents=True)
        (ft / f"step-{step}" / ".metadata").write_bytes(b"x")
    (model / "step-4").mkdir()  # complete or being written: both kept
    assert purge(ft, writing=8, model_folder=model) == [5, 6]
    assert sorted(p.name for p in ft.iterdir()) == ["step-4", "step-7"]


def test_lines_round_trip() -> None:
    line = logvocab.resume_line(1, 20, 20)
    assert logvocab.parse_resume(line.encode()) == (1, 20, 20)
    assert logvocab.parse_resume(logvocab.resume_line(0, -1, None).encode()) == (0, -1, None)
    pos = logvocab.data_position_line(1, 7, 1234)
    assert logvocab.parse_data_position(("[titan] x " + pos).encode()) == (1, 7, 1234)
    assert logvocab.parse_data_position(logvocab.data_position_line(1, 7, None).encode()) == (
        1, 7, None)


def test_replicas_that_see_the_time_limit_a_step_apart_stop_after_the_same_step(
    tmp_path: Path,
) -> None:
    from ftslurm.replica.worker.ft_checkpoints import agree_stop_step

    assert agree_stop_step(tmp_path, 5) == 6  # the first to see it: one more step, marked
    assert agree_stop_step(tmp_path, 5) == 6  # its peer, the same step
    assert agree_stop_step(tmp_path, 6) == 6  # a peer that saw it a step later: now
    assert agree_stop_step(tmp_path, 9) == 10  # a later time limit: old marks are behind it
    assert agree_stop_step(None, 4) == 4
