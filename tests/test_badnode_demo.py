"""DemoConfig.nodes: the demo's local cluster can have more nodes than array tasks, so that a
replica whose node is taken out has a free node to requeue onto (bench/bad_node.py)."""

from __future__ import annotations

import pytest

from ftslurm.demo import DemoConfig, plan_lines
from ftslurm.errors import UserError

pytestmark = pytest.mark.timeout(30)


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
