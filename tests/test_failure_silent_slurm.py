"""`simulate-failure --mode hang|freeze-node` on the real local Slurm, against the light job
array of tests/test_failure_slurm.py: the processes are stopped (state T) while the failure
lasts, and continued on every way out (the planned end, Ctrl-C, SIGTERM, SIGHUP)."""

from __future__ import annotations

import json
import signal

import pytest

from ftslurm import failure, failure_plan, procs
from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.test_failure_slurm import Mimic, mimic, nodes_up  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slurm]


def _state(pid: int) -> str:
    stat = procs.proc_stat(pid)
    return stat.state if stat else "gone"


def _workers(m: Mimic, task: int) -> tuple[int, ...]:
    t = m.tasks()[task]
    ns = failure.local_node_ns(t.node)
    assert ns is not None
    sel = failure.find_local_workers(ns, t.job_id)
    assert sel.pids, f"no worker of task {task} found"
    return sel.pids


def _node_pids(m: Mimic, task: int) -> list[int]:
    ns = failure.local_node_ns(m.tasks()[task].node)
    assert ns is not None
    return sorted(procs.pids_in_uts_ns(ns))


@pytest.mark.timeout(90)
def test_hang_stops_the_workers_and_continues_them(mimic: Mimic):  # noqa: F811 - fixture
    pids = _workers(mimic, 0)
    proc = mimic.popen("simulate-failure", "--replica", "0", "--mode", "hang", "--down-for",
                       "4", "--json")  # fmt: skip
    out, err, steps = mimic.signal_when(proc, lambda: all(_state(p) == "T" for p in pids),
                                        "the workers stopped", at_ready=lambda: mimic.steps(0))
    assert proc.returncode == 0, (out, err)
    assert json.loads(out)["mode"] == "hang"
    assert all(_state(p) not in ("T", "gone") for p in pids)
    wait_for(lambda: mimic.steps(0) > steps, 20, what="the worker stepping again")
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["hang", "cont"], evs
    assert "SIGSTOP" in evs[0]["detail"] and evs[0]["replica"] == 0
    t = mimic.tasks()
    assert t[0].restarts == 0 and t[1].restarts == 0 and nodes_up()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_a_hang_continues_the_workers(mimic: Mimic, sig: signal.Signals):  # noqa: F811
    pids = _workers(mimic, 1)
    proc = mimic.popen("simulate-failure", "--replica", "1", "--mode", "hang", "--down-for",
                       "120")  # fmt: skip
    out, err, _ = mimic.signal_when(proc, lambda: all(_state(p) == "T" for p in pids),
                                    "the workers stopped", sig)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err
    assert all(_state(p) not in ("T", "gone") for p in pids)
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["hang", "cont"]
    assert "guard" in evs[-1]["detail"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [None, signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["planned", "SIGINT", "SIGTERM", "SIGHUP"])
def test_freeze_node_stops_every_process_of_the_node_and_every_way_out_undoes_it(
        mimic: Mimic, sig: signal.Signals | None):  # noqa: F811 - the fixture
    node = mimic.tasks()[1].node
    pids = _node_pids(mimic, 1)
    slurmd = [p for p in pids if "slurmd" in " ".join(procs.cmdline(p)[:1])]
    assert slurmd, pids
    if sig is None:
        dry = mimic.cli("simulate-failure", "--replica", "1", "--mode", "freeze-node",
                        "--dry-run")  # fmt: skip
        assert dry.returncode == 0 and "kill -STOP" in dry.stdout and "kill -CONT" in dry.stdout
    proc = mimic.popen("simulate-failure", "--replica", "1", "--mode", "freeze-node",
                       "--down-for", "4" if sig is None else "120")  # fmt: skip
    out, err, frozen = mimic.signal_when(
        proc, lambda: all(_state(p) in ("T", "gone") for p in slurmd), "slurmd stopped", sig,
        at_ready=lambda: [p for p in pids if _state(p) == "T"])
    assert proc.returncode == (0 if sig is None else 128 + sig), (out, err)
    assert "Traceback" not in err
    assert len(frozen) >= 3, frozen  # slurmd, the step, the worker at least
    assert all(_state(p) != "T" for p in frozen)
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["freeze-node", "cont"]
    assert ("guard" in evs[-1]["detail"]) == (sig is not None)
    wait_for(lambda: "down" not in client.current().nodes()[node], 20, what=f"{node} up")
    assert mimic.tasks()[0].restarts == 0  # the other replica untouched


@pytest.mark.timeout(120)
def test_hang_through_srun_the_real_cluster_path(mimic: Mimic):  # noqa: F811
    pids = _workers(mimic, 0)
    env = {"FTSLURM_KILL_VIA": "srun"}
    dry = mimic.cli("simulate-failure", "--replica", "0", "--mode", "hang", "--dry-run", env=env)
    assert dry.returncode == 0 and "--overlap" in dry.stdout and "-STOP" in dry.stdout
    r = mimic.cli("simulate-failure", "--replica", "0", "--mode", "hang", "--down-for", "3",
                  "--json", env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "through srun" in r.stderr
    assert all(_state(p) not in ("T", "gone") for p in pids)
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["hang", "cont"] and "--overlap" in evs[0]["detail"]


def test_freeze_node_is_refused_off_the_local_cluster():
    t = failure_plan.Target("gpu-7", job=3, replica=0, raw_job_id=4)
    with pytest.raises(failure_plan.UserError, match="freeze-node stops a node of the local"):
        failure_plan.make_plan("freeze-node", t, kill=failure_plan.KillSelection(False))
    plan = failure_plan.make_plan("hang", t, down_for=7, kill=failure_plan.KillSelection(False))
    lines = plan.lines()
    assert "pkill --ns" in lines[0] and "-STOP" in lines[0] and lines[1].startswith("sleep 7")
    assert "-CONT" in lines[2] and plan.down_for == 7
