"""simulate-failure against the REAL FT sbatch script (DEVICE=cpu, real Lighthouse and
torchtitan) on the local Slurm cluster: `--replica 1 --down-for 5 --wait-recovered` takes
the right node down, the task comes back with restart count 1, the node ends RESUMEd, and the
restarted replica trains again. Slow (CPU training start-up): marked `training`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.ftjob import ROOT, ft_job

pytestmark = [pytest.mark.slurm, pytest.mark.training]


@pytest.mark.timeout(400)
def test_real_ft_script_node_down_wait_recovered(slurm_cluster, tmp_path):
    with ft_job(tmp_path, steps=1000) as ((outputs, lh_dir, lh, events, env), job, logs):

        def steps(i: int) -> int:
            return logs[i].read_text(errors="replace").count(" loss: ") if logs[i].exists() else 0

        wait_for(lambda: min(steps(0), steps(1)) >= 3, 240, 1, "both replicas training")
        node = {j.array_task_id: j for j in client.current().jobs(job)}[1].node
        r = subprocess.run(
            [sys.executable, "-m", "ftslurm", "simulate-failure", "--job", str(job),
             "--replica", "1", "--down-for", "5", "--wait-recovered", "--timeout", "120",
             "--json"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=200,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"scontrol update NodeName={node} State=DOWN" in r.stderr  # --json: text there
        result = json.loads(r.stdout)
        assert result["recovered"] and result["restarts"] == 1 and result["node"] == node
        tasks = {j.array_task_id: j for j in client.current().jobs(job)}
        assert tasks[1].state == "RUNNING" and tasks[1].restarts == 1
        assert tasks[0].restarts == 0
        assert not client.current().nodes()[node].startswith("down")
        assert [json.loads(x)["action"] for x in events.read_text().splitlines()] == [
            "node-down", "resume",
        ]  # fmt: skip
        text = lambda: logs[1].read_text(errors="replace")  # noqa: E731
        assert "(attempt 1)" in text()
        wait_for(lambda: "loss:" in text().split("(attempt 1)", 1)[1], 180, 1, "training again")

        def status_rows() -> list[dict]:
            out = subprocess.run(
                [sys.executable, "-m", "ftslurm", "status", "--job", str(job), "--json",
                 "--no-lighthouse"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)["tasks"]

        # (torchft's quorum lines hold "step: N" too: the training step lines hold "loss:")
        seen: list[list[dict]] = []
        rows = wait_for(
            lambda: (seen.append(r := status_rows()) or all(t["last_step"] is not None for t in r))
            and r, 60, 1, "status to show both replicas' steps",
        )  # fmt: skip
        assert [(t["restarts"], t["attempt"]) for t in rows] == [(0, 0), (1, 1)], seen[-1]

