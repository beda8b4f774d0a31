"""DemoConfig.nodes: the demo's local cluster can have more nodes than array tasks, so that a
replica whose node is taken out has a free node to requeue onto (bench/bad_node.py)."""

from __future__ import annotations

import pytest

from ftslurm.demo import Backend, DemoConfig, _one_failure, plan_lines
from ftslurm.errors import UserError

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_the_cluster_has_one_node_per_task_unless_more_are_asked_for(tmp_path):
    assert DemoConfig(replicas=2, outputs=tmp_path).cluster_nodes == 2
    assert DemoConfig(replicas=2, spares=1, outputs=tmp_path).cluster_nodes == 3
    assert DemoConfig(replicas=2, nodes=3, outputs=tmp_path).cluster_nodes == 3
    # fewer nodes than tasks would leave a task pending for ever: the tasks win
    assert DemoConfig(replicas=2, spares=1, nodes=2, outputs=tmp_path).cluster_nodes == 3


def test_the_plan_starts_the_extra_node_and_submits_the_tasks_only(tmp_path):
    lines = plan_lines(DemoConfig(replicas=2, nodes=3, backend="slurm", outputs=tmp_path))
    assert lines[1].startswith("ftslurm cluster up --nodes 3 ")
    assert any("--array=0-1 " in line for line in lines)


@pytest.mark.parametrize("nodes", [-1, 65])
def test_a_node_count_out_of_range_is_refused(tmp_path, nodes):
    with pytest.raises(UserError, match="nodes must be between 0"):
        DemoConfig(replicas=2, nodes=nodes, backend="local", outputs=tmp_path).validate()


# ---- the story over a restart in place, and --count-as-bad passed to simulate-failure -------

_UUID = "torchtitan_ft_1:6b0ea1ad-e37b-4c16-aa76-52b0cd52e91a/0"


def _titan(msg: str, step: int) -> str:
    return (f"[titan] 2026-11-27 10:00:{step % 60:02d},000 - torchft.manager - INFO - "
            f"[{_UUID} - step {step}] {msg}\n")  # fmt: skip


def _step(step: int) -> str:
    return (f"[titan] 2026-11-27 10:00:{step % 60:02d},000 - root - INFO - step: {step:2d}  "
            "loss:  7.12345  grad_norm:  0.8736\n")  # fmt: skip


class _Scripted(Backend):
    """Two replicas as log files; replica 1's failure is restarted in place by its launcher
    (the same Slurm attempt, a new banner `(attempt 0, restart 1)`), heals and commits."""

    def __init__(self, cfg: DemoConfig):
        super().__init__(cfg, lambda m: None)
        self.run_id = "scripted"
        self.attach_logs()
        self.run_dir.mkdir(parents=True)
        self.q, self.survivor_step = 2, 1
        for i, log in enumerate(self.logs):
            log.path.write_text(f"[2026-11-27 10:00:00]  launching replica {i} (attempt 0) on "
                                f"worker-{i}\n" + _step(1))  # fmt: skip

    def poll(self):
        self.survivor_step += 1  # the survivor trains on
        with self.logs[0].path.open("a") as f:
            f.write(_step(self.survivor_step))
        return super().poll()

    def quorum_size(self) -> int:
        return self.q

    def fail(self, replica: int, mode: str) -> None:
        self.q = 1

    def restore(self, replica: int, mode: str = "") -> None:
        with self.logs[replica].path.open("a") as f:
            f.write("restarting in place on worker-1 (mixed): training exited with code 137\n"
                    "[2026-11-27 10:00:30]  launching replica 1 (attempt 0, restart 1) on "
                    "worker-1\n" + _titan("Loaded state dict.", 9)
                    + _titan("should_commit=True enough_replicas=True, errored=None", 9))
        self.q = 2


def test_a_replica_restarted_in_place_counts_as_restarted_and_healed(tmp_path):
    cfg = DemoConfig(backend="local", outputs=tmp_path, failures=1, down_for=0, timeout=5,
                     steps_between=2, modes=("kill",))  # fmt: skip
    said: list[str] = []
    _one_failure(_Scripted(cfg), cfg, 0, said.append)
    text = "\n".join(said)
    assert "replica 1 (attempt 0) healed from a peer at torchft step 9" in text
    assert "after it was started again" in text and "quorum of 2 again" in text
    assert [m["failure"] for m in cfg.measured] == [1]


@pytest.mark.parametrize("count_as_bad", [False, True])
def test_the_demo_passes_count_as_bad_to_simulate_failure(tmp_path, monkeypatch, count_as_bad):
    from ftslurm import failure, failure_plan
    from ftslurm.demo import SlurmBackend
    from ftslurm.slurm import client

    class Plan:
        def lines(self) -> list[str]:
            return ["kill"]

    class Slurm:
        def jobs(self):
            return []

        def nodes(self):
            return {}

    seen: dict = {}
    monkeypatch.setattr(client, "current", lambda **kw: Slurm())
    monkeypatch.setattr(failure_plan, "resolve_target", lambda *a, **kw: "target")
    monkeypatch.setattr(failure_plan, "make_plan", lambda *a, **kw: Plan())
    monkeypatch.setattr(failure, "selection", lambda *a, **kw: None)
    monkeypatch.setattr(failure, "execute", lambda plan, **kw: seen.update(kw))
    cfg = DemoConfig(backend="slurm", outputs=tmp_path, count_as_bad=count_as_bad)
    b = SlurmBackend(cfg, lambda m: None)
    b.job, b.run_id = 5, "5"
    b.attach_logs()
    b.fail(1, "kill")
    assert seen["count_as_bad"] is count_as_bad
