"""Parsers of Slurm output, on output recorded from this project's local Slurm 22.05.8."""

from __future__ import annotations

import os

import pytest

from ftslurm.errors import UserError
from ftslurm.slurm.args import node_update_cmd, parse_sbatch_parsable, requeue_cmd
from ftslurm.slurm.parse import (
    UNKNOWN,
    expand_array_tasks,
    job_from_scontrol,
    normalize_job_state,
    parse_node_state,
    parse_sinfo_nodes,
    parse_squeue_json,
    parse_squeue_text,
    split_scontrol_records,
)


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
    assert parse_sbatch_parsable("42\n") == 42
    assert parse_sbatch_parsable("42;mini\n") == 42
    # a site wrapper that talks first, or ignores --parsable
    assert parse_sbatch_parsable("note: using account ml\n43\n") == 43
    assert parse_sbatch_parsable("Submitted batch job 44\n") == 44
    for garbage in ("", "sbatch: warning: odd\n", "4x2\n"):
        with pytest.raises(UserError, match="check `squeue --me` before submitting again"):
            parse_sbatch_parsable(garbage)


def test_jobs_without_squeue_json_take_restarts_from_scontrol(fixtures_dir, tmp_path, monkeypatch):
    """A Slurm whose squeue has no --json: `squeue -o` rows (recorded) plus restart counts
    from `scontrol show job` (recorded), which squeue's text lacks. The two tools are shell
    stand-ins on PATH that print the recorded output; --json fails as on such a Slurm."""
    from ftslurm.slurm import client

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    slurm = fixtures_dir / "slurm"
    tools = {
        "squeue": f'case " $* " in *" --json "*) exit 1;; esac\n'
                  f'cat "{slurm}/squeue_requeue_hold.txt"',
        "scontrol": f'[ "$1 $2" = "show job" ] && cat "{slurm}/scontrol_job_requeue_hold.txt"',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    found = by_key(client.jobs())
    assert found["4_0"].state == "PENDING" and found["4_0"].restarts == 1
    assert found["1_1"].restarts == 0 and found["3"].state == "NODE_FAIL"
    assert sorted(by_key(client.jobs(4))) == ["4_0", "4_1", "4_2"]
