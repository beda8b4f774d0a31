"""The managed Lighthouse against the real torchft Lighthouse (torchft-nightly), Python API.

Every test: its own state dir in tmp_path, free ports only (never 29510: a user's Lighthouse
may hold it), a timeout, and a fixture that stops whatever it started by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ftslurm import daemon, procs, runner
from ftslurm import lighthouse as lh
from ftslurm.errors import UserError
from ftslurm.lighthouse import command, launcher, ports
from ftslurm.wait import free_port, wait_for

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
        reason="torchft is not installed",
    ),
]


def kill_leftovers(marker: str) -> list[int]:
    """Stop every process whose command line contains `marker` (our state dir: the launcher
    lives there), so no test leaves a Lighthouse behind even when it fails half-way."""
    killed = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            if marker in daemon.proc_cmdline(int(proc.name)):
                daemon.stop(int(proc.name), grace=2)
                killed.append(int(proc.name))
    return killed


@pytest.fixture
def state_dir(tmp_path: Path):
    d = tmp_path / "lighthouse"
    yield d
    lh.stop(d, grace=2)
    kill_leftovers(str(d))


def restart_with(state_dir: Path, **options) -> lh.LighthouseInfo:
    """What `ftslurm lighthouse restart --OPTION ...` does: the recorded config, `options`
    replaced."""
    return lh.restart(lh.recorded_config(state_dir, options), grace=5)


@pytest.fixture
def held_port():
    """A port held by a plain listening socket of this test process (a 'foreign' owner)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def test_lifecycle(state_dir: Path):
    """start → running + HTTP → start again no-op → kill -9 → stale → start → stop → stop."""
    port = free_port()
    t0 = time.monotonic()
    info = lh.start(bind=f"127.0.0.1:{port}", state_dir=state_dir)
    ready_s = time.monotonic() - t0
    assert info.port == port and not info.already_running
    assert info.address == f"http://127.0.0.1:{port}"  # specific bind address is advertised
    assert info.env_line == f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}"
    assert ready_s < 10

    st = lh.status(state_dir)
    assert st.running and st.pid == info.pid and st.http_ok
    assert st.quorum is not None and st.quorum.quorum_id == 0
    assert st.uptime_s is not None and st.uptime_s < 60
    code, page = lh.http_get(f"http://127.0.0.1:{port}/")
    assert code == 200 and "Lighthouse Dashboard" in page
    # detached: own session, so the user's logout (SIGHUP to the session) does not reach it
    assert os.getsid(info.pid) == info.pid
    # the state file: address, pid, start time, arguments
    saved = json.loads((state_dir / "lighthouse.json").read_text())
    assert saved["pid"] == info.pid and saved["extra"]["address"] == info.address
    assert "--min_replicas" in saved["cmd"] and saved["started_at"] > 0
    assert (state_dir / "lighthouse.pid").read_text().strip() == str(info.pid)
    # the launcher is launcher.py, copied into the state dir: its path marks this dir's process
    copy = state_dir / command.MARKER
    assert info.cmd[:2] == [sys.executable, str(copy)]
    assert copy.read_bytes() == Path(launcher.__file__).read_bytes()
    # a separate log-writer process copies the line: it may land just after HTTP answers
    wait_for(lambda: "Lighthouse listening on" in (state_dir / "lighthouse.log").read_text(),
             timeout=10, what="the listening line in the log")  # fmt: skip

    again = lh.start(bind=f"127.0.0.1:{port}", state_dir=state_dir)
    assert again.already_running and again.pid == info.pid and again.address == info.address

    os.kill(info.pid, signal.SIGKILL)
    wait_for(lambda: not daemon.is_alive(info.pid), timeout=10, interval=0.01, what="death")
    st = lh.status(state_dir)
    assert not st.running and st.stale_pid == info.pid
    assert not (state_dir / "lighthouse.pid").exists()

    info2 = lh.start(bind=f"127.0.0.1:{port}", state_dir=state_dir)
    assert info2.pid != info.pid and info2.port == port and not info2.already_running
    assert lh.status(state_dir).running

    assert lh.stop(state_dir) == "terminated"
    assert not daemon.is_alive(info2.pid)
    assert lh.stop(state_dir) == "not-running"
    assert not lh.status(state_dir).running


