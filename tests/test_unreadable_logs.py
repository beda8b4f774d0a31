"""Replica logs that cannot be read (a folder named like a log, a dangling link): `logs` names
each one on stderr, shows the others and exits 1; a follower says once which log it cannot
read."""

from __future__ import annotations

import pytest

from ftslurm import logtail
from ftslurm.run import model as runs
from tests.clirun import invoke
from tests.log_inputs import STEP_LINE, run_dir

# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def test_logs_names_each_log_it_cannot_read_and_exits_1(tmp_path):
    run = run_dir(tmp_path, {0: (STEP_LINE.format(i=1) + "\n").encode()})
    (run / "tft-7_1.out").mkdir()  # a folder named like a log
    (run / "tft-7_2.out").symlink_to(tmp_path / "gone")  # a dangling link
    r = invoke("logs", "--run-dir", str(run), "-n", "3")
    assert r.exit_code == 1, r.output
    assert r.stdout == f"[r0] {STEP_LINE.format(i=1)}\n"  # the others are still shown
    assert r.stderr.splitlines() == [
        f"Error: cannot read the log of replica 1, {run / 'tft-7_1.out'} (Is a directory)",
        f"Error: cannot read the log of replica 2, {run / 'tft-7_2.out'} "
        "(No such file or directory)",
    ]
    only0 = invoke("logs", "--run-dir", str(run), "--replica", "0")
    assert only0.exit_code == 0 and only0.stderr == ""


def test_following_says_once_which_log_it_cannot_read(tmp_path):
    run = run_dir(tmp_path, {0: (STEP_LINE.format(i=1) + "\n").encode()})
    failed: list[str] = []
    f = logtail.Follower(lambda: runs.replica_logs(run),
                         on_error=lambda label, path, e: failed.append(label))  # fmt: skip
    assert len(f.start(5)) == 1
    (run / "tft-7_1.out").mkdir()  # appears later, unreadable
    for _ in range(3):
        assert f.poll() == []
    assert failed == ["r1"]
