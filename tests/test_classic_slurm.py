"""The classic (non-FT) script on 2 nodes of the local Slurm cluster, to completion."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ftslurm.slurm import client
from ftslurm.wait import free_port, wait_for
from tests.ftjob import CLASSIC_SCRIPT, ROOT, STEP_RE, cancel, failure_excerpt


@pytest.mark.slurm
@pytest.mark.training
@pytest.mark.timeout(300)
def test_classic_script_runs_on_two_nodes_to_completion(slurm_cluster, tmp_path):
    env = {
        **client.current().environment(),
        "DEVICE": "cpu",
        "STEPS": "4",
        "RDZV_PORT": str(free_port()),
        "FTSLURM_OUTPUTS": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "submit", "--json", "--nodes=2",
         f"--output={tmp_path}/classic-%j.out", str(CLASSIC_SCRIPT)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    job = int(__import__("json").loads(out.stdout)["job_id"])
    try:
        running = ("PENDING", "RUNNING", "COMPLETING")
        final = wait_for(
            lambda: (j := client.current().jobs(job)) and j[0].state not in running and j[0],
            240, interval=1, what="classic job to finish",
        )  # fmt: skip
        log = (tmp_path / f"classic-{job}.out").read_text(errors="replace")
        assert final.state == "COMPLETED", failure_excerpt(log)
        assert len(final.node.split(",")) == 2 or "[" in final.node  # two nodes
        assert log.count("launching classic job") == 1
        # the job's --cpus-per-task (1 from `ftslurm submit` on cpu) reaches srun by hand
        assert "command: srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=1 " in log
        assert "Training completed" in log
        # one rank per node, replicating the model across the two nodes; both reach the end
        assert log.count("dp_replicate=2") == 2
        steps = [int(m.group(1)) for m in STEP_RE.finditer(log)]
        assert steps.count(4) == 2 and max(steps) == 4
    finally:
        cancel(job)