def test_start_after_kill_without_status(state_dir: Path):
    """kill -9 and start right away (no status in between): the stale pidfile is cleaned by
    start itself and the port is reused."""
    info = lh.start(bind="127.0.0.1:0", state_dir=state_dir)
    os.kill(info.pid, signal.SIGKILL)
    # only until the main thread is dead: its other threads may still hold the port
    wait_for(lambda: not daemon.is_alive(info.pid), timeout=10, interval=0.005, what="death")
    info2 = lh.start(bind=info.bind, state_dir=state_dir)
    assert info2.port == info.port and info2.pid != info.pid
    assert info2.stale_pid == info.pid


def test_port_zero_and_restart_keeps_address(state_dir: Path):
    info = lh.start(bind="127.0.0.1:0", state_dir=state_dir)
    assert info.port > 0 and info.bind == f"127.0.0.1:{info.port}"
    assert lh.http_get(info.probe_url)[0] == 200
    new = restart_with(state_dir)
    assert new.pid != info.pid
    assert (new.address, new.port, new.bind) == (info.address, info.port, info.bind)
    assert lh.http_get(new.probe_url)[0] == 200
    # options given to restart replace the recorded ones; the port still stays
    new2 = restart_with(state_dir, min_replicas=2, advertise="login-0")
    assert new2.port == info.port and new2.address == f"http://login-0:{info.port}"
    assert new2.config["min_replicas"] == 2
    assert "need min_replicas 2" in (lh.status(state_dir).quorum.next_status or "")


def test_restart_after_stop_or_crash_keeps_the_port(state_dir: Path):
    info = lh.start(bind="127.0.0.1:0", min_replicas=2, state_dir=state_dir)
    lh.stop(state_dir)
    again = restart_with(state_dir)  # nothing runs: the last start's options and port
    assert (again.port, again.config["min_replicas"]) == (info.port, 2)
    os.kill(again.pid, signal.SIGKILL)  # crash
    third = restart_with(state_dir)
    assert third.port == info.port and lh.status(state_dir).running


def runs(program: Path, pid: int) -> bool:
    """`program` runs in `pid` or one of its descendants."""
    return any(str(program) in procs.cmdline(p) for p in procs.process_tree(pid))


def test_restart_keeps_binary_and_log_cap(state_dir: Path, tmp_path: Path):
    """`restart` brings back the same Lighthouse: the --binary and --log-max-mb of the last
    start, not the defaults; `start` while it runs names a different --binary."""
    wrapper = tmp_path / "bin" / "site_torchft_lighthouse"  # a site's own wrapper script
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!{sys.executable}\n" + Path(launcher.__file__).read_text())
    wrapper.chmod(0o755)
    info = lh.start(bind="127.0.0.1:0", state_dir=state_dir, binary=str(wrapper), log_max_mb=0.5)
    # the launcher of the state dir runs it, as its child (how stop and status know it)
    assert info.cmd[:2] == [sys.executable, str(state_dir / "torchft_lighthouse")]
    assert runs(wrapper, info.pid)
    again = lh.start(bind="127.0.0.1:0", state_dir=state_dir, log_max_mb=2)
    assert again.already_running
    assert again.notes["binary"] == f"requested --binary (the fast launcher), running {wrapper}"
    assert again.notes["log_max_mb"] == "requested --log-max-mb 2, running with 0.5"
    new = restart_with(state_dir)
    assert new.pid != info.pid and new.port == info.port and runs(wrapper, new.pid)
    recorded = json.loads((state_dir / "lighthouse.json").read_text())["extra"]
    assert (recorded["binary"], recorded["log_max_mb"]) == (str(wrapper), 0.5)
    # a recorded binary others can write is not run again by a restart (maybe under sudo)
    wrapper.chmod(0o777)
    with pytest.raises(UserError, match="not safe to run again.*restart with --binary"):
        lh.recorded_config(state_dir)
    assert lh.recorded_config(state_dir, {"binary": str(wrapper)}).binary == str(wrapper)
    wrapper.chmod(0o755)
    # options given to restart replace the recorded ones; "" = the default launcher
    third = restart_with(state_dir, binary="", log_max_mb=1.0)
    assert third.cmd[0] == sys.executable and third.port == info.port
    assert not runs(wrapper, third.pid)
    recorded = json.loads((state_dir / "lighthouse.json").read_text())["extra"]
    assert (recorded["binary"], recorded["log_max_mb"]) == (None, 1.0)


