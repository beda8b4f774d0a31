"""The real FT sbatch script on the real local Slurm, with the real Lighthouse and torchtitan
(CPU debug model): quorum, node loss + requeue + heal with identical parameters, and a
Lighthouse restart the replicas survive. One array runs for the whole module; the tests run
in file order on it."""

from __future__ import annotations

import pytest

from ftslurm import lighthouse
from ftslurm.replica.worker import checksum
from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.ftjob import FTRun, cancel, resume_all_nodes, start_lighthouse, submit_ft

pytestmark = [pytest.mark.slurm, pytest.mark.training]


@pytest.fixture(scope="module")
def ft_run(slurm_cluster, tmp_path_factory):
    outputs = tmp_path_factory.mktemp("ftrun") / "outputs"
    lh_dir = outputs / "lighthouse"
    lh = start_lighthouse(lh_dir)
    job = None
    try:
        job = submit_ft(outputs, lh, replicas=2, steps=1000)
        yield FTRun(job, outputs, lh, lh_dir)
    finally:
        if job:
            cancel(job)
        resume_all_nodes()
        lighthouse.stop(lh_dir)


def _quorum_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "Quorum! Quorum {" in line]


@pytest.mark.timeout(300)
def test_two_replicas_form_a_quorum_and_commit_20_steps(ft_run: FTRun):
    def both_in_quorum():
        return any(
            "torchtitan_ft_0:" in q and "torchtitan_ft_1:" in q
            for q in _quorum_lines(ft_run.lighthouse_log())
        )

    wait_for(both_in_quorum, 180, interval=1, what="a Quorum! with both replicas")
    wait_for(
        lambda: min(ft_run.last_step(0), ft_run.last_step(1)) >= 20,
        240,
        interval=1,
        what="20 steps on both replicas",
    )
    for task in (0, 1):
        steps = ft_run.steps(task)
        assert steps == sorted(steps) and len(set(steps)) >= 20
        assert f"launching replica {task} (attempt 0) on worker-" in ft_run.text(task)
    for task in (0, 1):  # DiLoCo: one commit per fragment sync (sync_steps=6)
        assert ft_run.text(task).count("should_commit=True") >= 20 // 6, task


@pytest.mark.timeout(400)
def test_node_down_requeues_and_heals_to_identical_parameters(ft_run: FTRun):
    tasks = ft_run.tasks()
    node1 = tasks[1].node
    assert tasks[0].state == "RUNNING" and tasks[1].state == "RUNNING"
    survivor_before = ft_run.last_step(0)
    client.current().update_node(node1, "DOWN", "ftslurm test")
    try:
        wait_for(lambda: ft_run.tasks()[1].state == "PENDING", 30, what="task 1 PENDING")
        assert ft_run.tasks()[0].state == "RUNNING"
        # the survivor keeps training alone
        wait_for(
            lambda: ft_run.last_step(0) >= survivor_before + 6, 120, interval=1,
            what="survivor steps while replica 1 is down",
        )  # fmt: skip
    finally:
        client.current().update_node(node1, "RESUME")
    wait_for(lambda: ft_run.tasks()[1].state == "RUNNING", 60, what="task 1 running again")
    assert ft_run.tasks()[1].restarts == 1
    wait_for(lambda: "(attempt 1)" in ft_run.text(1), 30, what="attempt 1 line")
    after_attempt = lambda: ft_run.text(1).split("(attempt 1)", 1)[1]  # noqa: E731
    wait_for(lambda: "Loaded state dict" in after_attempt(), 180, interval=1, what="heal")
    assert "peers need recovery from us" in ft_run.text(0)

    # identical parameters: the launcher's checksum at the same step, after the heal
    def pairs_after_heal():
        healed = checksum.parse(after_attempt().splitlines())
        ref = {(r.step, r.scope): r.sha256 for r in ft_run.checksums(0)}
        both = [(r.step, r.scope, r.sha256, ref[(r.step, r.scope)]) for r in healed
                if (r.step, r.scope) in ref and r.step > survivor_before]  # fmt: skip
        return both if len(both) >= 2 else None

    pairs = wait_for(pairs_after_heal, 180, interval=1, what="checksums after the heal")
    mismatches = [p for p in pairs if p[2] != p[3]]
    assert not mismatches, mismatches


@pytest.mark.timeout(300)
def test_replicas_survive_a_lighthouse_restart(ft_run: FTRun):
    attempts_before = [ft_run.text(t).count("launching replica") for t in (0, 1)]
    steps_before = [ft_run.last_step(t) for t in (0, 1)]
    log_before = len(ft_run.lighthouse_log())
    info = lighthouse.restart(lighthouse.recorded_config(ft_run.lighthouse_dir))
    assert info.pid != ft_run.lighthouse.pid  # a new process: its quorum state is gone
    assert info.port == ft_run.lighthouse.port  # same address for the running replicas
    wait_for(
        lambda: all(ft_run.last_step(t) >= steps_before[t] + 8 for t in (0, 1)),
        200, interval=1, what="both replicas training after the restart",
    )  # fmt: skip
    # no replica crashed and came back: still the same attempts, both still RUNNING
    assert [ft_run.text(t).count("launching replica") for t in (0, 1)] == attempts_before
    assert all(j.state == "RUNNING" for j in ft_run.tasks().values())
    new_log = ft_run.lighthouse_log()[log_before:]  # what the new Lighthouse logged
    assert any("torchtitan_ft_0:" in q and "torchtitan_ft_1:" in q for q in _quorum_lines(new_log))
