"""Time to full strength, replica-step goodput and false quorum drops, on recorded real runs.

Every expected figure is read off the fixtures' log lines by hand (the lines are quoted in the
comments): a failure's detection ends at the survivors' next `should_commit=True`; its
degraded time at the next `Quorum!` with the group size; its healing at the failed slot's
first `should_commit=True` after `reconfiguring for quorum_id=` that quorum. The failure-free
rate is measured round to round over the full-strength quorums (docs/report.md, "Goodput").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftslurm.report import build_report
from ftslurm.report.goodput import full_strength_stretches, measure
from ftslurm.report.model import Failure, Quorum

FIX = Path(__file__).parent / "fixtures" / "report"

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(60)]


def _f(rep, i: int) -> dict:
    return rep.to_json()["failures"][i]


def test_tft_11_two_node_downs_time_to_full_strength_and_goodput():
    rep = build_report(FIX / "slurm-tft-11")
    js = rep.to_json()
    f1, f2 = js["failures"]
    # injected node-down 10:10:59.612; replica 0 `step 1] should_commit=True` at 10:11:04,600;
    # Quorum! 3 {0, 1} at 10:11:37.828; replica 1 `step 5] should_commit=True` 10:11:38,265
    assert f1["detection_s"] == pytest.approx(4.988, abs=1e-3)
    assert f1["degraded_s"] == pytest.approx(33.228, abs=1e-3)
    assert f1["healing_s"] == pytest.approx(0.437, abs=1e-3)
    assert f1["time_to_full_strength_s"] == pytest.approx(38.653, abs=1e-3)
    assert f1["full_strength_time"] == "2026-11-23T10:11:38.265"
    # node-down 10:11:53.795; replica 0 commits 10:11:58,965; Quorum! 5 at 10:12:42.201;
    # replica 1 `step 11] should_commit=True` at 10:12:42,921
    assert f2["detection_s"] == pytest.approx(5.170, abs=1e-3)
    assert f2["degraded_s"] == pytest.approx(43.236, abs=1e-3)
    assert f2["healing_s"] == pytest.approx(0.720, abs=1e-3)
    assert f2["time_to_full_strength_s"] == pytest.approx(49.126, abs=1e-3)
    assert not f1["false_drop"] and not f2["false_drop"]
    sm = js["summary"]
    assert sm["time_to_full_strength_s"] == [38.653, 49.126]
    assert sm["detection_s"] == [4.988, 5.17]
    assert sm["false_drops"] == 0
    # full strength, round to round: quorum 1 (10:10:50.580, step 0) to the failure (no round
    # of quorum 1 after its first) 1 step in 9.032 s; quorum 3's rounds 10:11:37.828 (step 5)
    # -> 10:11:47.822 (step 6) 9.994 s; quorum 5 10:12:42.201 (step 11) -> the last line
    # 10:12:53.477 (last commit `step 12`) 11.276 s: 3 steps / 30.302 s
    assert sm["failure_free_step_rate"] == pytest.approx(3 / 30.302, abs=1e-5)
    assert sm["goodput_window_s"] == pytest.approx(122.897, abs=1e-3)  # 10:10:50.580 -> end
    ideal = 2 * (3 / 30.302) * 122.897
    assert sm["steps_committed"] == 18  # unchanged: 13 + 5
    # the two heals' first commits (replica 1 at steps 5 and 11) are healing, not training,
    # and the window from quorum 1's round (step 0) holds the steps after it: both replicas'
    # commits of step 0 are its fencepost: 18 - 2 - 2 = 14 trained replica-steps
    assert sm["heal_steps"] == 2 and sm["replica_steps_at_start"] == 2
    assert sm["replica_steps_trained"] == 14
    assert sm["goodput"] == pytest.approx(14 / ideal, abs=1e-4)
    assert sm["goodput"] == pytest.approx(0.5753, abs=1e-4)
    assert sm["goodput_baseline"] == {"source": "self", "rate": round(3 / 30.302, 5),
                                      "stretches": 3, "seconds": 30.302, "run": None,
                                      "group_size": None}
    lost = sm["lost"]
    window = 2 * 122.897
    assert lost["detection"] == pytest.approx(2 * (4.988 + 5.170) / window, abs=1e-4)
    assert lost["degraded"] == pytest.approx((33.228 + 43.236) / window, abs=1e-4)
    # each heal's first commit: one replica-step at the failure-free rate (30.302 / 3 s)
    assert lost["healing"] == pytest.approx((0.437 + 0.720 + 2 * 30.302 / 3) / window,
                                            abs=1e-4)
    # the phases add up past what goodput leaves (the lone survivor stepped faster on the 2
    # shared cores): other stays 0, the excess is given apart
    assert lost["other"] == 0.0
    assert sm["goodput"] + sum(lost.values()) - 1.0 == pytest.approx(sm["lost_overcount"],
                                                                    abs=1e-3)
    assert sm["lost_overcount"] == pytest.approx(0.0560, abs=1e-4)
    assert sm["step_ratio"] == pytest.approx(12 / ((3 / 30.302) * 122.897), abs=1e-4)
    text = rep.to_text()
    assert ("    replica 1 failed 10:10:59.612: 38.65 s (4.99 s + 33.23 s + 0.44 s; full "
            "strength at 10:11:38.265)") in text
    assert ("  goodput           57.5% of replica-steps (14 trained of 24.3 expected at 0.099 "
            "steps/s x group 2 x 2 m 3 s); steps: 98.6%\n") in text
    assert ("    trained = 18 committed - 2 heal steps (a healed replica's first commit: its "
            "state came from a peer; charged to healing) - 2 of the first quorum's step (the "
            "window holds N steps between rounds, N + 1 commits)\n") in text
    assert ("    failure-free rate from this run's own 3 full-strength stretches (30.30 s)"
            in text)
    # the logs say the replicas trained on CPU (FTSLURM_DEVICE=cpu): the cause names CPUs
    assert sm["device"] == "cpu"
    assert ("    lost: detection 8.3%, degraded 31.1%, healing 8.7%, other 0.0%\n"
            "    the phases add up to 5.6% more than goodput leaves: replicas stepped faster "
            "than the full-strength rate, as survivors do on CPUs they shared with the failed "
            "replica; and the failure-free rate stands on 3 steps a replica, too few for the "
            "shares to add up (run longer, or give a failure-free control run: --baseline "
            "RUN)\n") in text
    assert "  false quorum drops 0" in text


def test_a_run_never_degraded_is_not_said_to_have_stepped_faster_alone():
    """README command 1's run (a warm spare: no survivor ever trained alone) over-adds its
    shares because its failure-free rate stands on 5 steps a replica, not because survivors
    stepped faster alone: the cause says which."""
    sm = build_report(FIX / "slurm-spares-demo-tft-1").to_json()["summary"]
    assert sm["lost"]["degraded"] == 0.0 and sm["lost_overcount"] > 0
    assert sm["lost_overcount_cause"].startswith("the failure-free rate stands on 5 steps a "
                                                 "replica, too few")  # fmt: skip
    assert "stepped faster" not in sm["lost_overcount_cause"]


def test_existing_figures_stay_the_same():
    """Goodput adds figures; the report's other figures stay as they are."""
    sm = build_report(FIX / "slurm-tft-11").to_json()["summary"]
    assert sm["failure_to_next_commit_s"] == [4.988, 5.17]
    assert sm["requeue_to_healed_s"] == [31.622, 40.088]
    assert sm["degraded_s"] == pytest.approx(33.257 + 43.330, abs=2e-3)
    assert sm["steps_attempted"] == 18 and sm["failures"] == 2 and sm["recoveries"] == 2