def test_restart_refused_before_stopping(state_dir: Path, held_port: int):
    """A restart that start would refuse (a host that does not resolve, a port another program
    holds) is refused while the running Lighthouse still runs: the replicas keep it."""
    info = lh.start(bind="127.0.0.1:0", state_dir=state_dir)
    with pytest.raises(UserError, match="cannot resolve 'no-such-host.invalid'"):
        restart_with(state_dir, bind="no-such-host.invalid:0")
    with pytest.raises(lh.PortInUse, match=f"port {held_port}"):
        restart_with(state_dir, bind=f":{held_port}")
    with pytest.raises(UserError, match="0 to 65535"):
        restart_with(state_dir, bind="127.0.0.1:70000")
    # the Lighthouse's own port number, on another address that another program holds
    with socket.socket() as other:
        other.bind(("127.0.0.2", info.port))
        other.listen(1)
        with pytest.raises(lh.PortInUse, match=f"port {info.port}"):
            restart_with(state_dir, bind=f"127.0.0.2:{info.port}")
    st = lh.status(state_dir)
    assert st.running and st.pid == info.pid and st.http_ok


def test_host_that_does_not_resolve_is_a_user_error(state_dir: Path):
    for bind in ("no-such-host.invalid", "no-such-host.invalid:0"):
        with pytest.raises(UserError, match="cannot resolve"):
            lh.start(bind=bind, state_dir=state_dir)
    assert not kill_leftovers(str(state_dir))  # nothing was started


def test_stop_does_not_create_a_mistyped_state_dir(tmp_path: Path):
    typo = tmp_path / "lighthuose"
    assert lh.stop(typo) == "not-running"
    assert not typo.exists()


def test_failed_start_does_not_leave_a_new_state_dir(tmp_path: Path, held_port: int):
    """A start refused before anything ran (the port is taken) removes the state dir it
    created; an existing one is left as it was."""
    typo = tmp_path / "lighthuose"
    with pytest.raises(lh.PortInUse):
        lh.start(bind=f"127.0.0.1:{held_port}", state_dir=typo)
    assert not typo.exists()
    with pytest.raises(lh.PortInUse):
        lh.start(bind=f"127.0.0.1:{held_port}", state_dir=typo / "a" / "b")
    assert not typo.exists()  # every folder it made
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(lh.PortInUse):
        lh.start(bind=f"127.0.0.1:{held_port}", state_dir=existing)
    assert existing.is_dir()


