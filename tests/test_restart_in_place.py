"""The launcher's restart in place (job.py, FT_MAX_RESTARTS), without processes: the banner it
writes and how readers take it, the node states it restarts on, and simulate-failure's wait
for a replica that comes back inside its allocation. The real path on the local Slurm:
tests/test_restart_in_place_slurm.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ftslurm import failure, failure_plan, knobs
from ftslurm import logvocab as L
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import job, lifecycle, preflight
from tests.test_failure import FakeArray, resolve

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]
ROOT = Path(__file__).resolve().parent.parent


def _plan(**env: str) -> planlib.Plan:
    base = {"DEVICE": "cpu", "FTSLURM_PRESET": "tiny", "SLURM_ARRAY_JOB_ID": "12",
            "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2",
            "SLURM_RESTART_COUNT": "2"}  # fmt: skip
    return planlib.build_ft_plan({**base, **env}, ROOT, ["torchrun"])


def test_the_banner_of_a_restart_in_place_keeps_the_attempt_and_adds_the_restart():
    plan = _plan()
    first = L.banner("2026-11-27 17:00:00", plan, "worker-1")
    again = L.banner("2026-11-27 17:00:09", plan, "worker-1", restart=1)
    assert first.endswith("launching replica 1 (attempt 2) on worker-1")
    assert again.endswith("launching replica 1 (attempt 2, restart 1) on worker-1")
    ev = L.parse_line(again.encode())
    assert (ev.kind, ev.replica, ev.rank, ev.restart, ev.node) == (L.LAUNCH, "1", 2, 1, "worker-1")
    assert L.parse_line(first.encode()).restart == 0
    m = L.last_banner((first + "\nstep: 3  loss: 1.0\n" + again + "\n").encode())
    assert m is not None and (m[1], m[2], m[3], m[4]) == (b"1", b"2", b"1", b"worker-1")


def test_a_slot_banner_of_a_restart_in_place_still_names_the_task_and_epoch():
    line = L.slot_banner("2026-11-27 17:00:00", 1, 0, "worker-2", 3, 4, taken_from=1, restart=2)
    assert "(attempt 0, restart 2) on worker-2 as task 3 (slot epoch 4, taken from task 1)" in line
    ev = L.parse_line(line.encode())
    assert (ev.replica, ev.rank, ev.restart) == ("1", 0, 2)
    assert ev.detail == "restart 2, task 3 epoch 4 taken from task 1"


@pytest.mark.parametrize("state, usable", [
    ("mixed", True), ("allocated", True), ("idle", True), ("mixed-", True),
    ("draining", False), ("drained", False), ("down*", False), ("mixed~", True),
    ("unknown", False), ("fail", False), ("reboot^", False),
])  # fmt: skip
def test_node_states_a_restart_in_place_trusts(state: str, usable: bool):
    assert preflight.state_usable(state) is usable


def test_the_knob_has_a_default_and_refuses_junk():
    assert knobs.get({}, "FT_MAX_RESTARTS") == knobs.KNOBS["FT_MAX_RESTARTS"].default > 0
    assert knobs.get({"FT_MAX_RESTARTS": "0"}, "FT_MAX_RESTARTS") == 0
    with pytest.raises(Exception, match="FT_MAX_RESTARTS"):
        knobs.get({"FT_MAX_RESTARTS": "-1"}, "FT_MAX_RESTARTS")


def _conclude(monkeypatch, plan: planlib.Plan, env: dict[str, str]) -> tuple[int, list[str]]:
    """The launcher's end of a crashed run (exit 137) through lifecycle.decide, the failure
    history saying requeue ("why"): its exit code and the tasks it requeued."""
    monkeypatch.setattr(preflight, "after_failure", lambda *a, **k: (True, "why", []))
    requeued: list[str] = []
    monkeypatch.setattr(preflight, "requeue", lambda e, target, avoid: requeued.append(target))
    env = {"SLURM_ARRAY_TASK_ID": "1", **env}
    return job._conclude(plan, env, lifecycle.Ended(137), 0.0), requeued


def test_no_restart_in_place_once_used_up_or_stopped(monkeypatch, capsys):
    plan = _plan(FT_MAX_RESTARTS="2")  # the cap is the plan's setting; the restart, the attempt's
    seen: list[str] = []
    monkeypatch.setattr(preflight, "node_state", lambda env, node: seen.append(node) or "mixed")
    env = {"SLURMD_NODENAME": "worker-1"}
    assert _conclude(monkeypatch, plan, {**env, job.RESTART_ENV: "1"}) == (
        job.RESTART_IN_PLACE, [])
    assert "restarting in place on worker-1 (mixed): why (restart 2 of FT_MAX_RESTARTS=2, " \
        "attempt 2)" in capsys.readouterr().out
    assert _conclude(monkeypatch, plan, {**env, job.RESTART_ENV: "2"}) == (137, ["12_1"])
    out = capsys.readouterr().out
    assert "restarts in place used up (2 of FT_MAX_RESTARTS=2)" in out
    assert "requeueing 12_1: why (attempt 2)" in out
    assert _conclude(monkeypatch, _plan(FT_MAX_RESTARTS="0"), env) == (137, ["12_1"])
    job.SIGNALS.stop(15)  # Slurm is ending the allocation
    try:
        assert _conclude(monkeypatch, plan, env) == (137, ["12_1"])
        assert job._run_attempt(plan, env) == 128 + 15  # nothing starts after the signal
    finally:
        job.SIGNALS.clear()
    assert seen == ["worker-1"]  # sinfo asked once: the only time it could restart in place


def test_a_node_slurm_cannot_vouch_for_is_not_restarted_on(monkeypatch, capsys):
    plan, env = _plan(), {"SLURMD_NODENAME": "worker-1"}
    for state, said in (("drained", "is drained"), (None, "is unknown to sinfo")):
        monkeypatch.setattr(preflight, "node_state", lambda e, n, s=state: s)
        assert _conclude(monkeypatch, plan, env) == (137, ["12_1"])
        assert f"not restarting in place: node worker-1 {said}" in capsys.readouterr().out


def test_wait_recovered_takes_a_restart_in_place(tmp_path: Path, monkeypatch):
    """The task stays RUNNING with the same Slurm restart count; its log gets a new banner."""
    FakeArray(monkeypatch)  # task 12_1 RUNNING on worker-1, restart count 0, as it stays
    log = tmp_path / "tft-12" / "tft-12_1.out"
    log.parent.mkdir()
    log.write_text("[2026-11-27 17:00:00]  launching replica 1 (attempt 0) on worker-1\n")
    plan = failure_plan.make_plan(
        "kill", resolve(replica=1), kill=failure_plan.KillSelection(True, (4242,), ("x",))
    )
    run = failure._Execution(plan, True, 5, lambda s: None, None, 0.01, log)

    def restarted() -> None:
        with open(log, "a") as f:
            f.write("[2026-11-27 17:00:03]  launching replica 1 (attempt 0, restart 1) on "
                    "worker-1\n")  # fmt: skip

    timer = threading.Timer(0.3, restarted)
    timer.start()
    try:
        run.recover()
    finally:
        timer.cancel()
    out = run.out.to_dict()
    assert (out["recovered"], out["restarted_in_place"], out["restarts"]) == (True, True, 0)
    assert out["new_node"] == "worker-1"
    assert [p.name for p in run.out.phases][0] == "task 12_1 restarted in place on worker-1"


REC = Path(__file__).parent / "fixtures" / "report" / "slurm-restart-in-place"


def test_the_report_of_a_recorded_run_counts_restarts_in_place_apart_from_requeues():
    """5 kills of replica 1: restarts in place 1-3, a Slurm requeue, then one more in place."""
    from ftslurm.report import build_report, render

    rep = build_report(str(REC))
    data = rep.to_json()
    s = data["summary"]
    assert (s["failures"], s["requeues"], s["restarts_in_place"], s["recoveries"]) == (5, 1, 4, 5)
    assert [(a["replica"], a["attempt"], a["restart_in_place"]) for a in data["attempts"]] == [
        ("0", 0, 0), ("1", 0, 0), ("1", 0, 1), ("1", 0, 2), ("1", 0, 3), ("1", 1, 0), ("1", 1, 1)]
    text = render.to_text(rep)
    assert "requeues          1 (and 4 restarts in place)" in text
    assert "replica 1 attempt 0 launched on worker-1 (restart 2)" in text
    # restart -> healed counted from the restart's own launch, as for a requeue
    waits = [r["requeue_to_healed_s"] for r in data["recoveries"]]
    assert [w is not None for w in waits] == [True] * 5, waits
    assert "5.27 s after the launch at 17:36:29.000" in text


def test_a_time_limit_signal_before_the_attempt_is_kept_and_stops_restarts(monkeypatch, capsys):
    """USR1 during the pre-flight check no longer ends the launcher (its default action): it is
    noted, the next training saves and stops, and nothing restarts in place after it."""
    import os
    import signal

    old = signal.getsignal(signal.SIGUSR1)
    try:
        job.catch_early_time_limit()
        os.kill(os.getpid(), signal.SIGUSR1)  # still alive: the handler took it
        assert job.SIGNALS.time_limit and job.SIGNALS.stopped is None
        monkeypatch.setattr(preflight, "node_state", lambda env, node: "mixed")
        assert _conclude(monkeypatch, _plan(), {"SLURMD_NODENAME": "worker-1"}) == (
            137, ["12_1"])
        assert "time-limit signal came" in capsys.readouterr().out
    finally:
        signal.signal(signal.SIGUSR1, old)
        job.SIGNALS.clear()
