"""The local cluster's state folder (FTSLURM_CLUSTER_DIR) when its cluster.json is broken or
links are planted in it. Every command that reads a broken cluster.json is one line naming
the file and the fix (`sudo ftslurm cluster down`, or remove it), `cluster status` says "not
running" only when nothing of the pidfiles runs, `cluster down` stops what they name and
removes the broken file; `cluster up` (root) replaces links planted at the files it writes
instead of writing through them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.entry_point import error_line as _one_error_line
from tests.entry_point import run_main as _main

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ helpers


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
