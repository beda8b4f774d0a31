"""Parsers of Slurm output, on output recorded from this project's local Slurm 22.05.8."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from ftslurm import procs
from ftslurm.errors import UserError
from ftslurm.runner import Completed
from ftslurm.slurm import args, client
from ftslurm.slurm.args import node_update_cmd, parse_sbatch_parsable, requeue_cmd
from ftslurm.slurm.parse import (
    SQUEUE_FORMAT,
    UNKNOWN,
    array_tasks,
    conf_value,
    expand_array_tasks,
    job_from_scontrol,
    normalize_job_state,
    parse_job_ids,
    parse_node_state,
    parse_partition_limits,
    parse_partitions,
    parse_sinfo_nodes,
    parse_sinfo_rows,
    parse_squeue_json,
    parse_squeue_text,
    parse_time_limit,
    split_scontrol_records,
)
from ftslurm.wait import wait_for
from tests.fakeslurm import FakeSlurm, recorded

pytestmark = pytest.mark.unit


def read(fixtures_dir, name: str) -> str:
    return (fixtures_dir / "slurm" / name).read_text()


def by_key(jobs):
    return {j.key: j for j in jobs}


def test_squeue_json_running_array(fixtures_dir):
    jobs = by_key(parse_squeue_json(read(fixtures_dir, "squeue_running.json")))
    assert set(jobs) == {"1_0", "1_1"}
    assert jobs["1_0"].state == "RUNNING" and jobs["1_0"].node == "worker-0"
    assert jobs["1_1"].node == "worker-1"
    assert jobs["1_1"].restarts == 0
    assert jobs["1_1"].stdout.endswith("rec-%A_%a.out")  # unexpanded on 22.05


def test_squeue_json_node_down_sets_pending_and_restart(fixtures_dir):
    jobs = by_key(parse_squeue_json(read(fixtures_dir, "squeue_node_down.json")))
    assert jobs["1_1"].state == "PENDING"
    assert jobs["1_1"].restarts == 1
    assert jobs["1_0"].state == "RUNNING"


def test_squeue_text_odd_states(fixtures_dir):
    down = by_key(parse_squeue_text(read(fixtures_dir, "squeue_node_down.txt")))
    assert down["1_1"].state == "PENDING" and down["1_1"].node == ""
    comp = by_key(parse_squeue_text(read(fixtures_dir, "squeue_completing.txt")))
    assert comp["1_0"].state == "COMPLETING"
    assert comp["1_1"].reason == "job requeued in held state"
    fail = by_key(parse_squeue_text(read(fixtures_dir, "squeue_node_fail.txt")))
    assert fail["3"].state == "NODE_FAIL" and fail["3"].array_task_id is None
    assert fail["3"].reason == "NodeDown"
    res = by_key(parse_squeue_text(read(fixtures_dir, "squeue_pending_resources.txt")))
    assert res["4_2"].state == "PENDING" and res["4_2"].reason == "Resources"
    hold = by_key(parse_squeue_text(read(fixtures_dir, "squeue_requeue_hold.txt")))
    assert hold["4_0"].state == "PENDING"
    assert hold["4_0"].reason == "job requeued in held state"


def test_pending_array_tasks_are_one_row_each(fixtures_dir):
    """Recorded on the local Slurm 22.05: `sbatch --array=0-3` on 2 nodes, tasks 2-3 pending.
    squeue --json and squeue without -r list them as one record (`21_[2-3]`, task string
    "2-3"); every replica must still get its row."""
    want = {"21_0": "RUNNING", "21_1": "RUNNING", "21_2": "PENDING", "21_3": "PENDING"}
    for name, parse in (("squeue_array_pending.json", parse_squeue_json),
                        ("squeue_array_pending.txt", parse_squeue_text),
                        ("squeue_array_pending_r.txt", parse_squeue_text)):  # fmt: skip
        jobs = by_key(parse(read(fixtures_dir, name)))
        assert {k: j.state for k, j in jobs.items()} == want, name
        assert jobs["21_3"].reason == "Resources" and jobs["21_3"].array_job_id == 21, name


@pytest.mark.parametrize(
    "spec, tasks",
    [("2-3", [2, 3]), ("[0,4-8:2]", [0, 4, 6, 8]), ("0-3%2", [0, 1, 2, 3]), ("7", [7]),
     ("x", []), ("3-1", []), ("0-99999999", [])],
)  # fmt: skip
def test_expand_array_tasks(spec, tasks):
    assert expand_array_tasks(spec) == tasks


def test_squeue_json_completing_and_node_fail(fixtures_dir):
    comp = by_key(parse_squeue_json(read(fixtures_dir, "squeue_completing.json")))
    assert comp["1_0"].state == "COMPLETING"
    fail = by_key(parse_squeue_json(read(fixtures_dir, "squeue_node_fail.json")))
    assert fail["3"].state == "NODE_FAIL"


def test_scontrol_show_job_records(fixtures_dir):
    running = by_key(
        job_from_scontrol(r)
        for r in split_scontrol_records(read(fixtures_dir, "scontrol_job_running.txt"))
    )
    assert {k: (j.state, j.node, j.restarts) for k, j in running.items()} == {
        "1_0": ("RUNNING", "worker-0", 0),
        "1_1": ("RUNNING", "worker-1", 0),
    }
    recs = split_scontrol_records(read(fixtures_dir, "scontrol_job_node_down.txt"))
    jobs = by_key(job_from_scontrol(r) for r in recs)
    assert jobs["1_1"].state == "PENDING"
    assert jobs["1_1"].restarts == 1
    assert jobs["1_0"].node == "worker-0"
    held = job_from_scontrol(
        split_scontrol_records(read(fixtures_dir, "scontrol_job_requeue_hold.txt"))[0]
    )
    assert held.state == "PENDING" and held.reason == "job_requeued_in_held_state"
    nf = job_from_scontrol(
        split_scontrol_records(read(fixtures_dir, "scontrol_job_node_fail.txt"))[0]
    )
    assert nf.state == "NODE_FAIL" and nf.reason == "NodeDown"


def test_scontrol_node_reason_keeps_spaces(fixtures_dir):
    rec = split_scontrol_records(read(fixtures_dir, "scontrol_node_down.txt"))[0]
    assert rec["NodeName"] == "worker-1"
    assert rec["Reason"].startswith("ftslurm test")
    assert parse_node_state(rec["State"]).base == "down"


@pytest.mark.parametrize(
    "recorded,worker_1",
    [("alloc", "allocated"), ("down", "down"), ("resumed", "idle")],  # simulate-failure's steps
)
def test_sinfo_nodes(fixtures_dir, recorded: str, worker_1: str):
    assert parse_sinfo_nodes(read(fixtures_dir, f"sinfo_{recorded}.txt")) == {
        "worker-0": "allocated",
        "worker-1": worker_1,
    }


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("RUNNING", "RUNNING"),
        ("R", "RUNNING"),
        ("PD", "PENDING"),
        ("CG", "COMPLETING"),
        ("CANCELLED by 0", "CANCELLED"),
        ("REQUEUE_HOLD", "REQUEUE_HOLD"),
        ("NODE_FAIL", "NODE_FAIL"),
        ("SOMETHING_NEW", UNKNOWN),
        ("", UNKNOWN),
        (None, UNKNOWN),
    ],
)
def test_normalize_job_state(raw, expected):
    assert normalize_job_state(raw) == expected


@pytest.mark.parametrize(
    "raw,base,nr",
    [("idle", "idle", False), ("idle*", "idle", True), ("down*", "down", True),
     ("allocated+drain", "allocated", False), ("mix", "mixed", False), ("weird", "unknown", False)],
)  # fmt: skip
def test_node_state(raw, base, nr):
    st = parse_node_state(raw)
    assert (st.base, st.not_responding) == (base, nr)


def test_arg_builders():
    assert node_update_cmd("worker-1", "DOWN", "ftslurm test") == [
        "scontrol", "update", "NodeName=worker-1", "State=DOWN", "Reason=ftslurm test",
    ]  # fmt: skip
    assert requeue_cmd("12_1") == ["scontrol", "requeue", "12_1"]
    assert args.srun_step_cmd(8, "worker-1", ["sh", "-c", "pkill"]) == [
        "srun", "--jobid=8", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=worker-1",
        "sh", "-c", "pkill",
    ]  # fmt: skip
    assert parse_sbatch_parsable("42\n") == 42
    assert parse_sbatch_parsable("42;mini\n") == 42
    # a site wrapper that talks first, or ignores --parsable
    assert parse_sbatch_parsable("note: using account ml\n43\n") == 43
    assert parse_sbatch_parsable("Submitted batch job 44\n") == 44
    for garbage in ("", "sbatch: warning: odd\n", "4x2\n"):
        with pytest.raises(UserError, match="check `squeue --me` before submitting again"):
            parse_sbatch_parsable(garbage)


def test_jobs_without_squeue_json_take_restarts_from_scontrol(monkeypatch):
    """A Slurm whose squeue has no --json (it fails, as the fake does for any command without
    an answer): `squeue -o` rows (recorded) plus restart counts from `scontrol show job`
    (recorded), which squeue's text lacks."""
    fake = FakeSlurm().install(monkeypatch)
    fake.on(["squeue", "-r"], recorded("squeue_requeue_hold.txt"))
    fake.on(args.show_job_cmd(), recorded("scontrol_job_requeue_hold.txt"))
    found = by_key(client.current().jobs())
    assert found["4_0"].state == "PENDING" and found["4_0"].restarts == 1
    assert found["1_1"].restarts == 0 and found["3"].state == "NODE_FAIL"
    assert fake.calls == [args.squeue_json_cmd(),
                          args.squeue_text_cmd(SQUEUE_FORMAT), args.show_job_cmd()]
    assert sorted(by_key(client.current().jobs(4))) == ["4_0", "4_1", "4_2"]
    assert fake.calls[-2:] == [args.squeue_text_cmd(SQUEUE_FORMAT, "4"),
                               args.show_job_cmd("4")]  # fmt: skip


