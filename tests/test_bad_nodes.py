"""The requeue cap by rate (FT_MAX_FAILS within FT_FAIL_WINDOW_MIN) and the failure history that
survives requeues (ftslurm/replica/launcher/failure_history.py); no processes, no Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import failure_history as fh
from ftslurm.replica.launcher import preflight

pytestmark = pytest.mark.unit

ROOT = Path("/opt/ftslurm")
ENV = {"SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}
MIN = 60.0


def _plan(**env: str) -> planlib.Plan:
    return planlib.build_ft_plan({**ENV, **env}, ROOT)


def _run_dir(tmp_path: Path) -> tuple[dict[str, str], Path]:
    env = {**ENV, "FTSLURM_OUTPUTS": str(tmp_path)}
    return env, planlib.run_folder(env, ROOT)


def test_six_failures_spread_over_more_than_the_window_keep_coming_back(tmp_path: Path) -> None:
    """One failure every 10 minutes for an hour with the defaults (5 within 30 min): at most
    3 within any 30 minutes, so each one requeues, also past the old lifetime cap of 5."""
    env, run_dir = _run_dir(tmp_path)
    t0 = 1_800_000_000.0
    for i in range(6):
        now = t0 + i * 10 * MIN
        history = fh.record_failure(run_dir, 1, fh.Failure(now, "worker-1", 137))
        plan = _plan(SLURM_RESTART_COUNT=str(i), FTSLURM_OUTPUTS=str(tmp_path))
        ok, why = planlib.should_requeue(plan, -9, False, None, fh.counted(history), now)
        assert ok, (i, why)
    assert len(fh.read_history(run_dir, 1)) == 6  # the history survived every "requeue"
    assert plan.attempt == 5 and not plan.lifetime_cap


def test_k_failures_within_the_window_stop_with_the_rule_named(tmp_path: Path) -> None:
    env, run_dir = _run_dir(tmp_path)
    plan = _plan(FT_MAX_FAILS="3", FT_FAIL_WINDOW_MIN="10")
    t0 = 1_800_000_000.0
    decisions = []
    for i in range(3):
        history = fh.record_failure(run_dir, 1, fh.Failure(t0 + i * MIN, "w", 1))
        decisions.append(
            planlib.should_requeue(plan, 1, False, None, fh.counted(history), t0 + i * MIN)
        )
    assert [ok for ok, _ in decisions] == [True, True, False]
    why = decisions[-1][1]
    assert why.startswith("rate rule: 3 failures within FT_FAIL_WINDOW_MIN=10 minutes")
    assert "FT_MAX_FAILS=3" in why
    assert "failure 2 of FT_MAX_FAILS=3 within 10 minutes" in decisions[1][1]


def test_ft_max_requeues_caps_the_lifetime_only_when_set() -> None:
    unset = _plan(SLURM_RESTART_COUNT="50")
    assert planlib.should_requeue(unset, 1, False, None, [100.0], 100.0)[0] is True
    capped = _plan(SLURM_RESTART_COUNT="3", FT_MAX_REQUEUES="3")
    ok, why = planlib.should_requeue(capped, 1, False, None, [100.0], 100.0)
    assert not ok and why.startswith("lifetime rule: attempt 3 reached FT_MAX_REQUEUES=3")


def test_injected_failures_count_only_when_marked() -> None:
    history = [fh.Failure(float(t), "w", 137, injected=True) for t in range(10)]
    assert fh.counted(history) == []
    plan = _plan(FT_MAX_FAILS="2")
    assert planlib.should_requeue(plan, 1, False, None, fh.counted(history), 9.0)[0]


def test_history_is_bounded_and_a_damaged_file_is_no_history(tmp_path: Path) -> None:
    _, run_dir = _run_dir(tmp_path)
    for i in range(fh.MAX_RECORDS + 10):
        fh.record_failure(run_dir, 0, fh.Failure(float(i), "w", 1))
    kept = fh.read_history(run_dir, 0)
    assert len(kept) == fh.MAX_RECORDS and kept[0].t == 10.0
    path = fh.failures_dir(run_dir) / "task-0.json"
    assert path.stat().st_size < fh.MAX_FILE_BYTES
    path.write_text("{not json")
    assert fh.read_history(run_dir, 0) == []
    path.write_text(json.dumps({"failures": [{"t": "x"}, {"t": 5, "node": "a", "code": 1}]}))
    assert [f.t for f in fh.read_history(run_dir, 0)] == [5.0]


@pytest.mark.parametrize("minutes", ["0", "1441"])
def test_window_knob_bounds(minutes: str) -> None:
    from ftslurm.errors import UserError

    with pytest.raises(UserError, match="FT_FAIL_WINDOW_MIN"):
        _plan(FT_FAIL_WINDOW_MIN=minutes)


# ---- the launcher's decision after a failure: history, injected failures, node taken out ----

SINFO = (
    "worker-0|main*|allocated|(null)\nworker-1|main*|allocated|(null)\nworker-2|main*|idle|(null)\n"
)


def _slurm(monkeypatch: pytest.MonkeyPatch, sinfo: str = SINFO, update: object = ""):
    from fakeslurm import FakeSlurm

    from ftslurm.slurm import args

    fake = FakeSlurm().on(args.sinfo_rows_cmd(), sinfo).on(["scontrol", "update"], update)
    fake.on(args.show_job_cmd("42_1"), "JobId=7 ArrayJobId=42 ArrayTaskId=1 ExcNodeList=(null)\n")
    fake.on(["scontrol", "requeuehold"], "").on(["scontrol", "release"], "")
    fake.on(["scontrol", "requeue"], "")
    return fake.install(monkeypatch)


def _after(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], host: str, rc: int = -9,
           started: float = 0.0, preflight_evidence: str | None = None):  # fmt: skip
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: host)
    lines: list[str] = []
    plan = planlib.build_ft_plan(env, ROOT)
    out = preflight.after_failure(plan, rc, False, None, started, lines.append,
                                  preflight_evidence)  # fmt: skip
    return out, lines


def test_a_node_that_keeps_failing_is_drained_with_the_evidence(tmp_path, monkeypatch) -> None:
    env, run_dir = _run_dir(tmp_path)
    fake = _slurm(monkeypatch)
    (ok1, _, avoid1), _ = _after(monkeypatch, env, "worker-1")
    assert ok1 and avoid1 == [] and not [c for c in fake.calls if c[:2] == ["scontrol", "update"]]
    (ok2, why, avoid2), lines = _after(monkeypatch, env, "worker-1")
    assert ok2 and avoid2 == [], why  # drained: Slurm itself keeps the requeue away
    drains = [c for c in fake.calls if c[:2] == ["scontrol", "update"]]
    assert drains == [["scontrol", "update", "NodeName=worker-1", "State=DRAIN",
                       "Reason=ftslurm: 2 failures of this array's replicas within 30 min "
                       "(FT_NODE_MAX_FAILS=2; other nodes at most 0)"]]  # fmt: skip
    assert any("undo: sudo scontrol update NodeName=worker-1 State=RESUME" in x for x in lines)
    acts = preflight.read_actions(run_dir)
    assert [(a.node, a.action) for a in acts] == [("worker-1", "drain")]
    assert acts[0].undo() == "sudo scontrol update NodeName=worker-1 State=RESUME"


def test_a_failure_that_follows_the_replica_takes_no_node_out(tmp_path, monkeypatch) -> None:
    """A bug fails on every node alike: no node has more failures than the others."""
    env, _ = _run_dir(tmp_path)
    fake = _slurm(monkeypatch)
    for host in ("worker-0", "worker-1", "worker-0", "worker-1"):
        _after(monkeypatch, env, host)
    assert not [c for c in fake.calls if c[:2] == ["scontrol", "update"]]


def test_without_the_right_to_drain_the_requeue_avoids_the_node(tmp_path, monkeypatch) -> None:
    from ftslurm.runner import Completed
    from ftslurm.slurm import args

    env, run_dir = _run_dir(tmp_path)
    refused = Completed([], 1, "", "slurm_update error: Invalid user id")
    fake = _slurm(monkeypatch, update=refused)
    _after(monkeypatch, env, "worker-1")
    (ok, _, avoid), lines = _after(monkeypatch, env, "worker-1")
    assert ok and avoid == ["worker-1"]
    assert any("could not drain worker-1" in x for x in lines)
    fake.answers = [a for a in fake.answers if a[0][:2] != ["scontrol", "update"]]
    fake.on(["scontrol", "update"], "")
    fake.calls.clear()
    preflight.requeue(env, "42_1", avoid)
    assert fake.calls[1:] == [args.requeue_hold_cmd("42_1"),
                              args.exclude_nodes_cmd("42_1", ["worker-1"]),
                              args.release_cmd("42_1")]  # fmt: skip
    assert preflight.read_actions(run_dir)[-1].action == "avoid"


def test_the_last_node_is_never_taken_out_silently(tmp_path, monkeypatch) -> None:
    env, run_dir = _run_dir(tmp_path)
    only = "worker-0|main*|drained|(null)\nworker-1|main*|allocated|(null)\n"
    fake = _slurm(monkeypatch, sinfo=only)
    _after(monkeypatch, env, "worker-1")
    (ok, _, avoid), lines = _after(monkeypatch, env, "worker-1")
    assert ok and avoid == [] and not [c for c in fake.calls if c[:2] == ["scontrol", "update"]]
    assert any("WARNING: worker-1 is bad" in x and "LAST node" in x for x in lines)
    assert preflight.read_actions(run_dir)[-1].action == "kept"


@pytest.mark.parametrize("count_as_bad", [False, True])
@pytest.mark.parametrize("where", ["FTSLURM_EVENTS", "run folder"])
def test_an_injected_failure_counts_only_with_count_as_bad(tmp_path, monkeypatch, where: str,
                                                           count_as_bad: bool) -> None:  # fmt: skip
    """The event log is FTSLURM_EVENTS (simulate-failure's) or the run folder's (the demo's)."""
    from ftslurm.event_log import InjectedEvent, append_event, now_iso

    env, run_dir = _run_dir(tmp_path)
    log = run_dir / "events.jsonl"
    if where == "FTSLURM_EVENTS":
        env["FTSLURM_EVENTS"] = str(log := tmp_path / "events.jsonl")
    fake = _slurm(monkeypatch)
    for _ in range(2):
        append_event(InjectedEvent(now_iso(), "kill", 1, "worker-1", "42", "SIGKILL",
                                   count_as_bad), log)  # fmt: skip
        (_, _, _), lines = _after(monkeypatch, env, "worker-1", started=0.0)
        assert any("injected by simulate-failure" in x for x in lines)
    drained = [c for c in fake.calls if c[:2] == ["scontrol", "update"]]
    assert bool(drained) is count_as_bad
    assert [f.injected for f in fh.read_history(run_dir, 1)] == [not count_as_bad] * 2


def test_a_real_crash_long_after_an_injection_is_not_taken_for_it(tmp_path, monkeypatch) -> None:
    import time

    from ftslurm.event_log import InjectedEvent, append_event, now_iso

    env, run_dir = _run_dir(tmp_path)
    env["FTSLURM_EVENTS"] = str(tmp_path / "events.jsonl")
    _slurm(monkeypatch)
    append_event(InjectedEvent(now_iso(), "kill", 1, "worker-1", "42"), Path(env["FTSLURM_EVENTS"]))
    _after(monkeypatch, env, "worker-1", started=time.time() + 5)  # the next attempt's crash
    assert [f.injected for f in fh.read_history(run_dir, 1)] == [False]


def test_a_forced_preflight_failure_on_one_node(tmp_path, monkeypatch) -> None:
    env, run_dir = _run_dir(tmp_path)
    env["FTSLURM_PREFLIGHT_FAIL"] = "cpu@worker-0"
    env["DEVICE"] = "cpu"
    plan = planlib.build_ft_plan(env, ROOT)
    lines: list[str] = []
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: "worker-1")
    assert preflight.before_training(plan, lines.append) is None
    assert lines[-1].startswith("pre-flight: cpu passed on worker-1")
    monkeypatch.setattr(preflight.socket, "gethostname", lambda: "worker-0")
    code, evidence = preflight.before_training(plan, lines.append)
    assert code == preflight.PREFLIGHT_EXIT == 76
    assert evidence.startswith("pre-flight check cpu failed: check 'cpu' failed on purpose")
    assert fh.read_history(run_dir, 1)[-1].kind == "preflight"
    fake = _slurm(monkeypatch)
    (ok, _, _), _ = _after(monkeypatch, env, "worker-0", rc=code, preflight_evidence=evidence)
    assert ok  # requeued, elsewhere: the node is drained at once, on one failure
    assert [c[2:4] for c in fake.calls if c[:2] == ["scontrol", "update"]] == [
        ["NodeName=worker-0", "State=DRAIN"]
    ]
    assert len(fh.read_history(run_dir, 1)) == 1  # recorded once, not twice


def _completed(stdout: str, rc: int = 0):
    from ftslurm.runner import Completed

    return Completed([], rc, stdout, "")


def _smi(answers: dict[str, str]):
    """A runner.run stand-in answering nvidia-smi queries by their --query-gpu field list."""
    from ftslurm.runner import CommandError

    calls = []

    def run(cmd, timeout):
        calls.append(cmd)
        if cmd[0] != "nvidia-smi":
            return _completed("")
        query = next(a for a in cmd if a.startswith("--query-"))
        out = answers.get(query.split("=", 1)[1])
        if out is None:
            raise CommandError(cmd, 2, "Field is not a valid field to query.")
        return _completed(out)

    run.calls = calls  # type: ignore[attr-defined]
    return run


GOOD = {
    "index,pci.bus_id,ecc.errors.uncorrected.volatile.total": "0, 00:1A, 0\n1, 00:1B, 0\n",
    "index": "0\n",
    "gpu_bus_id,remapped_rows.pending,remapped_rows.failure": "00:1A, 0, 0\n00:1B, 0, 0",
}


@pytest.mark.parametrize("change, check", [
    ({}, None),
    ({"index,pci.bus_id,ecc.errors.uncorrected.volatile.total": "0, 00:1A, 0\n"}, "gpu-count"),
    ({"index,pci.bus_id,ecc.errors.uncorrected.volatile.total": "0, 00:1A, [N/A]\n1, b, 3\n"},
     "ecc"),
    ({"gpu_bus_id,remapped_rows.pending,remapped_rows.failure": "00:1A, 0, 0\n00:1B, 1, 0\n"},
     "ecc"),
    ({"gpu_bus_id,remapped_rows.pending,remapped_rows.failure": "00:1a, No, Yes\n"}, "ecc"),
    ({"gpu_bus_id,remapped_rows.pending,remapped_rows.failure": None}, None),  # an old driver
    ({"index": None}, "nvidia-smi"),
])  # fmt: skip
def test_gpu_checks(change: dict, check: str | None) -> None:
    run = _smi({k: v for k, v in {**GOOD, **change}.items() if v is not None})
    if check is None:
        assert preflight.gpu_checks(2, "python3", run) == list(preflight.GPU_CHECKS)
        assert run.calls[-1][:2] == ["python3", "-c"]  # the allocation on each GPU
    else:
        with pytest.raises(preflight.CheckFailed) as e:
            preflight.gpu_checks(2, "python3", run)
        assert e.value.check == check


# ---- visible: status, doctor -----------------------------------------------------------------


def test_sinfo_reasons_parse_and_doctor_lists_ftslurms_drains_with_the_undo() -> None:
    from ftslurm import doctor
    from ftslurm.slurm import parse

    text = ("worker-0|idle|Unknown|none\n"
            "worker-1|drained|2026-11-27T14:40:01|ftslurm: 2 failures | of this array\n"
            "worker-2|drained|2026-11-27T14:41:00|maintenance by the admins\n")  # fmt: skip
    reasons = parse.parse_sinfo_reasons(text)
    assert [(r.name, r.reason) for r in reasons] == [
        ("worker-0", ""), ("worker-1", "ftslurm: 2 failures | of this array"),
        ("worker-2", "maintenance by the admins")]  # fmt: skip
    check = doctor.check_drained(reasons)
    assert check is not None and check.status == doctor.WARN
    assert "worker-1 (drained since 2026-11-27T14:40:01): ftslurm: 2 failures" in check.detail
    assert "worker-2" not in check.detail  # an admin's drain is the admin's
    assert check.fix == ("once fixed, bring each back: sudo scontrol update NodeName=worker-1 "
                         "State=RESUME")  # fmt: skip
    assert doctor.check_drained(reasons[:1]) is None  # no row when none


def test_status_shows_the_nodes_a_run_took_out(tmp_path: Path) -> None:
    from ftslurm import status

    _, run_dir = _run_dir(tmp_path)
    act = preflight.NodeAction
    preflight.record_action(run_dir, act(1.8e9, "worker-1", "drain", "ftslurm: x\x1b[2J", "42", 1))
    preflight.record_action(run_dir, act(1.8e9, "worker-2", "avoid", "ftslurm: y", "42", 0))
    acts = preflight.read_actions(run_dir)
    lines = status.node_action_lines(acts)
    assert lines[0].startswith("nodes taken out of this run's way")
    assert "worker-1  drain  at " in lines[1] and "\x1b" not in lines[1]
    assert lines[1].endswith("(undo: sudo scontrol update NodeName=worker-1 State=RESUME)")
    assert "ExcNodeList=" in lines[2]
    out = status.node_actions_json(acts)
    assert out[0]["node"] == "worker-1" and out[0]["undo"].startswith("sudo scontrol")
    assert status.node_action_lines([]) == []


def test_slurm_argv_of_drain_and_avoid() -> None:
    from ftslurm.slurm import args

    assert args.node_update_cmd("w1", "DRAIN", "ftslurm: e") == [
        "scontrol", "update", "NodeName=w1", "State=DRAIN", "Reason=ftslurm: e"]  # fmt: skip
    assert args.exclude_nodes_cmd("4_1", ["a", "b"]) == [
        "scontrol", "update", "JobId=4_1", "ExcNodeList=a,b"]  # fmt: skip
    assert args.requeue_hold_cmd("4_1") == ["scontrol", "requeuehold", "4_1"]
    assert args.release_cmd("4_1") == ["scontrol", "release", "4_1"]


def test_report_shows_the_nodes_a_run_took_out(tmp_path: Path) -> None:
    import shutil

    from ftslurm.report import build_report

    run = tmp_path / "tft-8"
    shutil.copytree(Path(__file__).parent / "fixtures" / "report" / "slurm-tft-8", run)
    bare = build_report(run)
    assert bare.to_json()["bad_nodes"] == [] and "Nodes taken out" not in bare.to_text()
    preflight.record_action(run, preflight.NodeAction(1.8e9, "worker-1", "drain",
                                                      "ftslurm: 2 failures", "8", 1))  # fmt: skip
    rep = build_report(run)
    (b,) = rep.to_json()["bad_nodes"]
    assert (b["node"], b["action"], b["reason"]) == ("worker-1", "drain", "ftslurm: 2 failures")
    assert b["undo"] == "sudo scontrol update NodeName=worker-1 State=RESUME"
    assert b["time"].startswith("2027-01-15T")  # 1.8e9 s, ISO-8601 with the zone
    text = rep.to_text()
    assert "Nodes taken out (drained / avoided by the launchers):" in text
    assert "worker-1  drain  ftslurm: 2 failures  (undo: sudo scontrol update" in text
