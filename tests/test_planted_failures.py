"""Damaged or planted failure histories (`<run folder>/failures/task-<N>.json`,
replica/launcher/failure_history.py) must not make the launcher, often root, act: a value that is
not a finite number of a sane range drops its record (never raises), a record another user could
have written does not count towards draining a node, and what is read at a failure is bounded
(the array's task files, one at a time, each capped). No processes, no Slurm: the launcher's
own `after_failure` with the recorded-answer Slurm client of tests/fakeslurm.py.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import failure_history as fh
from ftslurm.replica.launcher import preflight

pytestmark = pytest.mark.unit

ROOT = Path("/opt/ftslurm")
ENV = {"SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}
SINFO = (
    "worker-0|main*|allocated|(null)\nworker-1|main*|allocated|(null)\nworker-2|main*|idle|(null)\n"
)
GOOD = {"t": 100.0, "node": "worker-1", "code": 137, "kind": "crash", "injected": False,
        "detail": ""}  # fmt: skip


def _run_dir(tmp_path: Path) -> tuple[dict[str, str], Path]:
    env = {**ENV, "FTSLURM_OUTPUTS": str(tmp_path)}
    return env, planlib.run_folder(env, ROOT)


def _plant(run_dir: Path, task: int, records: list[object], mode: int = 0o600) -> Path:
    """A history file written by someone else than the launcher (by hand, here)."""
    folder = fh.failures_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    path = folder / f"task-{task}.json"
    path.write_text(json.dumps({"version": 1, "task": task, "failures": records}))
    path.chmod(mode)
    return path


def _slurm(monkeypatch: pytest.MonkeyPatch):
    from fakeslurm import FakeSlurm

    from ftslurm.slurm import args

    fake = FakeSlurm().on(args.sinfo_rows_cmd(), SINFO).on(["scontrol", "update"], "")
    fake.on(args.show_job_cmd("42_1"), "JobId=7 ArrayJobId=42 ArrayTaskId=1 ExcNodeList=(null)\n")
    fake.on(["scontrol", "requeuehold"], "").on(["scontrol", "release"], "")
    fake.on(["scontrol", "requeue"], "")
    return fake.install(monkeypatch)


def _first_real_failure(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                        host: str = "worker-1") -> list[str]:  # fmt: skip
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: host)
    lines: list[str] = []
    plan = planlib.build_ft_plan(env, ROOT)
    preflight.after_failure(plan, -9, False, None, 0.0, lines.append)
    return lines


def _drains(fake) -> list[list[str]]:
    return [c for c in fake.calls if c[:2] == ["scontrol", "update"]]


# ---- 1. values that are not a finite number of a sane range ---------------------------------


@pytest.mark.parametrize("field, value", [
    ("code", "Infinity"), ("code", "-Infinity"), ("code", "NaN"), ("code", "1e300"),
    ("code", "1" + "0" * 40), ("code", "-5"), ("code", "137.5"), ("code", '"137"'),
    ("code", "true"), ("t", "Infinity"), ("t", "NaN"), ("t", "1e300"), ("t", "-1e300"),
    ("t", "-1"), ("t", "true"), ("t", '"100"'), ("t", "1" + "0" * 40), ("node", "null"),
    ("node", "7"), ("node", '"a b; reboot"'), ("injected", '"false"'), ("injected", "1"),
    ("kind", "[]"), ("detail", "{}"),
])  # fmt: skip
def test_a_record_with_a_value_out_of_range_is_dropped_never_raised(
    tmp_path: Path, field: str, value: str
) -> None:
    _, run_dir = _run_dir(tmp_path)
    bad = json.dumps({**GOOD, field: "@@"}).replace('"@@"', value)
    path = _plant(run_dir, 0, [])
    path.write_text('{"failures": [' + json.dumps(GOOD) + ", " + bad + "]}")
    assert fh.read_history(run_dir, 0) == [fh.Failure(100.0, "worker-1", 137)]


def test_a_damaged_history_does_not_stop_the_requeue(tmp_path, monkeypatch) -> None:
    """`{"code": Infinity}` in the task's own file raised OverflowError inside the launcher's
    failure handling: the replica was not requeued."""
    env, run_dir = _run_dir(tmp_path)
    _plant(run_dir, 1, [])
    (fh.failures_dir(run_dir) / "task-1.json").write_text(
        '{"failures": [{"t": 1, "node": "worker-1", "code": Infinity}]}')  # fmt: skip
    _slurm(monkeypatch)
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: "worker-1")
    plan = planlib.build_ft_plan(env, ROOT)
    ok, why, _ = preflight.after_failure(plan, -9, False, None, 0.0, lambda _: None)
    assert ok, why
    assert [f.code for f in fh.read_history(run_dir, 1)] == [137]


# ---- 2. records another user could have written ---------------------------------------------


def _three_for(host: str, now: float) -> list[object]:
    return [{**GOOD, "t": now - 60.0 * i, "node": host} for i in range(1, 4)]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_records_of_another_user_drain_no_node(tmp_path, monkeypatch) -> None:
    import time

    env, run_dir = _run_dir(tmp_path)
    path = _plant(run_dir, 0, _three_for("worker-1", time.time()))
    os.chown(path, 65534, 65534)
    monkeypatch.setattr(fh, "_SAID", set())
    fake = _slurm(monkeypatch)
    lines = _first_real_failure(monkeypatch, env)
    assert _drains(fake) == [], lines
    said = [x for x in lines if x.startswith("failure history: ignoring")]
    assert len(said) == 1 and "task-0.json: it belongs to uid 65534" in said[0]


@pytest.mark.parametrize("where", ["file", "folder"])
def test_records_others_can_write_drain_no_node_and_are_named_once(tmp_path, monkeypatch,
                                                                   where: str) -> None:  # fmt: skip
    import time

    env, run_dir = _run_dir(tmp_path)
    env["FT_NODE_MAX_FAILS"] = "3"  # the two real failures alone are not enough
    path = _plant(run_dir, 0, _three_for("worker-1", time.time()))
    (path if where == "file" else path.parent).chmod(0o666 if where == "file" else 0o777)
    monkeypatch.setattr(fh, "_SAID", set())
    fake = _slurm(monkeypatch)
    lines = _first_real_failure(monkeypatch, env)
    lines += _first_real_failure(monkeypatch, env)  # a second failure of this process
    assert _drains(fake) == [], lines
    said = [x for x in lines if x.startswith("failure history: ignoring")]
    assert len(said) == 1 and "other users can write it" in said[0], lines
    if where == "folder":  # nothing is written where it would not be trusted: the lifetime cap
        assert any("failure history not written" in x and "FT_MAX_REQUEUES" in x for x in lines)


def test_the_launchers_own_records_still_drain_a_bad_node(tmp_path, monkeypatch) -> None:
    env, _ = _run_dir(tmp_path)
    fake = _slurm(monkeypatch)
    _first_real_failure(monkeypatch, env)
    lines = _first_real_failure(monkeypatch, env)
    assert [c[2:4] for c in _drains(fake)] == [["NodeName=worker-1", "State=DRAIN"]], lines
    folder = fh.failures_dir(planlib.run_folder(env, ROOT))
    assert oct(folder.stat().st_mode & 0o777) == oct(0o755 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- the cost of what is read at a failure ---------------------------------------------------


def test_only_the_arrays_task_files_are_read(tmp_path, monkeypatch) -> None:
    """Files of tasks the array does not have (task-2 .. in an array of 2) are not read."""
    import time

    env, run_dir = _run_dir(tmp_path)
    for task in range(2, 40):
        _plant(run_dir, task, _three_for("worker-1", time.time()))
    fake = _slurm(monkeypatch)
    lines = _first_real_failure(monkeypatch, env)
    assert _drains(fake) == [], lines


def test_without_the_arrays_size_the_files_read_are_capped(tmp_path, monkeypatch) -> None:
    _, run_dir = _run_dir(tmp_path)
    monkeypatch.setattr(fh, "MAX_TASK_FILES", 5)
    for task in range(12):
        _plant(run_dir, task, [GOOD])
    assert len(fh.all_failures(run_dir)) == 5
    assert fh.node_failures(run_dir, 100.0, 60.0)["worker-1"] == 5


def test_histories_are_read_one_file_at_a_time(tmp_path: Path) -> None:
    """Each failure counts the array's records: a file's records are dropped once counted
    (the old reader held every file's at once: 539 MB for 10,000 planted files)."""
    _, run_dir = _run_dir(tmp_path)
    records = [{**GOOD, "detail": "x" * 500} for _ in range(fh.MAX_RECORDS)]
    for task in range(150):
        _plant(run_dir, task, records)
    tracemalloc.start()
    try:
        counts = fh.node_failures(run_dir, 100.0, 60.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counts["worker-1"] == 150 * fh.MAX_RECORDS
    assert peak < 4 << 20, f"{peak / 2**20:.1f} MiB at the peak"