def test_doctors_sinfo_rows_and_partitions():
    rows = parse_sinfo_rows(recorded("doctor_sinfo_nodes_not_responding.txt"))
    assert [(r.name, r.partition, r.state, r.gres) for r in rows] == [
        ("worker-0", "main", "idle", "(null)"), ("worker-1", "main", "idle*", "(null)")]
    assert [(r.idle, r.ready, r.responding) for r in rows] == [(True, True, True),
                                                               (True, False, False)]
    down = parse_sinfo_rows(recorded("doctor_sinfo_nodes_alloc_down.txt"))
    assert [(r.state, r.idle, r.responding) for r in down] == [("allocated", False, True),
                                                               ("down", False, False)]
    assert parse_partitions(recorded("doctor_sinfo_partitions_up.txt")) == {"main": "up"}
    assert parse_partitions(recorded("doctor_sinfo_partitions_down.txt")) == {"main": "down"}


@pytest.mark.parametrize(
    "text,minutes",
    [("infinite", 0), ("UNLIMITED", 0), ("30", 30), ("30:00", 30), ("2:00:00", 120),
     ("1-00:00:00", 1440), ("1-02:30:00", 1590), ("10:30", 11)],
)  # fmt: skip
def test_parse_time_limit(text, minutes):
    assert parse_time_limit(text) == minutes


