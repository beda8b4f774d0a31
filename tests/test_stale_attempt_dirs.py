"""Attempt folders left by launchers that are gone, with the attempt guard off (the launcher's
fallback): SIGKILL (node down) skips the TemporaryDirectory cleanup, so the next launcher on
the node removes the folder of a dead launcher of this host, never a live one's, another
host's, or one whose owner is unknown. Real launchers (`python -m ftslurm.replica job`) with a
stand-in torchrun."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ftslurm import procs
from tests.replica_launcher import launcher

pytestmark = pytest.mark.unit


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _launcher(tmp_path: Path, torchrun: str) -> subprocess.Popen:
    """The launcher with the attempt guard off: its fallback alone removes dead folders."""
    return launcher(tmp_path, torchrun, FTSLURM_ATTEMPT_GUARD="0")


def _attempt_dirs(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "tmp").glob("ftslurm-attempt-*")}


def _started(tmp_path: Path, torchrun: str, before: set[str]) -> tuple[subprocess.Popen, str]:
    from ftslurm.wait import wait_for

    p = _launcher(tmp_path, torchrun)
    wait_for(lambda: _attempt_dirs(tmp_path) - before, timeout=30, what="the attempt folder")
    (new,) = _attempt_dirs(tmp_path) - before
    return p, new


@pytest.mark.process
def test_a_killed_attempts_folder_is_removed_by_the_next_attempt(tmp_path: Path):
    """SIGKILL (node down) skips the TemporaryDirectory cleanup: the next launcher on the
    node removes the folder of an attempt whose launcher is gone, never a live one's."""
    slow = tmp_path / "slow-torchrun"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    killed, killed_dir = _started(tmp_path, str(slow), set())
    live, live_dir = _started(tmp_path, str(slow), {killed_dir})
    try:
        procs.kill_pids(procs.process_tree(killed.pid))
        killed.wait(timeout=10)
        assert _attempt_dirs(tmp_path) == {killed_dir, live_dir}
        nxt = _launcher(tmp_path, "true")
        assert nxt.wait(timeout=60) == 0
        assert _attempt_dirs(tmp_path) == {live_dir}
    finally:
        for p in (killed, live):
            procs.kill_pids(procs.process_tree(p.pid))
            p.wait(timeout=10)


@pytest.mark.process
def test_only_this_hosts_attempt_folders_of_dead_launchers_are_removed(tmp_path: Path):
    """A TMPDIR may be shared between nodes (a pid of another node means nothing here); a
    folder from before the launcher named its owner is kept (its owner is unknown)."""
    from ftslurm.replica.launcher import job

    dead = _dead_pid()
    stale = job.attempt_dir_prefix("worker-0", dead) + "12345678"
    kept = [job.attempt_dir_prefix("worker-0", os.getpid()) + "abc_9",
            job.attempt_dir_prefix("worker-1", dead) + "abc",
            job.attempt_dir_prefix("worker-0", 99999999999) + "abc",
            "ftslurm-attempt-6i5396be"]  # fmt: skip
    for name in [stale, *kept]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config-error").write_text("{}")
    a_file = job.attempt_dir_prefix("worker-0", dead) + "file"
    (tmp_path / a_file).write_text("not ours to remove")
    assert job.remove_stale_attempt_dirs(tmp_path, "worker-0") == [tmp_path / stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, a_file])
