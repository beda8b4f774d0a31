"""The local Slurm cluster: config text (golden) and the real thing (slurmctld + slurmd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import procs
from ftslurm.cli import cli
from ftslurm.cluster import local
from ftslurm.cluster.config import ClusterSpec, node_command, render_hosts, render_slurm_conf
from ftslurm.errors import UserError
from ftslurm.runner import Completed
from ftslurm.slurm import args, client
from ftslurm.wait import wait_for
from tests.fakeslurm import FakeSlurm, recorded
from tests.ftjob import env_without

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "fixtures" / "cluster"


def test_slurm_conf_golden():
    spec = ClusterSpec(state_dir="/state", nodes=3, ctld_port=6817, slurmd_base_port=6818)
    assert render_slurm_conf(spec) == (GOLDEN / "slurm.conf.golden").read_text()


def test_hosts_resolve_nodes_and_login():
    text = render_hosts(ClusterSpec(state_dir="/s", nodes=2))
    first = text.splitlines()[0].split()
    assert first[0] == "127.0.0.1"
    assert {"worker-0", "worker-1", "login-0"} <= set(first[1:])


def test_node_command_is_an_argument_list_with_the_node_name():
    cmd = node_command(ClusterSpec(state_dir="/s", nodes=1), "worker-0")
    assert cmd[:2] == ["unshare", "--uts"]
    assert cmd[-3:] == ["worker-0", "/s/hosts", "/s/slurm.conf"]


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_sinfo_shows_n_idle_nodes(slurm_cluster):
    assert sorted(client.current().nodes()) == slurm_cluster.node_names
    # earlier tests' cancelled jobs may still be completing on a node
    wait_for(lambda: all(s == "idle" for s in client.current().nodes().values()), 30,
             what="idle nodes")  # fmt: skip


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_job_hostname_is_node_name_and_login_resolves(slurm_cluster, tmp_path):
    out = tmp_path / "host.out"
    script = tmp_path / "host.sh"
    script.write_text("#!/bin/sh\nhostname\ngetent hosts login-0\n")
    job = client.current().sbatch(script, [f"--output={out}"])
    wait_for(lambda: out.exists() and "login-0" in out.read_text(), 30, what=f"job {job}")
    name, login = out.read_text().splitlines()[:2]
    assert name in slurm_cluster.node_names
    assert login.split()[0] == "127.0.0.1"


JOB = """#!/bin/bash
echo "task=$SLURM_ARRAY_TASK_ID host=$(hostname) SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
exec sleep 600
"""


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_array_task_requeued_when_its_node_goes_down(slurm_cluster, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(JOB)
    opts = ["--array=0-1", "--requeue", "--open-mode=append", f"--output={tmp_path}/t-%A_%a.out"]
    job = client.current().sbatch(script, opts)
    node = None
    try:

        def tasks():
            return {j.array_task_id: j for j in client.current().jobs(job)}

        running = wait_for(
            lambda: (
                (t := tasks())
                and all(x.state == "RUNNING" for x in t.values())
                and len(t) == 2
                and t
            ),
            30,
            what="both array tasks RUNNING",
        )
        assert running[0].node != running[1].node  # one task per node
        node = running[1].node
        log1 = tmp_path / f"t-{job}_1.out"
        wait_for(lambda: log1.exists() and "SLURM_RESTART_COUNT=0" in log1.read_text(), 30)

        client.current().update_node(node, "DOWN", "ftslurm test")
        after = wait_for(
            lambda: (t := tasks())[1].state == "PENDING" and t, 20, what="task 1 PENDING"
        )
        assert after[0].state == "RUNNING"  # task 0 keeps running
        assert after[1].restarts == 1

        client.current().update_node(node, "RESUME")
        node = None
        again = wait_for(
            lambda: (t := tasks())[1].state == "RUNNING" and t, 30, what="task 1 again"
        )
        assert again[1].restarts == 1
        wait_for(lambda: "SLURM_RESTART_COUNT=1" in log1.read_text(), 20, what="attempt 1 log")
        text = log1.read_text()
        # appended to the same file: attempt 0's line is still there, before attempt 1's
        assert text.index("SLURM_RESTART_COUNT=0") < text.index("SLURM_RESTART_COUNT=1")
    finally:
        if node:
            client.current().update_node(node, "RESUME")
        subprocess.run(["scancel", str(job)], env=client.current().environment(), timeout=30)


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_cli_up_twice_down_twice(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    state = str(tmp_path / "c2")
    runner = CliRunner()
    holder = None
    try:
        first = runner.invoke(cli, ["cluster", "up", "--nodes", "1", "--state-dir", state])
        assert first.exit_code == 0, first.output
        spec = local.load_spec(Path(state))
        holder = procs.read_pidfile(Path(state, "run", "node-worker-0.pid"))
        second = runner.invoke(cli, ["cluster", "up", "--nodes", "1", "--state-dir", state])
        assert second.exit_code == 0, second.output
        assert "already up" in second.output
        # the same node namespace: nothing was restarted
        assert procs.read_pidfile(Path(state, "run", "node-worker-0.pid")) == holder
        # a user's job on it: no resize (it would kill the job), no demo on its nodes
        job = subprocess.run(
            ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300"],
            env=local.slurm_env(spec), capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        resize = subprocess.run(
            [sys.executable, "-m", "ftslurm", "cluster", "up", "--nodes", "2", "--state-dir",
             state],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert resize.returncode == 2, resize.stdout + resize.stderr
        assert f"job(s) {job} queued or running" in resize.stderr
        assert f"`scancel {job}`" in resize.stderr and "Traceback" not in resize.stderr
        demo = subprocess.run(
            [sys.executable, "-m", "ftslurm", "demo", "--backend", "slurm", "--no-plot"],
            env={**env_without("SLURM_CONF", "FTSLURM_LIGHTHOUSE_DIR", "FTSLURM_EVENTS"),
                 "FTSLURM_CLUSTER_DIR": state, "FTSLURM_OUTPUTS": str(tmp_path / "outputs")},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert demo.returncode == 2, demo.stdout + demo.stderr
        assert f"runs job(s) {job}: the demo needs its nodes" in demo.stderr
        assert "Lighthouse running" not in demo.stderr and "submitted" not in demo.stderr
        assert procs.read_pidfile(Path(state, "run", "node-worker-0.pid")) == holder
        assert local.active_jobs(spec) == [job]  # still there
        env = runner.invoke(cli, ["cluster", "env", "--state-dir", state])
        assert env.output.strip() == f"export SLURM_CONF={spec.conf_path}"
        up = runner.invoke(cli, ["cluster", "status", "--state-dir", state])
        assert up.exit_code == 0 and "cluster: running" in up.output, up.output
    finally:
        d1 = runner.invoke(cli, ["cluster", "down", "--state-dir", state])
    assert d1.exit_code == 0
    assert holder is not None and not procs.pid_alive(holder)
    d2 = runner.invoke(cli, ["cluster", "down", "--state-dir", state])
    assert d2.exit_code == 0 and "not running" in d2.output
    down = runner.invoke(cli, ["cluster", "status", "--state-dir", state])
    assert down.exit_code == 3 and "cluster: not running" in down.output


def test_status_of_no_cluster_exits_3(tmp_path):
    """Like `lighthouse status`: 3 = not running, in text and JSON; nothing is created."""
    runner = CliRunner()
    state = tmp_path / "none"
    r = runner.invoke(cli, ["cluster", "status", "--state-dir", str(state)])
    assert r.exit_code == 3 and r.output.startswith("cluster: not running"), r.output
    r = runner.invoke(cli, ["cluster", "status", "--json", "--state-dir", str(state)])
    assert r.exit_code == 3 and json.loads(r.output)["running"] is False
    assert not state.exists()


def test_not_root_is_a_clear_error(tmp_path, monkeypatch, capsys):
    from ftslurm.cli import main

    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["ftslurm", "cluster", "up", "--state-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "needs root" in err and "sudo" in err and "Traceback" not in err


def test_missing_packages_name_the_install_command(monkeypatch):
    monkeypatch.setattr(local, "missing_binaries", lambda: ["slurmctld", "munged"])
    with pytest.raises(
        UserError, match="apt-get install -y --no-install-recommends slurm-wlm munge"
    ):
        local.ensure_packages(install=False)


def test_nodes_and_jobs_of_a_cluster_through_the_client(tmp_path, monkeypatch):
    """`up` waits on the nodes' states and refuses to restart under queued jobs; a controller
    that does not answer yet (any refusal) is no nodes and no jobs, not an error."""
    spec = ClusterSpec(state_dir=str(tmp_path))
    ids = "\n".join(r.split("|")[0] for r in recorded("squeue_requeue_hold.txt").splitlines())
    fake = FakeSlurm().install(monkeypatch)
    fake.on(args.sinfo_nodes_cmd(), recorded("sinfo_down.txt")).on(args.squeue_ids_cmd(), ids)
    assert local.node_states(spec) == {"worker-0": "allocated", "worker-1": "down"}
    assert local.active_jobs(spec) == ["1", "3", "4", "7"]
    assert fake.calls == [args.sinfo_nodes_cmd(), args.squeue_ids_cmd()]
    no_conf = Completed([], 1, "", "squeue: error: Could not establish a configuration source")
    FakeSlurm().on(["squeue"], no_conf).install(monkeypatch)
    assert local.active_jobs(spec) == []  # the UserError, swallowed
    FakeSlurm().install(monkeypatch)
    assert local.active_jobs(spec) == []  # exit code 1
    FakeSlurm(missing=["sinfo"]).install(monkeypatch)
    with pytest.raises(UserError, match="`sinfo` not found"):
        local.node_states(spec)


def test_wait_helper_times_out_quickly():
    t0 = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        wait_for(lambda: False, 0.3, interval=0.05)
    assert time.monotonic() - t0 < 2


def test_first_job_id_skips_existing_run_folders(tmp_path):
    assert local.next_free_job_id(tmp_path / "missing") == 1
    for name in ("tft-3", "tft-12", "tft-local-2026", "slurm-4_0.out"):
        (tmp_path / name).mkdir()
    assert local.next_free_job_id(tmp_path) == 13


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_controller_down_is_a_one_line_fix(tmp_path, monkeypatch):
    """A cluster whose files exist but whose slurmctld does not run (after a reboot, say)."""
    import shutil

    if shutil.which("sinfo") is None:
        pytest.skip("Slurm client tools not installed")
    spec = local.new_spec(1, tmp_path)
    local._prepare_state_dir(spec)
    monkeypatch.setenv("SLURM_CONF", str(spec.conf_path))
    with pytest.raises(UserError, match="does not answer.*ftslurm cluster up"):
        client.current().nodes()


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_local_conf_is_found_only_while_its_controller_runs(slurm_cluster, tmp_path, monkeypatch):
    """SLURM_CONF unset: ftslurm uses the local cluster's slurm.conf while that cluster runs,
    and not once it is stopped (its file stays behind; on a login node with its own Slurm it
    must not replace the system's configuration)."""
    monkeypatch.delenv("SLURM_CONF")
    assert client.current().environment()["SLURM_CONF"] == str(slurm_cluster.conf_path)  # running
    stopped = tmp_path / "stopped"
    try:
        local.up(nodes=1, state_dir=stopped, timeout=60)
    finally:
        local.down(stopped)
    assert (stopped / "slurm.conf").is_file()
    monkeypatch.setenv("FTSLURM_CLUSTER_DIR", str(stopped))
    assert "SLURM_CONF" not in client.current().environment()


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_slurm_refusals_for_a_non_admin_name_the_fix(monkeypatch):
    """What Slurm 22.05 really answers a user who is not root: the same one-line fix for
    `scontrol update` ("Invalid user id") and `scontrol requeue` ("Access/permission denied").
    Every command runs as `nobody` through runuser, on a one-node cluster of its own whose
    folder `nobody` can read (pytest's are root-only); the node and the job are left alone."""
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as another user")
    state = Path(tempfile.mkdtemp(prefix="ftslurm-nonadmin-"))
    state.chmod(0o755)
    real_run = client.run
    try:
        spec = local.up(nodes=1, state_dir=state, timeout=60, install=False)
        env = local.slurm_env(spec)
        monkeypatch.setenv("SLURM_CONF", str(spec.conf_path))
        job = subprocess.run(
            ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300"],
            env=env, capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        # a pending job is another refusal ("pending execution"): wait until it runs
        wait_for(lambda: any(t.state == "RUNNING" for t in client.current().jobs(int(job))),
                 timeout=30, what=f"job {job} running")  # fmt: skip

        def as_nobody(cmd, **kwargs):
            return real_run(
                ["runuser", "-u", "nobody", "--", "env", f"SLURM_CONF={spec.conf_path}", *cmd],
                **kwargs,
            )

        monkeypatch.setattr(client, "run", as_nobody)
        with pytest.raises(UserError, match=r"^`scontrol update` needs root or a Slurm admin"):
            client.current().update_node(spec.node_names[0], "DOWN", reason="test")
        with pytest.raises(UserError, match=r"^`scontrol requeue` needs root or a Slurm admin"):
            client.current().requeue(job)
        monkeypatch.setattr(client, "run", real_run)
        assert client.current().nodes() == {spec.node_names[0]: "allocated"}  # not DOWN
        assert [(t.state, t.restarts) for t in client.current().jobs(int(job))] == [("RUNNING", 0)]
    finally:
        monkeypatch.setattr(client, "run", real_run)
        local.down(state)
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.slurm
@pytest.mark.timeout(60)
def test_no_slurm_configuration_is_a_one_line_fix(tmp_path):
    """No SLURM_CONF, no /etc/slurm/slurm.conf, no local cluster: what real sinfo says ("Could
    not establish a configuration source") becomes the fix, exit 2, no traceback."""
    import shutil

    if shutil.which("sinfo") is None or Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("needs Slurm's tools without a system configuration")
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "status"],
        env={**env_without("SLURM_CONF"), "FTSLURM_CLUSTER_DIR": str(tmp_path / "none")},
        capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (
        "Error: Slurm has no configuration: export SLURM_CONF, or start the local cluster with "
        "`sudo ftslurm cluster up`"
    )