def test_cpu_run1_kill_and_restart():
    rep = build_report(FIX / "cpu-run1")
    f = _f(rep, 0)
    # kill 08:51:02.461 (event log); replica 0's first commit in quorum 2 08:51:07.703 (its
    # Rust `should_commit completed` gives the untimed Python line its time); Quorum! 3 {0, 1}
    # at 08:51:19.640; replica 1's first commit after `reconfiguring for quorum_id=3` 19.952
    assert f["detection_s"] == pytest.approx(5.242, abs=1e-3)
    assert f["degraded_s"] == pytest.approx(11.937, abs=1e-3)
    assert f["healing_s"] == pytest.approx(0.312, abs=1e-3)
    assert f["time_to_full_strength_s"] == pytest.approx(17.491, abs=1e-3)
    sm = rep.to_json()["summary"]
    # quorum 1's rounds 08:50:55.316 (step 0) -> 08:51:02.247 (step 21: quorum 2 is at 22 and
    # has no commit failures) and quorum 3 08:51:19.640 (step 59) -> 08:52:09.472 (step 199)
    rate = (21 + 140) / (6.931 + 49.832)
    assert sm["failure_free_step_rate"] == pytest.approx(rate, abs=1e-4)
    # 362 committed, less replica 1's first commit after its heal at step 59, less both
    # replicas' commits of quorum 1's step 0 (the window's fencepost)
    assert sm["heal_steps"] == 1 and sm["replica_steps_at_start"] == 2
    assert sm["goodput"] == pytest.approx(359 / (2 * rate * 74.156), abs=1e-4)
    assert sm["false_drops"] == 0


