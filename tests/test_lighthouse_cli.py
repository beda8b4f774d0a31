"""`ftslurm lighthouse ...` against the real Lighthouse: click's CliRunner for the flow, and
the real `ftslurm` console script for exit codes and one-line errors (no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import daemon, procs, runner
from ftslurm import lighthouse as lh
from ftslurm.commands.lighthouse import lighthouse
from ftslurm.wait import free_port, wait_for

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
        reason="torchft is not installed",
    ),
]


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    d = tmp_path / "lighthouse"
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(d))
    yield d
    lh.stop(d, grace=2)
    for proc in Path("/proc").iterdir():  # leftovers (the launcher lives in the state dir)
        if proc.name.isdigit() and str(d) in daemon.proc_cmdline(int(proc.name)):
            daemon.stop(int(proc.name), grace=2)


def ftslurm_script() -> list[str]:
    exe = Path(sys.executable).with_name("ftslurm")
    return [str(exe)] if exe.exists() else ["ftslurm"]


def cli(*args: str):
    return CliRunner().invoke(lighthouse, list(args), catch_exceptions=False)


def test_cli_flow(state_dir: Path):
    port = free_port()
    r = cli("start", "--bind", f"127.0.0.1:{port}")
    assert r.exit_code == 0, r.output
    assert r.stdout == f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}\n"  # the only stdout line
    assert "Lighthouse started (pid" in r.stderr

    r = cli("status")
    assert r.exit_code == 0
    assert "Lighthouse: running (pid" in r.stdout
    assert f"http://127.0.0.1:{port}" in r.stdout and "Quorum id:  0" in r.stdout

    r = cli("status", "--json")
    data = json.loads(r.stdout)
    assert data["running"] and data["http_ok"] and data["quorum"]["quorum_id"] == 0
    assert data["address"] == f"http://127.0.0.1:{port}" and data["uptime_s"] >= 0
    pid = data["pid"]

    r = cli("start", "--bind", f"127.0.0.1:{port}")
    assert r.exit_code == 0 and "already running" in r.stderr and "note:" not in r.stderr
    assert r.stdout == f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}\n"
    r = cli("start", "--min-replicas", "2")  # differs from what runs: said, nothing changed
    assert r.exit_code == 0 and "requested min_replicas=2, running with 1" in r.stderr
    assert "port" not in r.stderr.split("note:")[1]  # the default --bind is not a request

    r = cli("logs", "-n", "1")
    assert r.exit_code == 0 and "Quorum status" in r.stdout and len(r.stdout.splitlines()) == 1

    r = cli("restart", "--log-max-mb", "3")
    assert r.exit_code == 0 and r.stdout == f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}\n"
    assert json.loads(cli("status", "--json").stdout)["pid"] != pid
    assert json.loads((state_dir / "lighthouse.json").read_text())["extra"]["log_max_mb"] == 3

    r = cli("stop")
    assert r.exit_code == 0 and "stopped" in r.stderr
    r = cli("stop")
    assert r.exit_code == 0 and "not running" in r.stderr
    r = cli("status")
    assert r.exit_code == 3 and "not running" in r.stdout
    assert json.loads(cli("status", "--json").stdout)["running"] is False


def test_cli_stale_after_kill9(state_dir: Path):
    r = cli("start", "--bind", "127.0.0.1:0", "--advertise", "login-0")
    assert r.exit_code == 0 and r.stdout.startswith("TORCHFT_LIGHTHOUSE=http://login-0:")
    pid = int((state_dir / "lighthouse.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not daemon.is_alive(pid), timeout=10, interval=0.01, what="death")
    r = cli("status")
    assert r.exit_code == 3 and "stale pidfile" in r.stdout and str(pid) in r.stdout
    r = cli("start", "--bind", "127.0.0.1:0")
    assert r.exit_code == 0 and "Lighthouse started" in r.stderr


def test_cli_help_has_examples():
    for cmd in ([], ["start"], ["stop"], ["status"], ["logs"], ["restart"]):
        r = cli(*cmd, "--help")
        assert r.exit_code == 0 and "Example" in r.output, cmd
    assert "lighthouse.log.1" in cli("start", "--help").output  # what the size cap does


def test_logs_without_a_log_is_a_user_error(state_dir: Path):
    r = runner.run([*ftslurm_script(), "lighthouse", "logs"], check=False, timeout=30)
    assert r.returncode == 2 and "no Lighthouse log" in r.stderr and "Traceback" not in r.stderr


def test_console_script_port_in_use(state_dir: Path):
    """Through the real console script: port held by another program → exit code 2, one line
    on stderr naming the port and the owner, no traceback, nothing on stdout."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = runner.run([*ftslurm_script(), "lighthouse", "start", "--bind", f":{port}"],
                       check=False, timeout=60)  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: port ") and str(port) in lines[0]
    assert f"pid {os.getpid()}" in lines[0]


