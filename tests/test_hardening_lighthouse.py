"""Issue 30's findings in the managed Lighthouse and its state files (3, 4, 5, 11), through the
real `ftslurm` CLI and real processes: each test named for a finding failed before its fix.

Why these matter: the README runs some commands with sudo, and a state folder may be
writable by others, so neither a wrapper's children, nor a link or a pid planted in a state
file, may turn a command against the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm import procs, runner
from ftslurm.errors import UserError
from ftslurm.lighthouse import address, launcher, ports
from ftslurm.lighthouse.config import LighthouseConfig
from ftslurm.report import events as E
from ftslurm.safefile import UnsafePath
from ftslurm.wait import free_port, wait_for
from tests.clirun import LighthouseDirs, executable, ftslurm, lighthouse_cli, one_error_line

pytestmark = pytest.mark.timeout(90)
needs_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
    reason="torchft is not installed",
)
PRECIOUS = "precious: root's file, never to be written by ftslurm\n"


def kill(pids: list[int]) -> None:
    for pid in pids:
        if procs.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def state_dir(lighthouse_dirs: LighthouseDirs) -> Path:
    """A state dir; whatever ran from it is stopped at the end, whatever the test did."""
    return lighthouse_dirs.new("lighthouse")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file only root should write; the links tests plant point at it."""
    v = tmp_path / "victim" / "passwd"
    v.parent.mkdir()
    v.write_text(PRECIOUS)
    return v


def wrapper(tmp_path: Path, body: str) -> Path:
    """A user's --binary: a bash script (`$@` are the Lighthouse's arguments)."""
    return executable(tmp_path / "bin" / "site_lighthouse", "#!/bin/bash\n" + textwrap.dedent(body))


# ---------------------------------------------------------------------------------- finding 3

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


@needs_torchft
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


@needs_torchft
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


# ---------------------------------------------------------------------------------- finding 4


@needs_torchft
@pytest.mark.parametrize("name", ["lighthouse.last.json", "torchft_lighthouse", "lighthouse.json",
                                  "lighthouse.pid"])  # fmt: skip
def test_a_link_planted_at_a_whole_state_file_is_replaced_not_followed(
    state_dir: Path, victim: Path, name: str
):
    """Finding 4: `lighthouse.last.json` and the launcher copy were written through a link
    planted at their names (root overwrote the file it named); now each is written as a new
    file renamed over the link. The start goes on, its usual one line on stdout."""
    state_dir.mkdir()
    (state_dir / name).symlink_to(victim)
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1, r.stderr
    assert victim.read_text() == PRECIOUS
    assert not (state_dir / name).is_symlink()


@needs_torchft
@pytest.mark.parametrize("name", ["lighthouse.log", "lighthouse.lock"])
def test_a_link_planted_at_an_appended_state_file_is_refused(
    state_dir: Path, victim: Path, name: str
):
    """Finding 4: the log was appended through a link, and the lock file opened through one
    (a dangling link: root created the file it named); now the start is refused with one
    line and the target is untouched."""
    state_dir.mkdir()
    dangling = victim.with_name("created-by-root")
    (state_dir / name).symlink_to(dangling if name == "lighthouse.lock" else victim)
    line = one_error_line(lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0"))
    assert f"refusing to write {state_dir / name}: it is a symbolic link" in line, line
    assert victim.read_text() == PRECIOUS and not dangling.exists()
    assert not (state_dir / "lighthouse.json").exists()


def test_logs_does_not_print_through_a_link(state_dir: Path, victim: Path):
    """Finding 4: `lighthouse logs` (under sudo) would print whatever a planted link names."""
    state_dir.mkdir()
    (state_dir / "lighthouse.log").symlink_to(victim)
    line = one_error_line(lighthouse_cli(state_dir, "logs"))
    assert "symbolic link" in line and "precious" not in line


def test_the_event_log_is_not_appended_through_a_link(tmp_path: Path, victim: Path, monkeypatch):
    """Finding 4: `simulate-failure` (run with sudo) appended its event to whatever file a
    link at FTSLURM_EVENTS named."""
    link = tmp_path / "events.jsonl"
    link.symlink_to(victim)
    monkeypatch.setenv("FTSLURM_EVENTS", str(link))
    with pytest.raises(UnsafePath) as e:
        E.append_event(E.InjectedEvent(E.now_iso(), "kill", 1, "worker-0", "12"))
    assert str(e.value).startswith(f"refusing to write {link}: it is a symbolic link")
    assert "\n" not in str(e.value) and isinstance(e.value, UserError)
    assert victim.read_text() == PRECIOUS
    # a regular event log is appended as before, readable by a `report` run without sudo
    link.unlink()
    E.append_event(E.InjectedEvent(E.now_iso(), "kill", 1, "worker-0", "12"))
    assert len(link.read_text().splitlines()) == 1
    assert stat.S_IMODE(link.stat().st_mode) == 0o644


def test_the_launchers_log_rotation_does_not_follow_a_link(tmp_path: Path, victim: Path):
    """Finding 4: the running launcher made `<log>.new` with O_TRUNC, following a link
    planted there (truncating its target)."""
    log = tmp_path / "lighthouse.log"
    log.write_text("old lines\n")
    Path(f"{log}.new").symlink_to(victim)
    code = (f"import sys; sys.path.insert(0, {str(Path(launcher.__file__).parent)!r}); "
            f"import launcher; launcher.rotate({str(log)!r}); print('after', flush=True)")
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True, timeout=30)
    assert victim.read_text() == PRECIOUS
    assert Path(f"{log}.1").read_text() == "old lines\n" and log.read_text() == "after\n"
    assert not log.is_symlink() and stat.S_IMODE(log.stat().st_mode) == 0o600


