"""Warm spares on the local Slurm cluster with the REAL FT sbatch script (DEVICE=cpu, real
Lighthouse and torchtitan): `--array=0-2` with FT_SPARES=1 trains 2 replicas and keeps task 2
warm; `simulate-failure` takes slot 1's node down, task 2 claims slot 1 (epoch 1) and trains as
replica 1, and task 1, requeued, finds its slot taken and waits as a spare. Slow: `training`."""

from __future__ import annotations

import json

import pytest

from ftslurm import lighthouse
from ftslurm.replica import slots
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.ftjob import ROOT, FTRun, cancel, ft_test_env, resume_all_nodes, submit_ft

pytestmark = [pytest.mark.slurm, pytest.mark.training]


@pytest.mark.timeout(500)
def test_spare_takes_over_a_downed_replica_and_the_requeued_task_becomes_a_spare(
    slurm_cluster, tmp_path
):
    outputs, lh_dir, lh, events, env = ft_test_env(tmp_path)
    job = None
    try:
        job = submit_ft(outputs, lh, replicas=3, steps=2000, FT_SPARES=1)
        run = FTRun(job, outputs, lh, lh_dir)
        root = slots.slots_dir(run.run_dir)
        wait_for(lambda: min(len(run.steps(0)), len(run.steps(1))) >= 3, 240, 1,
                 "both replicas training")  # fmt: skip
        wait_for(lambda: "spare (task 2): warm" in run.text(2), 120, 0.5, "the spare warm")
        assert "launching spare (attempt 0)" in run.text(2)
        assert run.steps(2) == []  # warm, not training
        assert sorted((c.slot, c.epoch, c.task) for c in slots.history(root, 2)) == [
            (0, 0, 0), (1, 0, 1)]  # fmt: skip

        r = ftslurm("simulate-failure", "--job", str(job), "--replica", "1", "--down-for", "5",
                    "--json", env=env, inherit=False, cwd=ROOT, timeout=200)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr

        def taken() -> slots.Claim | None:
            c = slots.current(root, 1)
            return c if c is not None and c.epoch == 1 else None

        claim = wait_for(taken, 120, 0.2, "a claim of slot 1 at epoch 1")
        assert claim.task == 2 and claim.previous_task == 1
        wait_for(lambda: "launching replica 1 (attempt 0)" in run.text(2), 30, 0.2, "banner")
        assert "as task 2 (slot epoch 1, taken from task 1)" in run.text(2)
        after = lambda: run.text(2).split("taken from task 1", 1)[1]  # noqa: E731
        wait_for(lambda: "should_commit=True" in after() and " loss: " in after(), 180, 0.5,
                 "the spare training as replica 1")  # fmt: skip
        assert "torchtitan_ft_1:" in after()  # torchft sees the slot's replica id
        # the requeued task 1 finds its slot taken and waits as a spare
        wait_for(lambda: "launching spare (attempt 1)" in run.text(1), 180, 0.5,
                 "task 1 back as a spare")  # fmt: skip
        assert "slot 1 is held by task 2 (epoch 1): starting as a spare" in run.text(1)
        wait_for(lambda: "spare (task 1): warm" in run.text(1), 120, 0.5, "task 1 warm")
        tail1 = run.text(1).split("launching spare (attempt 1)", 1)[1]
        assert " loss: " not in tail1
        # never two live processes as replica 1: one holder, and the status shows who holds what
        assert slots.current(root, 1).task == 2
        out = ftslurm("status", "--job", str(job), "--json", "--no-lighthouse", env=env,
                      inherit=False, cwd=ROOT, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        rows = {t["replica"]: t for t in status["tasks"]}
        assert (rows[0]["slot"], rows[1]["slot"], rows[2]["slot"]) == ("0", "spare", "1")
        assert [(c["slot"], c["epoch"], c["task"]) for c in status["claims"]][-1] == (1, 1, 2)
        # a failure of the spare is allowed, and said to be one: the replicas train on
        steps_before = (len(run.steps(0)), len(run.steps(2)))
        r = ftslurm("simulate-failure", "--job", str(job), "--replica", "1", "--mode", "requeue",
                    "--json", env=env, inherit=False, cwd=ROOT, timeout=200)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert "# task 1: a warm spare (holds no slot)" in r.stderr
        assert f"# target: array task 1 of job {job} on worker-" in r.stderr  # not "replica 1"
        assert json.loads(r.stdout.strip().splitlines()[-1])["role"].startswith("a warm spare")
        wait_for(lambda: len(run.steps(0)) > steps_before[0] + 2
                 and len(run.steps(2)) > steps_before[1] + 2, 120, 0.5, "training on")
        assert slots.current(root, 0).epoch == 0 and slots.current(root, 1).epoch == 1
        injected = [json.loads(x) for x in events.read_text().splitlines()]
        assert injected[0]["replica"] == 1 and "array task 1: holds slot 1" in injected[0]["detail"]
        assert injected[-1]["replica"] is None and "a warm spare" in injected[-1]["detail"]
    finally:
        if job:
            cancel(job)
        resume_all_nodes()
        lighthouse.stop(lh_dir)