def test_console_script_start_status_stop(state_dir: Path):
    port = free_port()
    run = [*ftslurm_script(), "lighthouse"]
    r = runner.run([*run, "start", "--bind", f"127.0.0.1:{port}"], timeout=60)
    assert r.stdout.strip() == f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}"
    # the CLI process has exited; the detached Lighthouse lives on
    r = runner.run([*run, "status", "--json"], timeout=30)
    pid = json.loads(r.stdout)["pid"]
    assert json.loads(r.stdout)["running"] and procs.pid_alive(pid)
    r = runner.run([*run, "stop"], timeout=30)
    assert r.stderr.strip() == "Lighthouse stopped." and not procs.pid_alive(pid)
    r = runner.run([*run, "status"], check=False, timeout=30)
    assert r.returncode == 3


def test_console_script_bad_option(state_dir: Path):
    r = runner.run([*ftslurm_script(), "lighthouse", "start", "--bind", "x:y:z"], check=False,
                   timeout=30)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--bind" in r.stderr


def test_logs_follow(state_dir: Path, tmp_path: Path):
    """`logs -f` prints new lines as they are written, and follows a new log after rotation."""
    r = cli("start", "--bind", "127.0.0.1:0")
    assert r.exit_code == 0
    out = tmp_path / "follow.out"
    follower = runner.spawn([*ftslurm_script(), "lighthouse", "logs", "-f", "-n", "1"],
                            log_path=out)  # fmt: skip
    try:
        wait_for(lambda: "Quorum status" in out.read_text(), timeout=30, interval=0.05,
                 what="the last line")  # fmt: skip
        log = state_dir / "lighthouse.log"
        with open(log, "a") as f:
            f.write("appended by the test\n")
        wait_for(lambda: "appended by the test" in out.read_text(), timeout=10, interval=0.05,
                 what="the appended line")  # fmt: skip
        # a restart that rotates the log: the follower switches to the new file
        lh.stop(state_dir)
        lh.start(bind=lh.status(state_dir).bind or "127.0.0.1:0", state_dir=state_dir,
                 log_max_mb=0.0)  # fmt: skip
        assert (state_dir / "lighthouse.log.1").exists()
        wait_for(lambda: "Lighthouse listening on" in out.read_text(), timeout=10,
                 interval=0.05, what="the new log's first line")  # fmt: skip
    finally:
        daemon.stop(follower.pid, grace=2)


def test_unwritable_state_dir_is_one_line(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = runner.run([*ftslurm_script(), "lighthouse", "start", "--bind", "127.0.0.1:0",
                    "--state-dir", str(blocker / "sub")], check=False, timeout=30)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("Error: cannot write the Lighthouse state dir")
    assert len(r.stderr.strip().splitlines()) == 1


def test_heartbeat_timeout_option_and_knob(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """--heartbeat-timeout-ms (or its knob) reaches the binary's command line and the status;
    the option wins over the knob; a bad knob value is click's one-line error."""
    assert "--heartbeat-timeout-ms" in cli("start", "--help").stdout
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS", "1500")
    port = free_port()
    r = cli("start", "--bind", f"127.0.0.1:{port}")
    assert r.exit_code == 0, r.output
    pid = json.loads(cli("status", "--json").stdout)["pid"]
    assert "--heartbeat_timeout_ms 1500" in daemon.proc_cmdline(pid)
    assert "heartbeat_timeout_ms=1500" in cli("status").stdout
    assert cli("stop").exit_code == 0
    r = cli("start", "--bind", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2500")
    assert r.exit_code == 0, r.output
    assert "heartbeat_timeout_ms=2500" in cli("status").stdout
    assert cli("stop").exit_code == 0
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS", "0")
    r = CliRunner().invoke(lighthouse, ["start", "--bind", f"127.0.0.1:{port}"])
    assert r.exit_code == 2 and "heartbeat-timeout-ms" in r.output