@needs_torchft
def test_new_state_is_private(state_dir: Path):
    """Finding 4: a state dir the Lighthouse creates is 0o700 (no one else can plant a name
    in it), its files 0o600."""
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in state_dir.iterdir()}
    assert set(modes) >= {"lighthouse.json", "lighthouse.pid", "lighthouse.log",
                          "lighthouse.last.json", "lighthouse.lock", "torchft_lighthouse"}
    assert set(modes.values()) == {0o600}, modes


# ---------------------------------------------------------------------------------- finding 5


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


@needs_torchft
def test_the_identity_does_not_depend_on_how_the_state_dir_is_named(state_dir: Path):
    """Finding 5 (guard): the identity is the launcher's path in the command line, so a
    Lighthouse started with a relative --state-dir is stopped with an absolute one."""
    state_dir.mkdir()
    r = ftslurm("lighthouse", "start", "--bind", "127.0.0.1:0", "--state-dir", "lighthouse",
                cwd=state_dir.parent)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = ftslurm("lighthouse", "stop", "--state-dir", str(state_dir))
    assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")


# --------------------------------------------------------------------------------- finding 11


@needs_torchft
@pytest.mark.parametrize("bad", ["bad\nFOO=1", "http://x:1", "login-0:29510", "two words", ""])
def test_advertise_is_a_host_only(state_dir: Path, bad: str):
    """Finding 11: `--advertise $'bad\\nFOO=1'` printed two lines on stdout (a second,
    injected, variable for `export "$(ftslurm lighthouse start)"`), `http://x:1` gave
    `http://http://x:1:PORT`. Now: one error line, exit 2, nothing started. ("" is the
    default: this machine's name.)"""
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0", "--advertise", bad)
    if bad == "":
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 1, r.stderr
        return
    line = one_error_line(r)
    assert line.startswith(f"Error: --advertise {bad!r}: give a host name or IP address only")
    assert not (state_dir / "lighthouse.json").exists()


def test_advertise_accepts_host_names_and_addresses():
    for host, shown in [("login-0", "login-0"), ("node_1.cluster.local.", "node_1.cluster.local."),
                        ("10.0.0.1", "10.0.0.1"), ("::1", "[::1]"), ("[fe80::1]", "[fe80::1]")]:
        assert LighthouseConfig(advertise=host).advertise == host
        assert address.advertised_host("0.0.0.0", host) == shown
    for bad in ("-x", "a..b", "x" * 64, "é.example", "10.0.0.1/8", "[login-0]"):
        with pytest.raises(UserError, match="--advertise"):
            LighthouseConfig(advertise=bad)


@pytest.mark.parametrize("bind", [":", "[::1]:", "127.0.0.1:", " : "])
def test_a_colon_without_a_port_is_an_error(bind: str):
    """Finding 11: `--bind :` silently meant port 29510 (where the user's Lighthouse may run:
    `--bind ":$PORT"` with PORT unset) while `[::1]:` was an error: now both are."""
    with pytest.raises(UserError, match="no port after ':'") as e:
        LighthouseConfig(bind=bind)
    assert "\n" not in str(e.value)