def test_partition_limits_name_the_default_partition():
    """Recorded with MaxTime UNLIMITED, and 2-03:04:05 (which sinfo shows as 2-03:05:00)."""
    assert parse_partition_limits(recorded("sinfo_partition_limits_infinite.txt")) == (
        {"main": 0}, "main")
    assert parse_partition_limits(recorded("sinfo_partition_limits_2days.txt")) == (
        {"main": 2 * 1440 + 3 * 60 + 5}, "main")


def test_job_ids_count_an_arrays_tasks_once():
    """`squeue -h -o %i` prints squeue's first column: the `%i` field of recorded rows."""
    ids = "\n".join(line.split("|")[0] for line in
                    recorded("squeue_requeue_hold.txt").splitlines())  # fmt: skip
    assert parse_job_ids(ids) == ["1", "3", "4", "7"]
    pending = [line.split("|")[0] for line in recorded("squeue_array_pending.txt").splitlines()]
    assert "21_[2-3]" in pending and parse_job_ids("\n".join(pending)) == ["21"]


def test_array_tasks_prefer_the_live_entry(fixtures_dir):
    jobs = parse_squeue_json(read(fixtures_dir, "squeue_node_down.json"))
    tasks = array_tasks(jobs, 1)
    assert {t: (j.state, j.restarts) for t, j in tasks.items()} == {
        0: ("RUNNING", 0), 1: ("PENDING", 1)}
    ended = dataclasses.replace(tasks[1], state="NODE_FAIL")
    assert array_tasks([ended, *jobs], 1)[1].state == "PENDING"
    assert array_tasks([*jobs, ended], 1)[1].state == "PENDING"
    assert array_tasks(jobs, 2) == {}


