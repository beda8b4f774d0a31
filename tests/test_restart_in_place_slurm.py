"""Restart in place on the real local Slurm with the real FT script (DEVICE=cpu, the real
Lighthouse and torchtitan): a SIGKILLed training worker on a healthy node is restarted by its
launcher inside the same allocation (Slurm's restart count stays 0), heals from the survivor
and then holds the same parameters; the report counts a restart in place, not a requeue; with
FT_MAX_RESTARTS=0 the same kill goes through Slurm's requeue. Warm (FT_WARM_RESTART=1) the
restart takes the next run its launcher started ahead; cold, it starts torchrun anew. Slow:
marked `training`. Run under the heavy lock: `flock /tmp/ftslurm-heavy.lock pytest <this file>`.
"""

from __future__ import annotations

import json

import pytest

from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.ftjob import ROOT, failure_excerpt, ft_job, wait_healed_and_equal

pytestmark = [pytest.mark.slurm, pytest.mark.training]


def _cli(env: dict[str, str], *args: str, timeout: float = 200):
    return ftslurm(*args, env=env, inherit=False, cwd=ROOT, timeout=timeout)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("warm", [pytest.param("1", marks=pytest.mark.both_stacks), "0"],
                         ids=["warm", "cold"])  # fmt: skip
def test_a_killed_worker_on_a_healthy_node_restarts_in_place_and_heals(slurm_cluster, tmp_path,
                                                                       warm):  # fmt: skip
    with ft_job(tmp_path, steps=100000, FT_WARM_RESTART=warm) as (t, job, logs):

        def text(i: int) -> str:
            return logs[i].read_text(errors="replace") if logs[i].exists() else ""

        wait_for(lambda: min(text(0).count(" loss: "), text(1).count(" loss: ")) >= 3, 240, 1,
                 "both replicas training")  # fmt: skip
        node = client.current().array_tasks(job)[1].node
        r = _cli(t.env, "simulate-failure", "--job", str(job), "--replica", "1", "--mode",
                 "kill", "--wait-recovered", "--timeout", "120", "--json")  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(text(1))
        out = json.loads(r.stdout)
        assert (out["recovered"], out["restarted_in_place"], out["restarts"]) == (True, True, 0)
        assert out["new_node"] == node
        assert "restarted in place by its launcher" in r.stderr
        log = text(1)
        assert f"restarting in place on {node} (" in log and "restart 1 of FT_MAX_RESTARTS=3" in log
        assert "(attempt 0, restart 1) on " + node in log and "requeueing" not in log
        # warm: the next run was started ahead (once the first ran a step) and was told to
        # train at the restart; cold: nothing was started ahead
        told = "warm restart: this run was started" in log.split("(attempt 0, restart 1)", 1)[1]
        assert told == (warm == "1"), log[-3000:]
        assert ("warm restart" in log) == (warm == "1")
        tasks = client.current().array_tasks(job)
        assert (tasks[1].state, tasks[1].restarts, tasks[1].node) == ("RUNNING", 0, node)
        assert tasks[0].restarts == 0

        # healed from the survivor, then the same parameters at the same steps
        after = lambda: text(1).split("(attempt 0, restart 1)", 1)[1]  # noqa: E731
        wait_healed_and_equal(after, lambda: text(0))

        rep = _cli(t.env, "report", "--json", str(logs[0].parent), timeout=120)
        assert rep.returncode == 0, rep.stderr
        summary = json.loads(rep.stdout)["summary"]
        assert (summary["restarts_in_place"], summary["requeues"]) == (1, 0), summary
        assert summary["recoveries"] >= 1


@pytest.mark.timeout(300)
def test_with_no_restarts_in_place_a_kill_requeues_through_slurm(slurm_cluster, tmp_path):
    with ft_job(tmp_path, steps=100000, FT_MAX_RESTARTS=0) as (t, job, logs):
        text = lambda: logs[1].read_text(errors="replace") if logs[1].exists() else ""  # noqa: E731
        wait_for(lambda: text().count(" loss: ") >= 2, 240, 1, "replica 1 training")
        r = _cli(t.env, "simulate-failure", "--job", str(job), "--replica", "1", "--mode",
                 "kill", "--wait-recovered", "--timeout", "120", "--json")  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(text())
        out = json.loads(r.stdout)
        assert (out["recovered"], out["restarted_in_place"], out["restarts"]) == (True, False, 1)
        assert f"requeueing {job}_1" in text() and "restarting in place" not in text()
