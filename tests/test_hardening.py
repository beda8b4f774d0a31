"""Hardening findings that have no better home: each test fails without its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import procs
from tests.clirun import invoke, lighthouse_cli

pytestmark = pytest.mark.unit

TOKEN = "hf_secret_token_never_printed_456"


def test_assets_token_from_the_environment_does_not_warn(monkeypatch, tmp_path):
    monkeypatch.setattr("ftslurm.replica.assets.download_tokenizer", lambda d, t: [d / t])
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = invoke("assets", "download", "--dest", str(tmp_path))
    assert res.exit_code == 0
    assert res.stderr == ""


@pytest.mark.parametrize(
    "text", ["99999999999999999999", "4194305", "0", "-5", "1e23", "١٢٣", "", "12 13"]
)
def test_a_pidfile_with_garbage_is_no_pid(tmp_path: Path, text: str) -> None:
    f = tmp_path / "x.pid"
    f.write_text(text + "\n")
    assert procs.read_pidfile(f) is None
    assert procs.pid_alive(procs.read_pidfile(f)) is False


def test_a_pidfile_with_a_pid_is_read(tmp_path: Path) -> None:
    f = tmp_path / "x.pid"
    f.write_text(" 4194304\n")
    assert procs.read_pidfile(f) == 4194304
    assert procs.valid_pid(1.0) is None and procs.valid_pid(True) is None


# ------------------------------------------------------------------ helpers


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str):
    """`ftslurm ARGV` through the console entry point (its error handling included), in this
    process: (exit code, stdout, stderr)."""
    from ftslurm.cli import main

    monkeypatch.setattr(sys, "argv", ["ftslurm", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _one_error_line(err: str) -> str:
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------ the local cluster's state


BROKEN_STATES = [b"[]", b"{}", b"null", b"\xff\xfe{", b"{", b'{"state_dir": 3}',
                 b'{"state_dir": "/x", "nodes": "2"}', b'{"state_dir": "/x", "nodes": true}',
                 b'{"state_dir": "/x", "extra_hosts": [1]}', b'{"state_dir": "/x", "bogus": 1}']


@pytest.fixture
def broken_cluster(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cluster state folder (FTSLURM_CLUSTER_DIR) whose cluster.json holds `request.param`."""
    state = tmp_path / "cluster"
    state.mkdir()
    (state / "cluster.json").write_bytes(request.param)
    monkeypatch.setenv("FTSLURM_CLUSTER_DIR", str(state))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    return state


@pytest.mark.parametrize("broken_cluster", BROKEN_STATES, indirect=True)
def test_a_broken_cluster_state_file_is_one_line_naming_it_and_the_fix(
    broken_cluster: Path, monkeypatch, capsys
):
    spec_file = broken_cluster / "cluster.json"
    code, out, err = _main(monkeypatch, capsys, "cluster", "env")
    assert code == 2 and out == ""
    _one_error_line(err)
    assert str(spec_file) in err and "sudo ftslurm cluster down" in err and "remove it" in err
    # nothing runs there: "not running" is the truth (exit 3), the file named on stderr
    code, out, err = _main(monkeypatch, capsys, "cluster", "status")
    assert code == 3 and out == f"cluster: not running ({broken_cluster})\n"
    assert err.startswith("warning: ") and err.count("\n") == 1 and str(spec_file) in err
    code, out, err = _main(monkeypatch, capsys, "cluster", "status", "--json")
    assert code == 3 and json.loads(out)["running"] is False and str(spec_file) in err
    assert spec_file.exists()  # reading never removes it


@pytest.mark.parametrize("broken_cluster", [b"[]"], indirect=True)
def test_status_of_a_broken_cluster_state_whose_daemons_run_is_an_error(
    broken_cluster: Path, monkeypatch, capsys
):
    """A live pid in the state folder's pidfiles: "not running" would be a lie."""
    (broken_cluster / "run").mkdir()
    (broken_cluster / "run" / "slurmctld.pid").write_text(f"{os.getpid()}\n")
    code, out, err = _main(monkeypatch, capsys, "cluster", "status")
    assert code == 2 and out == ""
    assert str(broken_cluster / "cluster.json") in _one_error_line(err)


@pytest.mark.process
@pytest.mark.parametrize("broken_cluster", [b"\xff\xfe"], indirect=True)
def test_cluster_down_stops_what_a_broken_state_started_and_removes_it(
    broken_cluster: Path, monkeypatch, capsys
):
    """The fix the message names works: the daemons and node holders of the pidfiles are
    stopped, the pidfiles and the broken file removed; then status is a plain "not running"."""
    run = broken_cluster / "run"
    run.mkdir()
    # cluster down stops a pidfile's pid only while it is still that daemon: this stand-in
    # says slurmctld on its command line (a pid reused by another program is left alone)
    ctld = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "slurmctld"])
    node = _sleeper()
    try:
        (run / "slurmctld.pid").write_text(f"{ctld.pid}\n")
        (run / "node-worker-0.pid").write_text(f"{node.pid}\n")
        (run / "munged.pid").write_text(f"{_dead_pid()}\n")
        code, out, err = _main(monkeypatch, capsys, "cluster", "down")
        assert code == 0, err
        assert ctld.wait(timeout=10) is not None and node.wait(timeout=10) is not None
        assert "cluster stopped" in err and "cluster.json" in err
        assert sorted(p.name for p in broken_cluster.rglob("*")) == ["run"]
    finally:
        for p in (ctld, node):
            p.kill()
            p.wait()
    code, out, err = _main(monkeypatch, capsys, "cluster", "status")
    assert (code, err) == (3, "")