@pytest.mark.process
def test_local_controller_is_the_one_its_slurm_conf_names(tmp_path, monkeypatch):
    """The local cluster's slurm.conf (golden) names the pidfile of its slurmctld; a live pid
    there whose command is slurmctld makes the client use that conf, anything else not."""
    golden = (Path(__file__).parent / "fixtures" / "cluster" / "slurm.conf.golden").read_text()
    assert conf_value(golden, "slurmctldpidfile") == "/state/run/slurmctld.pid"
    assert conf_value(golden, "ClusterName") == "ftslurm" and conf_value(golden, "Nope") is None
    pidfile = tmp_path / "slurmctld.pid"
    conf = tmp_path / "slurm.conf"
    conf.write_text(golden.replace("/state/run/slurmctld.pid", str(pidfile)))
    assert not client.controller_running(conf)  # no pidfile
    assert not client.controller_running(tmp_path / "none.conf")
    ctld = subprocess.Popen(["bash", "-c", "exec -a slurmctld sleep 30"])
    try:
        pidfile.write_text(f"{ctld.pid}\n")
        # bash execs `sleep` under the name slurmctld a moment after Popen returns: wait for it
        wait_for(lambda: procs.cmdline(ctld.pid)[:1] == ["slurmctld"], 10, 0.01, "exec -a")
        assert client.controller_running(conf)
        monkeypatch.delenv("SLURM_CONF", raising=False)
        assert client.SlurmClient(local_conf=conf).environment()["SLURM_CONF"] == str(conf)
    finally:
        ctld.kill()
        ctld.wait()
    assert not client.controller_running(conf)  # its pid is gone
    assert "SLURM_CONF" not in client.SlurmClient(local_conf=conf).environment()


def test_refusals_become_the_one_line_fix(monkeypatch):
    """What Slurm's tools print without a configuration (as recorded for tests/test_doctor.py)
    becomes a UserError with the fix, whatever the call."""
    no_conf = Completed([], 1, "", "scontrol: error: Could not establish a configuration source")
    FakeSlurm(missing=["scancel"]).on(["scontrol"], no_conf).install(monkeypatch)
    with pytest.raises(UserError, match=r"^Slurm has no configuration: export SLURM_CONF"):
        client.current().requeue("4_0")
    with pytest.raises(UserError, match=r"^`scancel` not found: run on a Slurm login node"):
        client.current().scancel("4")