def test_three_replicas_goodput_is_capped_and_the_ratio_kept():
    """3 replicas on 2 cores: the 2 survivors step faster than 3 did. With the two heals'
    first commits charged to healing and the first quorum's step out (24 of 29 trained)
    goodput is under 1; the phases add
    up past what it leaves, and the excess is given apart (other stays within 0..1)."""
    rep = build_report(FIX / "slurm-3-replicas-tft-3")
    js = rep.to_json()
    f1, f2 = js["failures"]
    # replica 1 down 04:35:55.789, Quorum! 3 {0,1,2} 04:36:27.208, replica 1 commits 27.754
    assert f1["time_to_full_strength_s"] == pytest.approx(31.965, abs=1e-3)
    # replica 2 down 04:36:59.790, Quorum! 5 04:37:35.740, replica 2 commits 36.289
    assert f2["time_to_full_strength_s"] == pytest.approx(36.499, abs=1e-3)
    assert f2["survivor"] == "1" and f2["detection_s"] == pytest.approx(8.770, abs=1e-3)
    sm = js["summary"]
    assert sm["heal_steps"] == 2 and sm["replica_steps_trained"] == 24
    assert sm["goodput_ratio"] == sm["goodput"] == pytest.approx(0.8435, abs=1e-3)
    assert sm["lost"]["other"] == 0.0 and sm["lost_overcount"] > 0


def test_a_failure_never_healed_has_no_full_strength():
    """tft-8: replica 0 finished while replica 1 restarted: never whole again."""
    rep = build_report(FIX / "slurm-tft-8")
    f = _f(rep, 0)
    assert f["time_to_full_strength_s"] is None and f["full_quorum_time"] is None
    assert rep.to_json()["summary"]["time_to_full_strength_s"] == [None]
    assert "n/a (the group was not whole again in the logs)" in rep.to_text()


def test_no_commit_lines_no_goodput(tmp_path):
    """Only a Lighthouse log: nothing counts replica-steps, so no goodput (not 0)."""
    src = FIX / "guide" / "lighthouse.log"
    (tmp_path / "lighthouse.log").write_bytes(src.read_bytes())
    sm = build_report(tmp_path).to_json()["summary"]
    assert sm["goodput"] is None and sm["lost"] is None


def _q(qid: int, t: float, step: int, n: int, last: float | None = None,
       cf: dict[str, int] | None = None) -> Quorum:
    return Quorum(qid, t, step, [f"r_{i}:u{i}" for i in range(n)], cf or {}, last)


def test_stretches_round_to_round():
    """A survivor that failed to commit the step (commit failures in the next quorum): the
    last round's step is the next quorum's; otherwise the one before."""
    qs = [_q(1, 0.0, 0, 2), _q(2, 20.0, 10, 1, last=9.0, cf={"r_0:u0": 1}),
          _q(3, 30.0, 12, 2), _q(4, 50.0, 20, 1, last=40.0)]
    assert full_strength_stretches(qs, [], 2, 60.0, 25) == [(9.0, 10), (10.0, 7)]
    g = measure(qs, [], 2, 30, 60.0, 25)
    assert g is not None and g.rate == pytest.approx(17 / 19)
    assert g.window_s == 60.0 and g.ideal == pytest.approx(2 * 17 / 19 * 60)
    # without a last round (no Lighthouse log): to the failure before the next quorum
    qs2 = [_q(1, 0.0, 0, 2), _q(2, 20.0, 10, 1)]
    f = Failure(8.0, "r_1", "r_1:u1", 10, "kill", "injected")
    assert full_strength_stretches(qs2, [f], 2, 30.0, 15) == [(8.0, 10)]


def test_false_drop_recorded_live_replica():
    """A live replica stopped 2 s with a 500 ms heartbeat timeout (fixtures/report/false-drop):
    dropped from the quorum, back under the same uuid without a new process: a false drop."""
    rep = build_report(FIX / "false-drop")
    js = rep.to_json()
    assert [f["kind"] for f in js["failures"]] == ["left-quorum"]
    f = js["failures"][0]
    assert f["false_drop"] is True and f["time_source"] == "quorum-change"
    assert f["replica_id"] == "train_ddp_1:f97de914-980e-419b-909b-b4d9554e2b86"
    # Quorum! 2 18:03:52.382 -> replica 0 `step 32] should_commit=True` (Rust line 52.678)
    # -> Quorum! 3 18:03:54.054 -> replica 1 `step 37] should_commit=True` at 54.430
    assert f["detection_s"] == pytest.approx(0.296, abs=1e-3)
    assert f["degraded_s"] == pytest.approx(1.376, abs=1e-3)
    assert f["healing_s"] == pytest.approx(0.376, abs=1e-3)
    assert f["time_to_full_strength_s"] == pytest.approx(2.048, abs=1e-3)
    assert [a["attempt"] for a in js["attempts"] if a["replica"] == "1"] == [0]  # no restart
    assert js["summary"]["false_drops"] == 1
    assert "FALSE DROP: the same process came back" in rep.to_text()
    assert "  false quorum drops 1" in rep.to_text()


def test_a_restart_is_not_a_false_drop():
    """cpu-run1: replica 1 killed and started again (a new uuid): a real drop."""
    js = build_report(FIX / "cpu-run1").to_json()
    assert [f["false_drop"] for f in js["failures"]] == [False]
    assert js["summary"]["false_drops"] == 0