def test_bare_pidfile_of_another_program_is_never_signalled(state_dir: Path, tmp_path: Path):
    """Only a pidfile is left (the state file lost or corrupt) and its pid now belongs to an
    unrelated program: not taken for the Lighthouse, not stopped."""
    sleeper = runner.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    other = tmp_path / "other"
    fields = {"name": "lighthouse", "started_at": 0, "cmd": [], "start_ticks": None}
    try:
        running = lh.start(bind="127.0.0.1:0", state_dir=other)  # another state dir's
        state_dir.mkdir(parents=True)
        for pid, state in [
            (sleeper.pid, None),
            (sleeper.pid, "{corrupt"),
            (sleeper.pid, json.dumps({**fields, "pid": str(sleeper.pid), "marker": ""})),
            (sleeper.pid, json.dumps({**fields, "pid": sleeper.pid, "marker": "", "extra": []})),
            (sleeper.pid, json.dumps({**fields, "pid": sleeper.pid, "marker": ""})),
            (running.pid, None),
        ]:
            (state_dir / "lighthouse.pid").write_text(f"{pid}\n")
            if state is not None:
                (state_dir / "lighthouse.json").write_text(state)
            assert lh.stop(state_dir) == "foreign", state  # left alone, the pidfile removed
            (state_dir / "lighthouse.pid").write_text(f"{pid}\n")
            st = lh.status(state_dir)
            assert not st.running and st.stale_pid == pid
            assert sleeper.poll() is None and lh.status(other).pid == running.pid  # untouched
    finally:
        sleeper.kill()
        sleeper.wait(10)
        lh.stop(other, grace=2)
        kill_leftovers(str(other))


def test_port_in_use_by_another_program(state_dir: Path, held_port: int):
    with pytest.raises(lh.PortInUse) as e:
        lh.start(bind=f":{held_port}", state_dir=state_dir)
    msg = str(e.value)
    assert f"port {held_port}" in msg and f"pid {os.getpid()}" in msg
    assert "\n" not in msg
    assert not (state_dir / "lighthouse.pid").exists()
    assert not kill_leftovers(str(state_dir))  # nothing was started


def test_port_in_use_detected_from_the_binary(state_dir: Path, held_port: int, monkeypatch):
    """If the port is taken between our check and the bind (a race), the binary's own
    'Address already in use (os error 98)' is turned into the same clear error."""
    monkeypatch.setattr(ports, "port_free", lambda host, port: True)
    with pytest.raises(lh.PortInUse) as e:
        lh.start(bind=f"0.0.0.0:{held_port}", state_dir=state_dir)
    assert f"port {held_port}" in str(e.value)
    assert "Address already in use" in (state_dir / "lighthouse.log").read_text()
    assert not (state_dir / "lighthouse.json").exists()


def test_port_in_use_by_another_lighthouse(state_dir: Path, tmp_path: Path):
    other = tmp_path / "other"
    try:
        info = lh.start(bind="127.0.0.1:0", state_dir=other)
        with pytest.raises(lh.PortInUse, match="managed Lighthouse of state dir") as e:
            lh.start(bind=info.bind, state_dir=state_dir)
        assert f"ftslurm lighthouse stop --state-dir {other}" in str(e.value)
    finally:
        lh.stop(other)


def test_port_in_use_by_an_unmanaged_lighthouse(state_dir: Path, tmp_path: Path):
    """A Lighthouse started by hand (no state dir of ours) holds the port."""
    bare = tmp_path / "by-hand"
    bare.mkdir()
    port = free_port()
    cmd, env = lh.lighthouse_command(bare)
    proc = runner.spawn(cmd + ["--bind", f"127.0.0.1:{port}", "--min_replicas", "1"], extra_env=env)
    try:
        daemon.wait_ready(lambda: lh.answers(f"http://127.0.0.1:{port}/status"),
                          pid=proc.pid, poll=proc.poll, timeout=60)  # fmt: skip
        with pytest.raises(lh.PortInUse, match="another Lighthouse, not managed") as e:
            lh.start(bind=f"127.0.0.1:{port}", state_dir=state_dir)
        assert f"pid {proc.pid}" in str(e.value)
    finally:
        daemon.stop(proc.pid, grace=5)


def test_bad_bind_address_is_a_user_error(state_dir: Path):
    with pytest.raises(UserError, match="not an address of this machine"):
        lh.start(bind=f"10.255.255.254:{free_port()}", state_dir=state_dir)
    with pytest.raises(UserError, match="0 to 65535"):
        lh.start(bind="127.0.0.1:70000", state_dir=state_dir)