@pytest.mark.parametrize("broken_cluster", [b"{}", b"\xff"], indirect=True)
def test_simulate_failure_kill_on_a_broken_cluster_state_is_one_line(
    broken_cluster: Path, monkeypatch, capsys
):
    from ftslurm.slurm import client
    from tests.test_failure import NODES, recorded

    monkeypatch.setattr(client.SlurmClient, "jobs",
                        lambda self, job=None: recorded("squeue_running"))  # fmt: skip
    monkeypatch.setattr(client.SlurmClient, "nodes", lambda self: NODES)
    monkeypatch.delenv("FTSLURM_KILL_VIA", raising=False)
    code, out, err = _main(monkeypatch, capsys, "simulate-failure", "--mode", "kill",
                           "--replica", "1", "--dry-run")  # fmt: skip
    assert code == 2 and out == ""
    assert str(broken_cluster / "cluster.json") in _one_error_line(err)


# ------------------------------------------------------------------ doctor --assets


def test_doctor_assets_in_a_symlink_loop_is_one_line(tmp_path: Path, monkeypatch, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code, out, err = _main(monkeypatch, capsys, "doctor", "--assets", str(loop))
    assert code == 2 and out == ""
    assert str(loop) in _one_error_line(err) and "symlink loop" in err


# ------------------------------------------------------------------ managed daemon pidfiles


_STATE = {"name": "lighthouse", "start_ticks": None, "started_at": 0.0, "cmd": [],
          "marker": "torchft_lighthouse"}  # fmt: skip


@pytest.mark.process
@pytest.mark.parametrize(
    "files",
    [
        {"lighthouse.pid": "99999999999999999999\n"},
        {"lighthouse.pid": "-1\n"},
        {"lighthouse.pid": b"\xff\xfe\n"},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 99999999999999999999})},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 1e23})},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 0}), "lighthouse.pid": "0\n"},
        {"lighthouse.json": "[]", "lighthouse.pid": "1e23\n"},
    ],
    ids=["pidfile-huge", "pidfile-negative", "pidfile-not-utf8", "state-huge", "state-float",
         "state-zero", "state-list"],
)
@pytest.mark.parametrize("command", ["status", "stop"])
def test_a_garbage_lighthouse_pid_is_stale_and_removed(tmp_path: Path, files, command):
    """Through the real CLI: one line, no traceback, and the files cleaned (they stayed, and
    an out-of-range pid was an OverflowError in os.waitpid / os.kill)."""
    state = tmp_path / "lh"
    state.mkdir()
    for name, text in files.items():
        (state / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    out = lighthouse_cli(state, command)
    assert "Traceback" not in out.stderr and "Error" not in out.stderr, out.stderr
    if command == "status":
        assert out.returncode == 3 and "not running" in out.stdout.lower(), out.stdout
    else:
        assert out.returncode == 0 and out.stderr.startswith("Lighthouse not running"), out
    assert sorted(p.name for p in state.iterdir() if p.suffix in (".pid", ".json")) == []


def test_a_pidfile_that_is_not_text_or_not_a_file_is_no_pid(tmp_path: Path) -> None:
    (tmp_path / "bytes.pid").write_bytes(b"\xff\xfe12\n")
    (tmp_path / "dir.pid").mkdir()
    assert procs.read_pidfile(tmp_path / "bytes.pid") is None
    assert procs.read_pidfile(tmp_path / "dir.pid") is None


# ------------------------------------------------------------------ replica attempt folders


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


@pytest.mark.timeout(30)
def test_cluster_state_files_never_write_through_a_planted_link(tmp_path: Path) -> None:
    """`sudo ftslurm cluster up` writes slurm.conf, hosts, the spec and the munge key in a state
    dir; links planted at those names must be replaced, never followed (root would otherwise
    overwrite what they point at), and a planted munge key link is not trusted as a key."""
    from ftslurm.cluster import local

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = tmp_path / "state"
    spec = local.new_spec(1, state)
    (state / "munge").mkdir(parents=True)
    key = state / "munge" / "munge.key"
    names = [spec.conf_path, spec.hosts_path, state / local.SPEC_FILE, key]
    for name in names:
        name.symlink_to(victim)
    local._prepare_state_dir(spec)
    assert victim.read_text() == "precious\n"
    for name in names:
        assert not name.is_symlink() and name.is_file(), name
    assert "SlurmctldPort=" in spec.conf_path.read_text()
    assert len(key.read_bytes()) == 1024 and key.stat().st_mode & 0o777 == 0o600
    assert spec.conf_path.stat().st_mode & 0o777 == 0o644
