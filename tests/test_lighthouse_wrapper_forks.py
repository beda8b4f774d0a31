"""A `lighthouse start --binary` wrapper that forks (a server, or the real Lighthouse): a start
that never gets ready ends what the wrapper forked, `stop` ends the Lighthouse a wrapper left
behind, and when a process outside the Lighthouse's tree still holds the port, both say which
instead of claiming a clean stop. Real `ftslurm` CLI and real processes.

Why: the README runs some commands with sudo; a wrapper's children must not keep the port
while ftslurm says the Lighthouse stopped."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from ftslurm import procs, runner
from ftslurm.lighthouse import launcher, ports
from ftslurm.wait import free_port, wait_for
from tests.clirun import executable, lighthouse_cli, one_error_line
from tests.lighthouse_state import kill, needs_any_torchft
from tests.lighthouse_state import state_dir as state_dir  # the fixture

pytestmark = pytest.mark.timeout(90)


def wrapper(tmp_path: Path, body: str) -> Path:
    """A user's --binary: a bash script (`$@` are the Lighthouse's arguments)."""
    return executable(tmp_path / "bin" / "site_lighthouse", "#!/bin/bash\n" + textwrap.dedent(body))


# a program that listens on the port but never answers /status (never "ready")
HTTP = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1"


@pytest.mark.parametrize(
    "fork",
    [
        "{http} >/dev/null 2>&1 & echo $! >{pids}; sleep 60",  # keeps running
        "{http} >/dev/null 2>&1 & echo $! >{pids}; sleep 0.2",  # exits, leaving the child
        "setsid {http} >/dev/null 2>&1 & echo $! >{pids}; sleep 60",  # child left the session
    ],
    ids=["wrapper-keeps-running", "wrapper-exits", "child-setsid"],
)
def test_a_failed_start_ends_what_a_wrapper_forked(tmp_path: Path, state_dir: Path, fork: str):
    """Finding 3: `start --binary <wrapper that forks a server>` that never gets ready said
    it stopped the Lighthouse while the wrapper's child kept the port."""
    port, pids = free_port(), tmp_path / "child.pid"
    w = wrapper(tmp_path, fork.format(http=HTTP.format(port=port), pids=pids))
    try:
        r = lighthouse_cli(state_dir, "start", "--binary", str(w), "--ready-timeout", "2",
                           "--bind", f"127.0.0.1:{port}")  # fmt: skip
        line = one_error_line(r)
        assert "still held" not in line, line
        assert ports.port_owner(port) == [], ports.port_owner(port)
        child = int(pids.read_text())
        assert not procs.pid_alive(child)
        assert not state_dir.joinpath("lighthouse.json").exists()
    finally:
        kill([int(pids.read_text())] if pids.exists() else [])


def outsider(tmp_path: Path, command: str) -> tuple[Path, Path]:
    """A process outside every tree of the Lighthouse (the test's own child) that runs
    `command` (`{args}`: the arguments written to the returned file) once that file exists:
    what a wrapper asks another service to start cannot be found from the daemon (a child
    that left the session and cleared its environment still can: the process tree).
    Returns (the arguments file a --binary writes, the outsider's pid file)."""
    args, pids = tmp_path / "args", tmp_path / "child.pid"
    runner.spawn(["bash", "-c", f"echo $$ >{pids}; until [ -e {args} ]; do sleep 0.02; done; "
                  "exec " + command.format(args=f"$(cat {args})")], detach=True)  # fmt: skip
    wait_for(pids.exists, timeout=10, what="the outsider's pid file")
    return args, pids


def test_a_failed_start_says_which_process_still_holds_the_port(tmp_path: Path, state_dir: Path):
    """Finding 3: a process the wrapper had started elsewhere (outside its tree) cannot be
    found from the daemon: the error says the port is still held, and by whom, instead of
    claiming the Lighthouse was stopped cleanly."""
    port = free_port()
    args, pids = outsider(tmp_path, HTTP.format(port=port) + " >/dev/null 2>&1")
    w = wrapper(tmp_path, f'echo "$@" >{args}.tmp; mv {args}.tmp {args}; sleep 60')
    try:
        r = lighthouse_cli(state_dir, "start", "--binary", str(w), "--ready-timeout", "2",
                           "--bind", f"127.0.0.1:{port}")  # fmt: skip
        line = one_error_line(r)
        child = int(pids.read_text())
        assert f"port {port} is still held by pid {child} (" in line, line
    finally:
        kill([int(pids.read_text())] if pids.exists() else [])


@needs_any_torchft
@pytest.mark.parametrize("how", ["wrapper-exits", "daemon-killed"])
def test_stop_ends_the_lighthouse_a_wrapper_left_behind(tmp_path: Path, state_dir: Path, how):
    """Finding 3: a wrapper that forks the real Lighthouse and exits (or the daemon killed
    with SIGKILL): `stop` could not see the Lighthouse (it said "not running"), which kept
    the port."""
    port, pids = free_port(), tmp_path / "child.pid"
    real = Path(launcher.__file__)  # torchft's Lighthouse, loaded directly
    w = wrapper(tmp_path, f'{sys.executable} {real} "$@" & echo $! >{pids}; sleep 2')
    try:
        r = lighthouse_cli(state_dir, "start", "--binary", str(w), "--bind", f"127.0.0.1:{port}")
        assert r.returncode == 0, r.stderr
        child = int(pids.read_text())
        if how == "daemon-killed":
            os.kill(json.loads((state_dir / "lighthouse.json").read_text())["pid"], 9)
        wait_for(lambda: not any(str(w) in procs.proc_cmdline(int(p.name))
                                 for p in Path("/proc").iterdir() if p.name.isdigit()),
                 timeout=20, what="the wrapper's exit")  # fmt: skip
        assert procs.pid_alive(child) and ports.port_owner(port)  # the Lighthouse, on its own
        r = lighthouse_cli(state_dir, "stop")
        assert r.returncode == 0 and r.stderr.splitlines() == [{
            "wrapper-exits": "Lighthouse stopped.",
            "daemon-killed": "Lighthouse not running, but processes it had started still "
                             "were: stopped them (and removed the stale pidfile).",
        }[how]], r.stderr  # fmt: skip
        assert not procs.pid_alive(child) and ports.port_owner(port) == []
    finally:
        kill([int(pids.read_text())] if pids.exists() else [])


@needs_any_torchft
def test_stop_says_when_the_port_is_still_held(tmp_path: Path, state_dir: Path):
    """Finding 3: `stop` says so, and exits 2, when after ending every process of the
    Lighthouse its port is still held (by a Lighthouse the wrapper had started elsewhere,
    outside its tree), instead of "Lighthouse stopped."."""
    port = free_port()
    args, pids = outsider(tmp_path, f"{sys.executable} {Path(launcher.__file__)} {{args}}")
    w = wrapper(tmp_path, f'echo "$@" >{args}.tmp; mv {args}.tmp {args}; sleep 60')
    try:
        r = lighthouse_cli(state_dir, "start", "--binary", str(w), "--bind", f"127.0.0.1:{port}")
        assert r.returncode == 0, r.stderr
        pid = json.loads((state_dir / "lighthouse.json").read_text())["pid"]
        line = one_error_line(lighthouse_cli(state_dir, "stop"))
        child = int(pids.read_text())
        assert line.startswith(f"Error: stopped the Lighthouse (pid {pid}), but port {port} is "
                               f"still held by pid {child} ("), line  # fmt: skip
    finally:
        kill([int(pids.read_text())] if pids.exists() else [])