def test_stale_pidfile_with_reused_pid(state_dir: Path):
    """The pidfile names a live process that is not a Lighthouse (pid reuse): not running,
    cleaned, never signalled, and start works."""
    sleeper = runner.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = daemon.Daemon(state_dir, "lighthouse")
        st = daemon.proc_stat(sleeper.pid)
        d.write_state(daemon.DaemonState("lighthouse", sleeper.pid, st.start_ticks, time.time(),
                                         ["torchft_lighthouse"], command.MARKER))  # fmt: skip
        status = lh.status(state_dir)
        assert not status.running and status.stale_pid == sleeper.pid
        assert lh.stop(state_dir) == "not-running"
        info = lh.start(bind="127.0.0.1:0", state_dir=state_dir)
        assert info.pid != sleeper.pid
        assert sleeper.poll() is None  # untouched
    finally:
        sleeper.kill()
        sleeper.wait(10)


def test_log_rotated_at_start(state_dir: Path):
    state_dir.mkdir(parents=True)
    log = state_dir / "lighthouse.log"
    log.write_text("old line\n" * 2000)  # ~18 KB
    lh.start(bind="127.0.0.1:0", state_dir=state_dir, log_max_mb=0.01)  # 10 KB cap
    assert (state_dir / "lighthouse.log.1").read_text().startswith("old line")
    assert "old line" not in log.read_text()
    assert "Lighthouse listening on" in log.read_text()


CLIENTS = textwrap.dedent(
    """
    # Two fake replicas talking to the real Lighthouse with torchft's own client:
    # argv[3] rounds of quorum (default 1), replica i at step 10 * i + round.
    import importlib.util, sys, threading
    from datetime import timedelta
    spec = importlib.util.spec_from_file_location("torchft._torchft", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    c = m.LighthouseClient(sys.argv[2], timedelta(seconds=5))
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    def q(i):
        for r in range(rounds):
            c.quorum(replica_id=f"train_{i}:uuid{i}", timeout=timedelta(seconds=20),
                     address="http://w:1", store_address="w:2", step=10 * i + r,
                     world_size=1, shrink_only=False)
    ts = [threading.Thread(target=q, args=(i,)) for i in range(2)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print("QUORUM OK")
    """
)


def _quorum_rounds(port: int, rounds: int = 1) -> None:
    """Run CLIENTS against the Lighthouse on `port` (in a subprocess: loading torchft's
    extension into pytest could clash with a later real `import torchft`)."""
    out = runner.run(
        [sys.executable, "-c", CLIENTS, str(lh.torchft_extension()),
         f"http://127.0.0.1:{port}", str(rounds)],
        timeout=120,
    )  # fmt: skip
    assert "QUORUM OK" in out.stdout


@pytest.mark.skipif(lh.torchft_extension() is None, reason="needs torchft's extension module")
def test_status_shows_the_live_quorum(state_dir: Path):
    """Two clients form a quorum; status reports it."""
    info = lh.start(bind="127.0.0.1:0", min_replicas=2, state_dir=state_dir)
    _quorum_rounds(info.port)
    st = lh.status(state_dir)
    q = st.quorum
    assert q is not None and q.quorum_id == 1 and q.num_participants == 2
    assert {(m.replica_id, m.step) for m in q.members} == {("train_0:uuid0", 0),
                                                          ("train_1:uuid1", 10)}
    assert [m.recovering for m in q.members] == [True, False]
    assert {h.replica_id for h in q.heartbeats} == {"train_0:uuid0", "train_1:uuid1"}
    assert "Quorum!" in (state_dir / "lighthouse.log").read_text()


