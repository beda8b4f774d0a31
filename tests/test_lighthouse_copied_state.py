"""Commands on a copy of a live Lighthouse's state dir (`cp -a`: a backup, an rsync of outputs/)
end only processes of their own state dir: a status on the copy never stops the original's
Lighthouse, nor do stop, start or restart on it; a status of a Lighthouse whose launcher died
names what it left running and signals nothing. Through the real `ftslurm` CLI and the real
Lighthouse (torchft-nightly, port 0), then ftslurm.daemon's tags and read-only lookup directly.

Why: a copy of `outputs/` followed by a status on the copy stopped the quorums of a running
job."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm import procs
from ftslurm.lighthouse import launcher
from ftslurm.wait import wait_for
from tests.clirun import executable, stop_lighthouse
from tests.lighthouse_state import cli, needs_torchft, on_port
from tests.lighthouse_state import original as original  # the fixture

pytestmark = pytest.mark.timeout(120)


def answers(state_dir: Path) -> bool:
    return lh.answers(f"http://127.0.0.1:{on_port(state_dir)}/status")


def copy_of(original: Path) -> Path:
    """`cp -a lhA lhB`: a backup, an rsync of outputs/."""
    copy = original.with_name("lhB")
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    return copy


# what `ftslurm status` asks of the Lighthouse (the rest of it needs a Slurm cluster)
FTSLURM_STATUS = ["-c", "from ftslurm.status import lighthouse_quorum; print(lighthouse_quorum())"]


@needs_torchft
@pytest.mark.parametrize("command", [
    ["lighthouse", "status"], ["lighthouse", "status", "--json"], FTSLURM_STATUS,
    ["metrics", "show"],
])  # fmt: skip
def test_a_status_of_a_copied_state_dir_never_stops_the_lighthouse(original: Path, command):
    """Finding 1: `lighthouse status`, `ftslurm status` and `metrics show` on a copy of a
    live Lighthouse's state dir killed the original's Lighthouse (the stale-state cleanup
    signalled every process with the tag the copy holds) and said "pid N is gone or reused",
    which was false."""
    copy = copy_of(original)
    pid = json.loads((original / "lighthouse.json").read_text())["pid"]
    if command is FTSLURM_STATUS:
        r = subprocess.run([sys.executable, *command], capture_output=True, text=True,
                           env={**os.environ, "FTSLURM_LIGHTHOUSE_DIR": str(copy)},
                           timeout=60)  # fmt: skip
        assert "Quorum(running=False" in r.stdout, (r.stdout, r.stderr)
    else:
        extra = ["--state-dir", str(copy)] if command[0] == "metrics" else []
        r = cli(copy, *command[1:], *extra, command=command[0])
    assert "Traceback" not in r.stderr, r.stderr
    time.sleep(0.3)  # a signal, had one been sent, has arrived
    assert procs.pid_alive(pid) and answers(original), (r.stdout, r.stderr)
    if command == ["lighthouse", "status"]:
        assert r.returncode == 3
        assert f"pid {pid} runs but is not this state dir's Lighthouse" in r.stdout, r.stdout
        assert "is gone" not in r.stdout
    assert lh.status(original).running


@needs_torchft
@pytest.mark.parametrize("command", ["stop", "start", "restart"])
def test_stop_and_start_on_a_copy_leave_the_original_running(original: Path, command: str):
    """Finding 1: what does end processes (stop, start's cleanup of a stale state) ends only
    processes of its own state dir: the tag a copy holds names the original's."""
    copy = copy_of(original)
    pid = json.loads((original / "lighthouse.json").read_text())["pid"]
    try:
        args = ["--bind", "127.0.0.1:0"] if command != "stop" else []
        r = cli(copy, command, *args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        time.sleep(0.3)
        assert procs.pid_alive(pid) and answers(original)
    finally:
        stop_lighthouse(copy)


@needs_torchft
def test_a_status_of_a_killed_lighthouse_says_gone_and_signals_nothing(tmp_path: Path):
    """Finding 1 (message): a status says "gone" only of a pid that is gone; with processes
    it started still running it names them and leaves them to `stop`, never signals them."""
    d, pids = tmp_path / "lh", tmp_path / "child.pid"
    w = executable(tmp_path / "bin" / "wrapper", f'#!/bin/bash\nsleep 300 & echo $! >{pids}\n'
                   f'exec {sys.executable} {launcher.__file__} "$@"\n')  # fmt: skip
    try:
        r = cli(d, "start", "--bind", "127.0.0.1:0", "--binary", str(w))
        assert r.returncode == 0, r.stderr
        leader = json.loads((d / "lighthouse.json").read_text())["pid"]
        child = int(pids.read_text())
        os.kill(leader, signal.SIGKILL)  # its Lighthouse dies with it; the sleep does not
        wait_for(lambda: not procs.pid_alive(leader), timeout=10, what="the launcher's death")
        r = cli(d, "status")
        assert r.returncode == 3 and f"pid(s) {child}" in r.stdout, r.stdout
        assert procs.pid_alive(child) and (d / "lighthouse.json").exists()  # left to stop
        r = cli(d, "stop")
        assert r.returncode == 0 and not procs.pid_alive(child), r.stderr
    finally:
        stop_lighthouse(d)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int(pids.read_text()), signal.SIGKILL)


def test_a_copied_tag_names_no_process(tmp_path: Path):
    """Finding 1 (unit): the tag of a state copied from another state dir names no process
    of it, whatever runs with that tag."""
    from ftslurm import daemon

    a = daemon.Daemon(tmp_path / "a", "x")
    b = daemon.Daemon(tmp_path / "b", "x", marker=str(tmp_path / "b"))  # as the Lighthouse's
    proc, state, _ = a.start(["sleep", "60"], marker="sleep")
    try:
        assert a._followers(state, False) == [] and state.tag.startswith(str(tmp_path / "a"))
        child = subprocess.Popen(["sleep", "60"], env={**os.environ, daemon.TAG_ENV: state.tag})
        try:
            assert a._followers(state, False) == [child.pid]
            assert b._followers(state, False) == []  # the copy's: none
            shutil.copytree(a.state_dir, b.state_dir)
            assert b.lookup().stale is not None and child.poll() is None and proc.poll() is None
        finally:
            child.kill()
            child.wait(10)
    finally:
        proc.kill()
        proc.wait(10)


def test_read_only_lookup_never_signals(tmp_path: Path):
    """Finding 1 (unit): `lookup(clean_stale=False)` and `forget_stale` report what a dead
    daemon left running, and neither signal it nor remove its state."""
    from ftslurm import daemon

    d = daemon.Daemon(tmp_path / "d", "x")
    proc, state, _ = d.start(["sh", "-c", "sleep 60 & wait"], marker="sleep")
    try:
        wait_for(lambda: d._followers(state, True), timeout=10, what="the child")
        (child,) = d._followers(state, True)
        proc.kill()
        proc.wait(10)
        for found in (d.lookup(clean_stale=False), d.forget_stale()):
            assert found.state is None and found.left == (child,) and not found.ended
        assert procs.pid_alive(child) and d.statefile.exists()
        assert d.stop()[0] == "leftovers" and not procs.pid_alive(child)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_status_just_before_a_foreground_exec_keeps_its_state(tmp_path: Path, monkeypatch):
    """Finding 1 (found on the way): `start --foreground` writes the state, then execs the
    Lighthouse; a status in between (this pid's command line still `ftslurm ...`) took the
    state for a stale one and removed it, leaving the Lighthouse unmanaged (`stop`: "not
    running"). The exec now happens under the state dir's lock."""
    d = tmp_path / "lh"
    seen: list[lh.LighthouseStatus] = []

    class Execd(Exception):
        pass

    def execve(*_args: object) -> None:  # the moment before the exec: a status comes in
        seen.append(lh.status(d, probe=False))
        raise Execd

    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(Execd):
        lh.exec_foreground(lh.LighthouseConfig(bind="127.0.0.1:0", state_dir=d))
    assert not seen[0].running  # not yet the Lighthouse
    assert (d / "lighthouse.json").exists() and (d / "lighthouse.pid").exists()
