"""A lighthouse.json that names another process (edited by hand, or its pid reused) never has it
stopped: `stop`, `status` and `restart` leave it alone and drop the stale state; a forged state
naming the dead leader of another program's session does not end its members (only processes
that carry the tag of a start of this state dir are); the identity, the launcher's path in the
command line, does not depend on how the state dir was named. Real `ftslurm` CLI and real
processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ftslurm import procs, runner
from ftslurm.wait import wait_for
from tests.clirun import ftslurm, lighthouse_cli
from tests.lighthouse_state import kill, needs_any_torchft
from tests.lighthouse_state import state_dir as state_dir  # the fixture

pytestmark = pytest.mark.timeout(90)


def _state_naming(pid: int, **fields) -> str:
    st = procs.proc_stat(pid)
    return json.dumps({
        "name": "lighthouse", "pid": pid, "start_ticks": st.start_ticks if st else None,
        "started_at": time.time(), "cmd": procs.cmdline(pid), "marker": "sleep",
        "log_path": None, "extra": {"port": 1}, **fields,
    })  # fmt: skip


@pytest.mark.parametrize("command", ["stop", "status", "restart"])
def test_a_state_file_naming_another_process_never_stops_it(state_dir: Path, command: str):
    """Finding 5: a hand-edited lighthouse.json naming another process (its real start time,
    and a marker it matches) made `lighthouse stop` kill it."""
    sleeper = runner.spawn(["sleep", "60"])
    try:
        state_dir.mkdir()
        (state_dir / "lighthouse.json").write_text(_state_naming(sleeper.pid))
        (state_dir / "lighthouse.pid").write_text(f"{sleeper.pid}\n")
        r = lighthouse_cli(state_dir, command,
                           *(["--bind", "127.0.0.1:0"] if command == "restart" else []))
        time.sleep(0.2)
        assert sleeper.poll() is None, (command, r.stderr)
        assert "Traceback" not in r.stderr
        if command == "stop":
            assert r.returncode == 0 and r.stderr.splitlines() == [
                "Lighthouse not running: its state file names a process that is not this state "
                "dir's Lighthouse (pid reused, or the file edited); left that process alone and "
                "removed the stale state."
            ]
        if command == "status":
            assert r.returncode == 3 and "not running" in r.stdout
        assert not (state_dir / "lighthouse.pid").exists() or command == "restart"
    finally:
        sleeper.kill()
        sleeper.wait(10)


def test_a_forged_state_cannot_name_a_dead_leaders_session(state_dir: Path, tmp_path: Path):
    """Finding 5 (guard): a state naming the dead leader of another program's session (its
    members alive) does not have them ended: only processes carrying the tag of a start of
    this state dir are, and a forged file cannot know that tag."""
    pids = tmp_path / "child.pid"
    leader = runner.spawn(["bash", "-c", f"sleep 60 & echo $! >{pids}; exit 0"], detach=True)
    leader.wait(10)
    wait_for(pids.exists, timeout=10, what="child pid")
    child = int(pids.read_text())
    try:
        state_dir.mkdir()
        (state_dir / "lighthouse.json").write_text(json.dumps({
            "name": "lighthouse", "pid": leader.pid, "start_ticks": 1, "started_at": time.time(),
            "cmd": [], "marker": "", "extra": {}, "tag": "guess",
        }))  # fmt: skip
        r = lighthouse_cli(state_dir, "stop")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert procs.pid_alive(child) and os.getsid(child) == leader.pid
    finally:
        kill([child])


@needs_any_torchft
def test_the_identity_does_not_depend_on_how_the_state_dir_is_named(state_dir: Path):
    """Finding 5 (guard): the identity is the launcher's path in the command line, so a
    Lighthouse started with a relative --state-dir is stopped with an absolute one."""
    state_dir.mkdir()
    r = ftslurm("lighthouse", "start", "--bind", "127.0.0.1:0", "--state-dir", "lighthouse",
                cwd=state_dir.parent)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = ftslurm("lighthouse", "stop", "--state-dir", str(state_dir))
    assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")