@pytest.mark.skipif(lh.torchft_extension() is None, reason="needs torchft's extension module")
def test_log_capped_while_running(state_dir: Path):
    """A long-lived Lighthouse: its log is renamed to .1 at a line end each time it passes the
    cap, while it runs; the two files hold the newest lines, whole and without a gap; stop
    leaves no process behind."""
    cap_mb = 2048 / 2**20  # filtered rounds are short (logfilter.py)
    info = lh.start(bind="127.0.0.1:0", min_replicas=2, state_dir=state_dir, log_max_mb=cap_mb)
    writer_children = [p for p in procs.process_tree(info.pid) if p != info.pid]
    assert writer_children, "the Lighthouse runs as the log writer's child"
    _quorum_rounds(info.port, 20)
    st = lh.status(state_dir)
    assert st.running and st.http_ok and st.quorum is not None
    assert lh.stop(state_dir, grace=5) == "terminated"
    assert wait_for(lambda: not any(procs.pid_alive(p) for p in writer_children), timeout=10)
    log, old = state_dir / "lighthouse.log", state_dir / "lighthouse.log.1"
    assert old.exists(), "the log passed 4 KiB and was not rotated"
    assert old.read_bytes().endswith(b"\n")  # cut at a line end
    assert old.stat().st_size <= 4096 + 65536 and log.stat().st_size <= 4096 + 65536
    lines = (old.read_text() + log.read_text()).splitlines()
    stamped = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")  # no line cut in two
    assert all(stamped.match(line) for line in lines), [x for x in lines if not stamped.match(x)]
    # the rounds (20: replica 0 at steps 0..19) in the two files: the newest, without a gap
    steps = [min(int(s) for s in re.findall(r"step: (\d+)", line))
             for line in lines if "Quorum!" in line]  # fmt: skip
    assert steps and steps[-1] == 19 and steps == list(range(steps[0], 20)), steps
    assert steps[0] > 0  # older lines went with an earlier rotation: the log is bounded


@pytest.mark.skipif(lh.torchft_extension() is None, reason="needs torchft's extension module")
def test_log_rotation_that_fails_keeps_the_lighthouse(state_dir: Path):
    """`lighthouse.log.1` cannot be replaced (a directory is in the way): the writer goes on in
    the same file and the Lighthouse keeps serving."""
    (state_dir / "lighthouse.log.1").mkdir(parents=True)
    info = lh.start(bind="127.0.0.1:0", min_replicas=2, state_dir=state_dir,
                    log_max_mb=1024 / 2**20)  # fmt: skip
    _quorum_rounds(info.port, 5)
    st = lh.status(state_dir)
    assert st.running and st.http_ok and st.pid == info.pid
    text = (state_dir / "lighthouse.log").read_text()
    assert text.count("Quorum!") >= 5 and len(text) > 4096  # all of it, past the cap
    assert not (state_dir / "lighthouse.log.new").exists()
    assert lh.stop(state_dir, grace=5) == "terminated"


def test_foreground_execs_with_same_pid(state_dir: Path):
    """`start --foreground` becomes the Lighthouse (exec): the pid in the state file is the
    process we started, `status` sees it, `stop` ends it."""
    port = free_port()
    ftslurm = Path(sys.executable).with_name("ftslurm")
    cmd = [str(ftslurm) if ftslurm.exists() else "ftslurm", "lighthouse", "start",
           "--foreground", "--bind", f"127.0.0.1:{port}", "--state-dir", str(state_dir)]
    log = state_dir.parent / "fg.log"
    proc = runner.spawn(cmd, log_path=log)
    try:
        st = wait_for(lambda: (s := lh.status(state_dir)).running and s.http_ok and s,
                      timeout=30, interval=0.05, what="foreground Lighthouse")  # fmt: skip
        assert st.pid == proc.pid
        assert f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}" in log.read_text()
        # its supervisor (systemd, tmux) restarts it; a detached copy would fight that
        with pytest.raises(UserError, match="runs in the foreground"):
            restart_with(state_dir)
        assert lh.status(state_dir).pid == proc.pid
        assert lh.stop(state_dir, grace=5) == "terminated"
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
