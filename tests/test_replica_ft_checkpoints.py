"""Fix 5 (fixes.py, ft_checkpoints.py): which per-step FT dataloader checkpoints are deleted.

The folders here have the shape torchtitan 0.2.2 writes (`step-<N>/.metadata` and
`step-<N>/__0_0.distcp`, seen in a demo run's `checkpoint/ft-replicat-1`); the real training
tests in test_replica_training.py check the fix on real saves and a real restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftslurm.replica.worker.ft_checkpoints import Purger, purge, stale_steps
from ftslurm.wait import wait_for

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_steady_state_keeps_the_last_complete_step_and_the_one_being_written() -> None:
    assert stale_steps({7: True, 8: True, 9: False}, writing=9) == [7]
    assert stale_steps({1: True, 2: True, 3: True, 4: True, 5: False}, writing=5) == [1, 2, 3]


def test_a_save_cut_short_by_a_kill_goes_only_once_a_newer_one_is_complete() -> None:
    # attempt 0 was killed while writing step 30; attempt 1 healed and now writes step 41
    assert stale_steps({29: True, 30: False, 41: False}, writing=41) == []
    assert stale_steps({29: True, 30: False, 41: True, 42: False}, writing=42) == [29, 30]


def test_nothing_goes_while_nothing_else_is_complete() -> None:
    assert stale_steps({}, writing=1) == []
    assert stale_steps({1: False}, writing=1) == []
    assert stale_steps({1: True}, writing=1) == []  # the step being written is never judged


def test_a_step_below_older_folders_keeps_the_newest_complete_one() -> None:
    # a run restarted from an older model checkpoint writes step 501 below 530: the newest
    # complete folder (what torchtitan loads at a restart) and the one being written stay
    assert stale_steps({529: True, 530: True, 501: False}, writing=501) == [529]
    assert stale_steps({530: True, 502: False, 501: True}, writing=502) == [501]


def _step(folder: Path, n: int, complete: bool = True) -> None:
    d = folder / f"step-{n}"
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"\0" * 64)
    if complete:
        (d / ".metadata").write_bytes(b"\0" * 16)


def test_purge_deletes_the_stale_folders_and_nothing_else(tmp_path: Path) -> None:
    folder = tmp_path / "ft-replicat-1"
    for n in (1, 2, 3):
        _step(folder, n)
    _step(folder, 4, complete=False)
    (folder / "step-notes").mkdir()  # not torchtitan's: left alone
    (folder / "step-2.txt").write_text("x")
    assert purge(folder, writing=4) == [1, 2]
    assert sorted(p.name for p in folder.iterdir()) == ["step-2.txt", "step-3", "step-4",
                                                        "step-notes"]  # fmt: skip
    assert purge(tmp_path / "missing", writing=4) == []


def test_purger_deletes_in_the_background_and_survives_a_failure(tmp_path: Path,
                                                                  capsys) -> None:  # fmt: skip
    folder = tmp_path / "ft-replicat-0"
    for n in range(1, 6):
        _step(folder, n)
    purger = Purger()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder is expected")
    purger.request(blocked, 3)  # listdir -> NotADirectoryError: reported, thread lives on
    purger.request(folder, 5)
    wait_for(lambda: sorted(p.name for p in folder.iterdir()) == ["step-4", "step-5"],
             timeout=10, what="the purge thread to delete steps 1-3")  # fmt: skip
    assert purger.failed and "Not a directory" in purger.failed
    assert "could not delete old FT dataloader checkpoints" in capsys.readouterr().out


def test_fix_5_is_listed_with_its_switch() -> None:
    from ftslurm.replica.worker import fixes

    lines = fixes.apply({name: "0" for name in fixes.SWITCHES.values()})
    off = "[ftslurm] fix ft_checkpoint_retention: OFF (FTSLURM_FIX_FT_CHECKPOINT_RETENTION=0)"
    assert off in lines
