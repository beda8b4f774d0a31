"""Attempt folders left by launchers that are gone, with the attempt guard off (the launcher's
fallback): SIGKILL (node down) skips the TemporaryDirectory cleanup, so the next launcher on
the node removes the folder of a dead launcher of this host, never a live one's, another
host's, or one whose owner is unknown. Real launchers (`python -m ftslurm.replica job`) with a
stand-in torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import procs

pytestmark = pytest.mark.unit


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _launcher(tmp_path: Path, torchrun: str) -> subprocess.Popen:
    """`python -m ftslurm.replica job` (what the sbatch script execs) with `torchrun` standing
    in for torchrun, its temporary folders under tmp_path/tmp."""
    from tests.ftjob import KNOB_ENV_RE

    tok = tmp_path / "tok"
    tok.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tok / name).write_text("{}")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    env.update(FTSLURM_PROJECT=str(tmp_path), FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
               FTSLURM_TORCHRUN=torchrun, FTSLURM_EXTRA_ARGS=f"--model.hf_assets_path={tok}",
               TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(Path(__file__).parents[1]),
               FTSLURM_ATTEMPT_GUARD="0", FTSLURM_PREFLIGHT="0")  # the fallback alone  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "ftslurm.replica", "job"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


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
    from ftslurm.replica import job

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
