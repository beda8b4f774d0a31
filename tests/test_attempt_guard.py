"""The attempt guard (replica/launcher/attempt_guard.py) removes an attempt's temporary folder
when its launcher is gone: at once after a SIGKILL of the launcher's process tree (the local
demo's failures and teardown), and a finished attempt leaves neither folder nor guard; it
removes only an attempt folder of this user, never a link or another folder. Real launchers
(`python -m ftslurm.replica job`) with a stand-in torchrun."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ftslurm import procs
from ftslurm.wait import wait_for
from tests.clirun import executable
from tests.replica_launcher import launcher as _launcher

pytestmark = pytest.mark.timeout(60)


def _attempt_dirs(tmp: Path) -> set[str]:
    return {p.name for p in tmp.glob("ftslurm-attempt-*")}


def test_a_sigkilled_attempts_folder_is_removed_at_once(tmp_path: Path) -> None:
    """The local demo SIGKILLs its launchers' process trees (a failure, its teardown): each
    left its attempt folder behind until a later attempt started on the host."""
    slow = executable(tmp_path / "slow-torchrun", "#!/bin/sh\nexec sleep 60\n")
    p = _launcher(tmp_path, str(slow))
    try:
        wait_for(lambda: _attempt_dirs(tmp_path / "tmp"), timeout=30, what="the attempt folder")
        # torchrun itself, not the guard's first process (also a child of the launcher while
        # it starts): a kill before the guard forked away would leave nothing to remove it
        wait_for(lambda: any(procs.cmdline(c)[:1] == ["sleep"] for c in procs.descendants([p.pid])),
                 timeout=30, what="torchrun")  # fmt: skip
        procs.kill_pids(procs.process_tree(p.pid), signal.SIGKILL)
        p.wait(timeout=10)
        wait_for(lambda: not _attempt_dirs(tmp_path / "tmp"), timeout=10,
                 what="the killed attempt's folder to go")  # fmt: skip
    finally:
        procs.kill_pids(procs.process_tree(p.pid))
        p.wait(timeout=10)


def test_a_finished_attempt_leaves_no_folder_and_no_guard(tmp_path: Path) -> None:
    p = _launcher(tmp_path, "true")
    assert p.wait(timeout=60) == 0
    assert _attempt_dirs(tmp_path / "tmp") == set()
    wait_for(lambda: not [q for q in procs.pids_with_env(f"TMPDIR={tmp_path / 'tmp'}")
                          if "attempt_guard" in procs.proc_cmdline(q)],
             timeout=10, what="the guard to exit")  # fmt: skip


def test_the_guard_removes_only_an_attempt_folder_of_this_user(tmp_path: Path) -> None:
    from ftslurm.replica.launcher import attempt_guard

    other = tmp_path / "not-an-attempt"
    other.mkdir()
    assert attempt_guard.remove(other) is False and other.exists()
    link = tmp_path / "ftslurm-attempt-link"
    link.symlink_to(other)
    assert attempt_guard.remove(link) is False and other.exists()
    mine = tmp_path / "ftslurm-attempt-h-1-x"
    (mine / "sub").mkdir(parents=True)
    assert attempt_guard.remove(mine) is True and not mine.exists()
