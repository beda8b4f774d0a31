"""A whole-array restart where one replica comes back late: the first back trains on from the
model checkpoint (and marks it), the late one heals from it. Its data positions after the
checkpoint belong to the lost lineage and are read again, however far the peer got; after a
replica failure (no mark newer than its positions) it goes on from its newest, as before.

The local Slurm run that showed it: a late replica healed after step 14 took data position
step-13 (its newest from before the outage), skipping step 13's batch, which no lineage that
survived had trained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ftslurm.replica.worker.ft_checkpoints import (
    heal_data_step,
    mark_trained_on,
    peer_restarted_since,
    plan_resume,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _position(ft: Path, step: int, mtime: float) -> Path:
    folder = ft / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"x")
    os.utime(folder / ".metadata", (mtime, mtime))
    return folder


def test_a_late_replica_of_a_whole_array_restart_reads_its_lost_steps_again() -> None:
    r = plan_resume({12: True}, {12: True, 13: True})
    # the peer resumed from step 12 as well and trained to 14 before this one came back
    assert heal_data_step(r, 14) == 13  # without the mark: taken for a replica failure
    assert heal_data_step(r, 14, peer_restarted=True) is None  # stays at step 12


def test_the_mark_counts_only_when_newer_than_the_replicas_newest_position(tmp_path: Path):
    model, ft = tmp_path, tmp_path / "ft-replicat-0"
    newest = _position(ft, 13, mtime=1_000)
    assert not peer_restarted_since(model, 12, newest)  # no mark: a replica failure
    mark_trained_on(model, 12)
    os.utime(model / "trained-on-from-step-12", (2_000, 2_000))
    assert peer_restarted_since(model, 12, newest)  # the group restarted after it saved
    os.utime(model / "trained-on-from-step-12", (500, 500))
    assert not peer_restarted_since(model, 12, newest)  # an earlier restart's mark
    assert not peer_restarted_since(model, 24, newest)  # another checkpoint's
    mark_trained_on(tmp_path / "missing" / "folder", 12)  # cannot write: no error
