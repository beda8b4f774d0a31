"""The managed Lighthouse against hostile input, second pass (issue 39: findings 1, 2, 10 and
the Lighthouse's part of 6, 8 and 9), through the real `ftslurm` CLI, the real Lighthouse
(torchft-nightly, port 0) and real processes; the "another user" is `nobody`, played by a
forked child that drops root (the tests run as root, as the probe did).

Why these matter: a copy of `outputs/` (a backup, an rsync) followed by a status on the copy
stopped the quorums of a running job; root ran a program another user had planted in a state
dir; escapes sent to the Lighthouse by anyone who can reach it reached the terminal.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm import procs
from ftslurm.lighthouse import launcher
from ftslurm.wait import wait_for
from tests.clirun import LighthouseDirs, executable, lighthouse_cli, one_error_line, stop_lighthouse

pytestmark = pytest.mark.timeout(120)
needs_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None, reason="needs torchft's extension module"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")
ESC = "\x1b]0;PWN\x07"  # sets the terminal's title: what no output of ftslurm may do


# bytes that are not UTF-8 on the Lighthouse's output are the point of some tests here
cli = functools.partial(lighthouse_cli, errors="replace")


def no_escapes(text: str) -> None:
    """No control character but newlines in what reached the terminal."""
    assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"], repr(text)
    assert "\x7f" not in text and "\x9b" not in text


def on_port(state_dir: Path) -> int:
    return json.loads((state_dir / "lighthouse.json").read_text())["extra"]["port"]


def answers(state_dir: Path) -> bool:
    return lh.answers(f"http://127.0.0.1:{on_port(state_dir)}/status")


@pytest.fixture
def original(lighthouse_dirs: LighthouseDirs) -> Path:
    """A running Lighthouse's state dir (the one a copy is made of), stopped at the end."""
    d = lighthouse_dirs.new("lhA")
    r = cli(d, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0, r.stderr
    return d


def copy_of(original: Path) -> Path:
    """`cp -a lhA lhB`: a backup, an rsync of outputs/."""
    copy = original.with_name("lhB")
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    return copy


# ---------------------------------------------------------------------------------- finding 1


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


# ---------------------------------------------------------------------------------- finding 2

NOBODY = pwd.getpwnam("nobody") if "nobody" in {p.pw_name for p in pwd.getpwall()} else None


@contextlib.contextmanager
def as_nobody(body: str, **names: Path) -> Iterator[None]:
    """Run python `body` (its `names` given as Paths) as user nobody, in a forked child
    that drops root, for as long as the block runs."""
    assert NOBODY is not None
    pid = os.fork()
    if pid == 0:  # the other user
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            exec(body, {"os": os, "time": time, **names})
        finally:
            os._exit(0)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


EVIL = "import pathlib; pathlib.Path({marker!r}).write_text('ran as uid %d' % __import__('os').getuid())\n"  # noqa: E501


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
def test_root_refuses_a_state_dir_another_user_can_write(tmp_path: Path):
    """Finding 2: with a state dir anyone can write and `nobody` looping `os.replace(evil,
    'ww/torchft_lighthouse')`, `lighthouse start` as root ran `evil` as uid 0."""
    reachable = Path(tempfile.mkdtemp(prefix="ftslurm-test-"))  # pytest's folders are 0o700
    reachable.chmod(0o755)
    ww, marker = reachable / "ww", tmp_path / "pwned"
    ww.mkdir()
    ww.chmod(0o777)
    plant = textwrap.dedent("""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            evil = ww / f".evil{os.getpid()}"
            evil.write_text(EVIL)
            os.replace(evil, ww / "torchft_lighthouse")
    """)
    try:
        with as_nobody(plant, ww=ww, EVIL=EVIL.format(marker=str(marker))):
            wait_for(lambda: (ww / "torchft_lighthouse").exists(), timeout=10, what="the plant")
            for _ in range(3):
                line = one_error_line(cli(ww, "start", "--bind", "127.0.0.1:0"))
                assert f"refusing the Lighthouse state dir {ww}" in line, line
                assert "can be written by other users (mode 777)" in line, line
        assert not marker.exists(), marker.read_text()
        assert not (ww / "lighthouse.json").exists()
    finally:
        stop_lighthouse(ww)
        shutil.rmtree(reachable)


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
def test_root_refuses_a_state_dir_of_another_user(tmp_path: Path):
    """Finding 2: a state dir owned by another user was used without a word (its owner can
    replace the launcher root runs from it); so was one inside a folder of another user,
    who can rename it away and put their own in its place."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    inside = theirs / "lighthouse"
    inside.mkdir()  # root's own, in nobody's folder
    try:
        line = one_error_line(cli(theirs, "start", "--bind", "127.0.0.1:0"))
        assert f"{theirs} belongs to user nobody, not to you" in line, line
        line = one_error_line(cli(inside, "start", "--bind", "127.0.0.1:0"))
        assert f"{theirs}, a folder above it, belongs to user nobody" in line, line
        # a read-only command still reads it, and removes nothing there
        assert cli(theirs, "status").returncode == 3
    finally:
        for d in (theirs, inside):
            stop_lighthouse(d)


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
@pytest.mark.parametrize("how", ["owned-by-nobody", "world-writable", "folder-of-nobody"])
def test_start_refuses_a_binary_another_user_can_change(tmp_path: Path, how: str):
    """Finding 2: `start --binary` ran a binary owned by another user without a word
    (`restart` already refused a recorded one)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    binary, marker = folder / "site_lighthouse", tmp_path / "ran"
    binary.write_text(f"#!/bin/sh\necho ran >{marker}\nexec {sys.executable} "
                      f'{launcher.__file__} "$@"\n')  # fmt: skip
    binary.chmod(0o777 if how == "world-writable" else 0o755)
    if how == "owned-by-nobody":
        os.chown(binary, NOBODY.pw_uid, NOBODY.pw_gid)
    if how == "folder-of-nobody":
        os.chown(folder, NOBODY.pw_uid, NOBODY.pw_gid)
    d = tmp_path / "lh"
    try:
        line = one_error_line(cli(d, "start", "--bind", "127.0.0.1:0", "--binary", str(binary)))
        assert line.startswith(f"Error: refusing to run the Lighthouse binary {binary}: "), line
        assert not marker.exists()
    finally:
        stop_lighthouse(d)


# ------------------------------------------------------------------------- findings 6 and 8

CLIENT = textwrap.dedent("""
    # A replica with an id full of escapes, with torchft's own client: a quorum, heartbeats
    import importlib.util, sys
    from datetime import timedelta
    spec = importlib.util.spec_from_file_location("torchft._torchft", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    c = m.LighthouseClient(sys.argv[2], timedelta(seconds=5))
    c.quorum(replica_id=sys.argv[3], timeout=timedelta(seconds=20), address=sys.argv[3],
             store_address=sys.argv[3], step=1, world_size=1, shrink_only=False)
    c.heartbeat(sys.argv[3])
    print("QUORUM OK")
""")


@needs_torchft
def test_status_shows_ids_and_addresses_from_the_network_escaped(original: Path):
    """Findings 6 and 8: a replica id (and its manager address) holding `ESC]0;...BEL`, sent
    to the Lighthouse by anyone who reaches it, was printed raw by `lighthouse status`."""
    url = f"http://127.0.0.1:{on_port(original)}"
    out = subprocess.run([sys.executable, "-c", CLIENT, str(lh.torchft_extension()), url,
                          f"evil{ESC}id"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "QUORUM OK" in out.stdout, out.stderr
    r = cli(original, "status")
    assert r.returncode == 0, r.stderr
    assert "evil\\x1b]0;PWN\\x07id" in r.stdout, r.stdout  # shown, not done
    no_escapes(r.stdout)


def test_logs_show_escapes(tmp_path: Path):
    """Finding 8: `lighthouse logs` printed the log's escapes raw (what a replica id in a
    log line of the Lighthouse holds), tabs kept."""
    d = tmp_path / "lh"
    d.mkdir()
    (d / "lighthouse.log").write_text(f"quorum\tfrom {ESC} and \x9b2J\n")
    r = cli(d, "logs")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "quorum\tfrom \\x1b]0;PWN\\x07 and \\x9b2J\n"


@pytest.mark.parametrize("advertise", [f"::1%{ESC}", f"[fe80::1%{ESC}]", "::1%a b"])
def test_advertise_with_escapes_is_refused(tmp_path: Path, advertise: str):
    """Finding 8: `--advertise $'::1%\\e]0;PWN\\a'` passed (Python reads anything after `%`
    as an IPv6 zone) and was echoed raw on stdout in TORCHFT_LIGHTHOUSE=..."""
    d = tmp_path / "lh"
    try:
        line = one_error_line(cli(d, "start", "--bind", "127.0.0.1:0", "--advertise", advertise))
        assert line.startswith("Error: --advertise "), line
        no_escapes(line)
        assert not (d / "lighthouse.json").exists()
    finally:
        stop_lighthouse(d)


@pytest.mark.parametrize("advertise", ["fe80::1%eth0", "[fe80::1%2]", "login-0", "10.0.0.1"])
def test_advertise_zones_and_names_still_pass(advertise: str):
    lh.LighthouseConfig(advertise=advertise)


# ---------------------------------------------------------------------------------- finding 9


@pytest.mark.parametrize("bind", [b"\xff:0", b"[fe80::1%lo]:0", f"{ESC}:0".encode(),
                                  b"[::1%a\x07]:0", b"a b:0"])  # fmt: skip
def test_bad_bind_hosts_are_one_line(tmp_path: Path, bind: bytes):
    """Finding 9: `--bind $'\\xff:0'` raised TypeError, `--bind '[fe80::1%lo]:0'` OSError:
    tracebacks instead of one line."""
    d = tmp_path / "lh"
    try:
        r = cli(None, "start", "--bind", bind, "--state-dir", str(d))
        line = one_error_line(r)
        assert line.startswith("Error: --bind "), line
        no_escapes(line)
    finally:
        stop_lighthouse(d)


@needs_torchft
@pytest.mark.parametrize("damage", [
    {"config": "abc"}, {"config": {"min_replicas": "x", "bind": 5}}, {"port": "1"},
    {"address": ["x"], "probe_url": 3}, {"log_max_mb": "big", "binary": 7}, {"port": 70000},
])  # fmt: skip
def test_a_damaged_state_file_is_said_not_a_traceback(original: Path, damage: dict):
    """Finding 9: `lighthouse.json` with `extra.config="abc"` made `lighthouse status` raise
    AttributeError; `start` (already running) and `restart` read the same fields."""
    state = json.loads((original / "lighthouse.json").read_text())
    state["extra"].update(damage)
    (original / "lighthouse.json").write_text(json.dumps(state))
    r = cli(original, "status")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "the state file is damaged" in r.stdout, r.stdout
    assert f"extra.{next(iter(damage))}" in r.stdout
    r = cli(original, "status", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["damaged"], r.stderr
    r = cli(original, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = cli(original, "restart")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "the state file is damaged" not in cli(original, "status").stdout  # written anew


# --------------------------------------------------------------------------------- finding 10


@needs_torchft
@pytest.mark.parametrize("escape", [
    "setsid env -i sleep 300 & echo $! >{pids}",  # its parent is the Lighthouse (exec below)
    "( setsid env -i sleep 300 & echo $! >{pids} )",  # orphaned at once: adopted
    "setsid env -i sleep 300 >/dev/null 2>&1 </dev/null & echo $! >{pids}",  # not on the log
])  # fmt: skip
def test_stop_ends_a_child_that_left_the_session_and_its_environment(tmp_path: Path, escape):
    """Finding 10: a `--binary` whose child calls `setsid env -i sleep` (no session, no tag)
    survived `stop`, and stop waited the full 10 s grace: the sleep held the log pipe, so
    the launcher never exited on SIGTERM."""
    d, pids = tmp_path / "lh", tmp_path / "child.pid"
    w = executable(tmp_path / "bin" / "wrapper", f"#!/bin/bash\n{escape.format(pids=pids)}\n"
                   f'exec {sys.executable} {launcher.__file__} "$@"\n')  # fmt: skip
    try:
        r = cli(d, "start", "--bind", "127.0.0.1:0", "--binary", str(w))
        assert r.returncode == 0, r.stderr
        child = int(pids.read_text())
        assert procs.pid_alive(child) and os.getsid(child) == child
        t0 = time.monotonic()
        r = cli(d, "stop", "--grace", "30")
        took = time.monotonic() - t0
        assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")
        assert not procs.pid_alive(child)
        assert took < 15, f"stop took {took:.1f} s: the 30 s grace was waited"
    finally:
        stop_lighthouse(d)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int(pids.read_text()), signal.SIGKILL)


@needs_torchft
def test_stop_of_a_lighthouse_that_exits_at_once_takes_no_grace(original: Path):
    """Finding 10: every stop waited the full grace; a Lighthouse that exits on SIGTERM is
    stopped in well under it."""
    t0 = time.monotonic()
    r = cli(original, "stop", "--grace", "30")
    assert (r.returncode, r.stderr) == (0, "Lighthouse stopped.\n")
    assert time.monotonic() - t0 < 15


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
