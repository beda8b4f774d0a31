"""skypilot/ftslurm-ft.yaml: SkyPilot's own loader (schema-validated) where skypilot is installed,
a structural schema test always, and the YAML's `run:` script executed on this machine as
the head node and as a worker (dry-run launcher, real Lighthouse on a free port).

skypilot is not in the test extras: `pip install skypilot` (0.14.1) pins click==8.1.8 and
~50 server packages into the environment. Install it in its own venv and point
FTSLURM_SKY_PYTHON at that interpreter (or install it here) to run the loader test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ftslurm import lighthouse
from ftslurm.wait import free_port
from tests.clirun import executable
from tests.ftjob import KNOB_ENV_RE, ROOT

yaml = pytest.importorskip("yaml")

SKY_YAML = ROOT / "skypilot" / "ftslurm-ft.yaml"
# SkyPilot 0.14.1's task and resources schema keys (sky/utils/schemas.py)
TASK_KEYS = {"name", "workdir", "event_callback", "num_nodes", "resources", "file_mounts",
             "setup", "run", "envs", "secrets", "service", "inputs", "outputs", "config",
             "volumes", "pool", "managed_secrets", "api_server_access"}  # fmt: skip
RESOURCES_KEYS = {"accelerators", "cpus", "memory", "disk_size", "disk_tier", "cloud", "infra",
                  "region", "zone", "instance_type", "use_spot", "image_id", "ports", "labels",
                  "job_recovery", "any_of", "ordered", "autostop", "network_tier"}  # fmt: skip

LOADER = textwrap.dedent(
    """
    import json, sys, yaml
    import sky
    config = yaml.safe_load(open(sys.argv[1]))
    task = sky.Task.from_yaml_config(config, secrets_overrides=[("HF_TOKEN", "hf_x")])
    (res,) = task.resources
    print(json.dumps({"version": sky.__version__, "name": task.name,
                      "num_nodes": task.num_nodes, "envs": dict(task.envs),
                      "secrets": sorted(task.secrets), "accelerators": res.accelerators,
                      "run": task.run, "workdir": task.workdir}))
    """
)


def _config() -> dict:
    return yaml.safe_load(SKY_YAML.read_text())


def _sky_python() -> str | None:
    try:
        from sky import Task  # noqa: F401

        return sys.executable
    except ImportError:
        return os.environ.get("FTSLURM_SKY_PYTHON")


@pytest.mark.timeout(120)
def test_skypilot_loader_accepts_the_yaml(tmp_path):
    python = _sky_python()
    if not python:
        pytest.skip("skypilot not installed here; set FTSLURM_SKY_PYTHON to a venv's python")
    out = subprocess.run([python, "-c", LOADER, str(SKY_YAML)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    task = json.loads(out.stdout.strip().splitlines()[-1])
    assert task["name"] == "ftslurm-ft" and task["num_nodes"] == 2
    assert task["accelerators"] == {"H100": 8}
    assert task["secrets"] == ["HF_TOKEN"] and "HF_TOKEN" not in task["envs"]
    assert "python3 -m ftslurm.replica job" in task["run"]


def test_yaml_structure_against_skypilots_schema_keys():
    cfg = _config()
    assert set(cfg) <= TASK_KEYS, set(cfg) - TASK_KEYS
    assert set(cfg["resources"]) <= RESOURCES_KEYS
    assert isinstance(cfg["num_nodes"], int) and cfg["num_nodes"] >= 2
    # SkyPilot wants strings (YAML reads STEPS: 1000 as an int)
    assert {k: type(v) for k, v in cfg["envs"].items()} == dict.fromkeys(cfg["envs"], str)
    assert {"DEVICE", "FTSLURM_PRESET", "STEPS", "LIGHTHOUSE_PORT"} <= set(cfg["envs"])
    assert cfg["secrets"] == {"HF_TOKEN": None}  # from `--secret HF_TOKEN`, never in the file
    assert cfg["workdir"] == "."
    run = cfg["run"]
    # the same launcher as the Slurm array; the Lighthouse on the head node only
    assert "python3 -m ftslurm.replica job" in run
    assert 'if [ "$SKYPILOT_NODE_RANK" = 0 ]; then\n  python3 -m ftslurm lighthouse start' in run
    assert 'FTSLURM_REPLICA_ID="$SKYPILOT_NODE_RANK"' in run
    assert "WANDB_API_KEY" not in cfg.get("envs", {}) and "HF_TOKEN" not in cfg["envs"]


@pytest.mark.parametrize("section", ["setup", "run"])
def test_yaml_scripts_are_valid_bash(section, tmp_path):
    script = tmp_path / f"{section}.sh"
    script.write_text("#!/bin/bash\n" + _config()[section])
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    if shutil.which("shellcheck"):
        out = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stdout


_CALLER_ONLY = re.compile(rf"{KNOB_ENV_RE.pattern}|^(SKYPILOT_|HF_TOKEN$|LIGHTHOUSE_PORT$)")


def _run_node(tmp_path: Path, rank: int, port: int, **env: str) -> subprocess.CompletedProcess:
    """The YAML's `run:` as SkyPilot runs it on node `rank` of 2 (envs + SKYPILOT_* vars)."""
    cfg = _config()
    full = {
        # the caller's knobs, SkyPilot's and secrets out: the YAML's defaults are under test
        **{k: v for k, v in os.environ.items() if not _CALLER_ONLY.match(k)},
        **cfg["envs"],
        "DEVICE": "cpu",
        "FTSLURM_PRESET": "debug_cpu",
        "FTSLURM_DRY_RUN": "1",
        "LIGHTHOUSE_PORT": str(port),
        "FTSLURM_OUTPUTS": str(tmp_path / "outputs"),
        "FTSLURM_VENV": str(tmp_path / "no-venv"),
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.2",
        "SKYPILOT_TASK_ID": "sky-2026-11-23-10-00-00-000000_tft_7",
        **env,
    }
    return subprocess.run(["bash", "-c", cfg["run"]], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.timeout(200)
def test_yaml_run_script_starts_the_lighthouse_and_the_replica_launcher(tmp_path):
    port = free_port()
    lh_dir = tmp_path / "outputs" / "lighthouse"
    try:
        head = _run_node(tmp_path, 0, port)
        assert head.returncode == 0, head.stdout + head.stderr
        assert f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}" in head.stdout  # lighthouse start
        log = tmp_path / "outputs" / "torchft" / "tft-7" / "tft-7_0.out"
        text = log.read_text()
        assert "launching replica 0 (attempt 0) on " in text
        assert f"TORCHFT_LIGHTHOUSE=http://127.0.0.1:{port}" in text
        # one rank per node: torchrun's --rdzv_id as the env it sets (FTSLURM_SKIP_TORCHRUN)
        assert "--fault_tolerance.group_size=2" in text and "TORCHELASTIC_RUN_ID=tft_7_0" in text
        assert lighthouse.status(lh_dir).running
        # a knob mistake (exit 2) would fail every attempt: said once, not restarted
        wlog_path = tmp_path / "outputs" / "torchft" / "tft-7" / "tft-7_1.out"
        worker = _run_node(tmp_path, 1, port, DEVICE="tpu", FTSLURM_PRESET="", FT_MAX_REQUEUES="1")
        assert worker.returncode == 2, worker.stdout + worker.stderr
        wlog = wlog_path.read_text()
        assert wlog.count("DEVICE='tpu' is not supported") == 1
        assert "not restarted (exit 2" in wlog and "restarting" not in wlog
        # a launcher that crashes (exit 1; a python3 that fails it, as an OOM kill would) is
        # restarted FT_MAX_REQUEUES times, then gives up
        wlog_path.unlink()
        fake = tmp_path / "bin"
        executable(fake / "python3", (
            "#!/bin/sh\n"
            'if [ "$2" = ftslurm.replica ]; then echo "launcher crashed (test)"; exit 1; fi\n'
            f'exec {sys.executable} "$@"\n'
        ))
        worker = _run_node(tmp_path, 1, port, FT_MAX_REQUEUES="1",
                           PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")  # fmt: skip
        assert worker.returncode == 1, worker.stdout + worker.stderr
        wlog = wlog_path.read_text()
        assert wlog.count("launcher crashed (test)") == 2
        assert "restarting (attempt 1)" in wlog and "reached FT_MAX_REQUEUES=1" in wlog
    finally:
        lighthouse.stop(lh_dir)
