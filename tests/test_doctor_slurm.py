"""`ftslurm doctor` on the real local Slurm cluster: all-pass with a Lighthouse running, and
each broken set-up on its own (Lighthouse down, tokenizer missing, controller stopped) named
with its fix. The CLI runs as users run it (a subprocess, `--json` and text)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import lighthouse, stacks
from ftslurm.cluster import local
from ftslurm.slurm import client
from ftslurm.wait import free_port, wait_for
from tests.ftjob import ROOT, env_without, start_lighthouse

pytestmark = pytest.mark.slurm

SECRET = "hf_doctorMustNeverPrintThis"


def _doctor(env: dict[str, str], *args: str, timeout: float = 150):
    return subprocess.run([sys.executable, "-m", "ftslurm", "doctor", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _env(tmp_path: Path, lighthouse_address: str, **extra: str) -> dict[str, str]:
    return {
        **env_without("WANDB_API_KEY", "HF_TOKEN", "FTSLURM_PYTHON"),
        **client.current().environment(),
        "DEVICE": "cpu",
        "TORCHFT_LIGHTHOUSE": lighthouse_address,
        "FTSLURM_OUTPUTS": str(tmp_path / "outputs"),
        **extra,
    }


def _checks(out: subprocess.CompletedProcess) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def _idle_nodes(n: int) -> None:
    """Earlier tests' jobs may still be ending: the probes need an idle node."""
    wait_for(lambda: sum(s == "idle" for s in client.current().nodes().values()) >= n, 60,
             what=f"{n} idle nodes")  # fmt: skip


@pytest.fixture(scope="module")
def local_assets():
    """A newcomer's step before a CPU run (the launcher does it by itself on first use; a
    fresh clone has no assets/local yet): `ftslurm assets make-local`."""
    local = ROOT / "assets" / "local"
    if (local / "tokenizer" / "tokenizer_config.json").exists() and (local / "dataset").is_dir():
        return
    out = subprocess.run([sys.executable, "-m", "ftslurm", "assets", "make-local"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr


@pytest.mark.timeout(400)
def test_doctor_all_pass_on_the_local_cluster(slurm_cluster, local_assets, tmp_path):
    lh_dir = tmp_path / "lighthouse"
    lh = start_lighthouse(lh_dir)
    try:
        _idle_nodes(2)
        # (WANDB_API_KEY set would make wandb required: not installed on the CPU test machine)
        env = _env(tmp_path, f"http://login-0:{lh.port}", HF_TOKEN=SECRET)
        out = _doctor(env, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        data = json.loads(out.stdout)
        assert data["ok"] is True
        bad = [c for c in data["checks"] if c["status"] != "pass"]
        assert not bad, bad
        checks = _checks(out)
        assert set(checks) == {
            "slurm client tools", "slurm controller", "partitions and idle nodes",
            "gpus per node (gres)", "lighthouse", "tokenizer", "training stack",
            "python packages", "WANDB_API_KEY", "HF_TOKEN", "shared filesystem",
            "replica addresses",
        }  # fmt: skip
        assert checks["training stack"]["detail"].startswith(f"{stacks.installed().name}: ")
        assert "from compute node worker-" in checks["lighthouse"]["detail"]
        assert "HTTP 200" in checks["lighthouse"]["detail"]
        assert "is read on worker-" in checks["shared filesystem"]["detail"]
        # worker-N's names resolved on another worker, as a peer replica would
        peers = checks["replica addresses"]["detail"]
        assert re.fullmatch(r"(worker-\d) advertises http://\1:<port> and store localhost:<port>; "
                            r"on worker-\d: \1 -> 127\.0\.0\.1; localhost -> 127\.0\.0\.1(, ::1)? "
                            r"\(one machine\); IPv6 sockets work", peers), peers  # fmt: skip
        assert peers.split()[0] != peers.split("; on ")[1].split(":")[0]
        assert checks["HF_TOKEN"]["detail"].startswith("set")
        text = _doctor(env)
        assert text.returncode == 0
        assert "12 checks: 12 pass, 0 warn, 0 fail: all pass" in text.stdout
        assert SECRET not in out.stdout + out.stderr + text.stdout + text.stderr
        # the probe file is cleaned up
        assert not list((tmp_path / "outputs" / ".doctor").glob("probe-*"))
        print(text.stdout)
    finally:
        lighthouse.stop(lh_dir)


@pytest.mark.timeout(200)
def test_doctor_names_a_lighthouse_that_is_down(slurm_cluster, tmp_path):
    _idle_nodes(1)
    address = f"http://login-0:{free_port()}"  # nothing listens there
    out = _doctor(_env(tmp_path, address), "--json")
    assert out.returncode == 1
    lh = _checks(out)["lighthouse"]
    assert lh["status"] == "fail", lh
    assert "not answering from compute node worker-" in lh["detail"]
    assert "Connection refused" in lh["detail"]
    assert "ftslurm lighthouse start" in lh["fix"]
    text = _doctor(_env(tmp_path, address))
    assert "FAIL  lighthouse" in text.stdout and "fix: start it on the login node" in text.stdout
    print(text.stdout)


@pytest.mark.timeout(200)
def test_doctor_names_a_missing_tokenizer(slurm_cluster, tmp_path):
    empty = tmp_path / "empty-assets"
    empty.mkdir()
    out = _doctor(_env(tmp_path, "http://login-0:1"), "--json", "--assets", str(empty))
    assert out.returncode == 1
    tok = _checks(out)["tokenizer"]
    assert tok["status"] == "fail"
    assert str(empty / "local" / "tokenizer" / "tokenizer.json") in tok["detail"]
    assert tok["fix"].startswith("ftslurm assets make-local")
    gpu = _checks(_doctor(_env(tmp_path, "http://login-0:1", DEVICE="cuda"), "--json",
                          "--assets", str(empty)))  # fmt: skip
    assert gpu["tokenizer"]["status"] == "fail"
    assert "hf/Llama-3.1-8B/tokenizer.json" in gpu["tokenizer"]["detail"]
    assert "ftslurm assets download" in gpu["tokenizer"]["fix"]
    assert gpu["HF_TOKEN"]["status"] == "warn"  # needed to download it
    assert gpu["gpus per node (gres)"]["status"] == "fail"  # no gres on the CPU cluster


@pytest.mark.timeout(200)
def test_doctor_names_a_stopped_controller(slurm_cluster, tmp_path):
    """A separate one-node cluster, stopped: the controller check fails with the fix, what
    needs the controller is not attempted (each Slurm call would wait ~10 s), exit 1."""
    state = tmp_path / "small-cluster"
    try:
        spec = local.up(nodes=1, state_dir=state, timeout=60)
    finally:
        local.down(state)
    env = _env(tmp_path, "http://login-0:1", SLURM_CONF=str(spec.conf_path),
               FTSLURM_CLUSTER_DIR=str(state))  # fmt: skip
    out = _doctor(env, "--json", timeout=90)
    assert out.returncode == 1
    checks = _checks(out)
    ctl = checks["slurm controller"]
    assert ctl["status"] == "fail" and "not answering" in ctl["detail"]
    assert f"SLURM_CONF={spec.conf_path}" in ctl["detail"]
    assert "ftslurm cluster up" in ctl["fix"]
    for name in ("partitions and idle nodes", "gpus per node (gres)", "shared filesystem",
                 "replica addresses"):
        assert checks[name]["status"] == "warn"
        assert "controller" in checks[name]["detail"] + checks[name]["fix"]
    text = _doctor(env, timeout=90)
    assert "FAIL  slurm controller" in text.stdout
    print(text.stdout)
