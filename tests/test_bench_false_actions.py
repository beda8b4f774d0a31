"""bench/false_actions.py's counting, attribution, time-limit verdict and plan, on real lines.

The log excerpts in tests/fixtures/false_actions/ are copied unchanged from the bench's own
rehearsal on the local Slurm (README there): the watchdog ending a healthy worker, the restart
in place and the spare's claim that followed, a fenced replica, a spare whose run finished
exiting 1 and being drained and requeued, the rate rule, and a replica that finished on its
last step after USR1. The report's figures come from recorded runs (tests/fixtures/report)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "false_actions"
REPORTS = ROOT / "tests" / "fixtures" / "report"

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(60)]


def _load():
    spec = importlib.util.spec_from_file_location("bench_false_actions",
                                                  ROOT / "bench" / "false_actions.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


fa = _load()


def t(text: str) -> float:
    """A log time (`2026-11-29 00:51:45`) on the logs' clock, as logvocab reads it."""
    return fa._iso_time(text.replace(" ", "T"))


def kinds(scan) -> list[str]:
    return [a.kind for a in scan.actions]


# ---------------------------------------------------------------- the lines


def test_a_watchdog_kill_its_exit_and_restart_in_place_are_counted_at_their_times():
    s = fa.scan_log(FIX / "tft-1_1.kill.out")
    assert kinds(s) == ["watchdog_kills", "bad_exits", "restarts_in_place"]
    assert [a.time for a in s.actions] == [t("2026-11-29 00:51:45"), t("2026-11-29 00:51:46"),
                                           t("2026-11-29 00:51:46")]  # fmt: skip
    assert "no progress in its training step for 5 s" in s.actions[0].line
    # the replica that does not save logs that it does not: the save's time all the same
    assert s.saves == [t("2026-11-29 00:51:15.530")]
    # the banner of the restart in place (`launching spare (attempt 0, restart 1)`) is no claim
    assert "spare_claims" not in kinds(s)


def test_a_fenced_replica_counts_and_the_lines_after_the_runs_end_do_not():
    path = FIX / "tft-1_1.fenced.out"
    data = path.read_bytes()
    s = fa.scan_log(path)
    assert kinds(s) == ["bad_exits", "fenced", "bad_exits"]  # 75, the launcher's line, 143
    assert s.actions[1].line.startswith("fenced: slot 0 has a newer claim")
    end = data.index(b"[2026-11-29 00:53:27]  training worker exited with code 143")
    cut = fa.scan_log(path, end)  # the log's size when the bench cancelled the job
    assert kinds(cut) == ["bad_exits", "fenced"]
    # the worker's own `[ftslurm] fenced:` line is not counted (the launcher's is); an untimed
    # line takes the time of the timed line before it
    assert cut.actions[0].time == t("2026-11-29 00:53:11")


def test_a_spare_taking_a_slot_is_a_claim():
    s = fa.scan_log(FIX / "tft-1_2.claim.out")
    assert kinds(s) == ["spare_claims"]
    assert s.actions[0].time == t("2026-11-29 00:51:50")
    assert "taken from task 1" in s.actions[0].line


def test_a_spare_whose_run_finished_exits_1_and_is_drained_and_requeued():
    s = fa.scan_log(FIX / "tft-4_0.finished-spare.out")
    assert kinds(s) == ["bad_exits", "drains", "requeues"]
    # `not restarting in place: ...; requeueing` is the reason, the requeue is one action
    assert s.actions[2].line.startswith("requeueing 4_0: training exited with code 1")
    r = fa.scan_log(FIX / "tft-4_0.rate-rule.out")
    assert kinds(r) == ["bad_exits", "crash_loop_stops"]
    assert "rate rule" in r.actions[1].line


def test_a_replica_finishing_on_its_last_step_takes_no_action():
    s = fa.scan_log(FIX / "tft-4_1.last-step.out")
    assert s.actions == []  # `exited with code 0`, `not requeueing: training finished`
    assert s.saves == [t("2026-11-29 00:57:36.713")]


def test_the_benign_whys_and_the_shapes_the_code_writes():
    kind = lambda line: fa.line_kind(line, line.encode())  # noqa: E731
    assert kind("not requeueing: stopped by a signal from Slurm or the user; Slurm decides "
                "what is next") is None  # fmt: skip
    assert kind("not requeueing: lifetime rule: attempt 5 reached FT_MAX_REQUEUES=5") == \
        "crash_loop_stops"
    assert kind("[2026-11-29 00:58:03]  training worker exited with code 0") is None
    assert kind("[2026-11-29 00:58:03]  torchrun exited with code 1") == "bad_exits"
    assert kind("[ftslurm] peer watch: step failed at once: replica 1 lost") == \
        "peer_watch_aborts"
    assert kind("[ftslurm] peer watch: not committing: this process stood still") == \
        "refused_commits"
    assert kind("pre-flight: cpu failed; not training on worker-1 (exit code 3)") == \
        "preflight_refusals"
    assert kind("pre-flight: cpu passed on worker-1 (0.0 s)") is None
    time_limit = fa.logvocab.time_limit_line("4_0", None)
    assert kind(f"[2026-11-29 00:58:03]  {time_limit}") == "requeues"


# ---------------------------------------------------------------- the report's figures


def test_the_reports_false_drop_and_failed_commit_are_actions(tmp_path):
    from ftslurm.report import build_report

    drop = build_report(str(REPORTS / "false-drop")).to_json()
    got = fa.report_actions(drop, "false-drop")
    assert [a.kind for a in got] == ["false_drops"]
    assert got[0].time == t("2026-11-25 18:03:52.382")
    assert fa.report_actions(drop, "x", cut=got[0].time) == []  # after the run's end: not
    guide = build_report(str(REPORTS / "guide")).to_json()
    assert "failed_commits" in [a.kind for a in fa.report_actions(guide, "guide")]
    control = build_report(str(REPORTS / "slurm-control-tft-6")).to_json()
    assert fa.report_actions(control, "control") == []


def test_the_rehearsals_false_drops_before_the_runs_end():
    """The report of the rehearsal's main job (tft-7, its failures and failed commits as the
    report gave them): 4 false drops after Lighthouse pauses, 2 restarts of a replica id."""
    rep = json.loads((FIX / "report-tft-7.json").read_text())
    got = fa.report_actions(rep, "tft-7")
    assert fa.tally(got)["false_drops"] == 4 and fa.tally(got)["report_failures"] == 2
    assert got[0].line == "report: replica 1 left-quorum at step 3 (quorum 2)"
    early = fa.report_actions(rep, "tft-7", cut=t("2026-11-29 01:07:00"))
    assert (fa.tally(early)["false_drops"], fa.tally(early)["report_failures"]) == (3, 1)


# ---------------------------------------------------------------- attribution


def test_a_claim_right_after_a_lighthouse_pause_is_the_pauses():
    """The spare took slot 1 the second the paused Lighthouse (SIGSTOP at 01:05:45, 3 s)
    answered again, its holder's heartbeat listed as old; a hostile request 15 s before is
    outside the rogue client's short window."""
    claim = fa.scan_log(FIX / "tft-7_2.claim-after-pause.out").actions
    assert [a.kind for a in claim] == ["spare_claims"]
    events = [fa.Event("rogue-client", t("2026-11-29 01:05:33")),
              fa.Event("lighthouse-pause", t("2026-11-29 01:05:45"))]  # fmt: skip
    assert fa.attribute(claim[0], events, 60, "busy") == ["lighthouse-pause"]
    events.append(fa.Event("rogue-client", t("2026-11-29 01:05:43")))
    assert fa.attribute(claim[0], events, 60, "busy") == ["lighthouse-pause", "rogue-client"]



def test_an_action_is_each_disturbances_whose_event_came_within_the_window():
    kill = fa.scan_log(FIX / "tft-1_1.kill.out").actions[0]  # 00:51:45
    events = [fa.Event("lighthouse-pause", t("2026-11-29 00:51:07")),
              fa.Event("slow-save", t("2026-11-29 00:51:15.530")),
              fa.Event("lighthouse-restart", t("2026-11-29 00:52:07"))]  # fmt: skip
    assert fa.attribute(kill, events, 60, "busy") == ["lighthouse-pause", "slow-save"]
    assert fa.attribute(kill, events, 30, "busy") == ["slow-save"]
    assert fa.attribute(kill, events, 10, "busy") == ["busy"]  # the background
    assert fa.attribute(kill, events, 10, None) == ["none"]
    untimed = fa.Action("fenced", None, "x", "")
    assert fa.attribute(untimed, events, 60, "busy") == ["unknown time"]
    per = fa.by_disturbance([kill], events, 60, "busy")
    assert per == {"lighthouse-pause": {"watchdog_kills": 1}, "slow-save": {"watchdog_kills": 1}}


def test_the_tally_and_the_verdict_lines():
    actions = fa.scan_log(FIX / "tft-4_0.finished-spare.out").actions
    n = fa.tally(actions)
    assert list(n) == list(fa.KINDS)
    assert (n["bad_exits"], n["drains"], n["requeues"], n["watchdog_kills"]) == (1, 1, 1, 0)
    lines = fa.failed_lines(actions, "disturbed")
    assert lines[1].startswith("disturbed: drains / bad-node lines at 2026-11-29T00:58:03.000 "
                               "(tft-4_0.finished-spare.out): drained worker-0")  # fmt: skip


# ---------------------------------------------------------------- the time limit


def test_the_time_limit_job_finished_only_when_no_task_requeued():
    last = (FIX / "tft-4_1.last-step.out").read_bytes()
    spare = (FIX / "tft-4_0.finished-spare.out").read_bytes()
    ok = fa.time_limit_outcome({1: last}, [1], True, {1: "COMPLETED"})
    assert ok["state"] == "FINISHED"
    assert ok["said_finished_at_signal"] == [1] and ok["training_completed"] == [1]
    assert ok["exit_codes"] == {"1": [0]}
    assert fa.time_limit_outcome({1: last, 0: spare}, [1], True)["state"] == "REQUEUED"
    assert fa.time_limit_outcome({1: last}, [1], False)["state"] == "UNFINISHED"
    assert fa.time_limit_outcome({1: last}, [1], True, {1: "PENDING"})["state"] == "UNFINISHED"
    # a replica that did not say the signal came on its last step: not shown FINISHED
    assert fa.time_limit_outcome({1: last.replace(b"time-limit signal came", b"x")}, [1],
                                 True)["state"] == "UNFINISHED"  # fmt: skip


# ---------------------------------------------------------------- the plan


def test_the_plan_of_a_short_rehearsal():
    plan = fa.make_plan(fa.parse_args(["--minutes", "3", "--pause-every-s", "40",
                                       "--no-control"]))  # fmt: skip
    assert plan.pauses() == [40, 80, 120, 160]
    assert plan.restart_at() == 100  # half-way between the pauses around the middle
    assert plan.schedule()[2] == (100, "lighthouse-restart")
    assert plan.checkpoint_interval == 12 and plan.arms() == ["disturbed"]
    assert plan.job_env("--x=1") == {"FTSLURM_EMULATE_SAVE_S": "20",
                                     "FTSLURM_EXTRA_ARGS": "--checkpoint.interval=12 --x=1"}
    text = "\n".join(fa.plan_lines(plan))
    assert "FTSLURM_EMULATE_SAVE_S=20 FTSLURM_EXTRA_ARGS=--checkpoint.interval=12 ftslurm " \
           "submit --spares 1 --array=0-2" in text
    assert "SIGSTOP 3 s at +40, 80, 120, 160 s (4 pauses)" in text
    assert "`scancel --signal=USR1 --batch <job>_<task>`" in text
    assert "STEPS=12" in text and "logged step 11" in text
    assert fa.demo._replica_env.__name__ == "_replica_env"  # put back after the plan


def test_the_default_plan_and_its_arms():
    plan = fa.make_plan(fa.parse_args([]))
    assert plan.minutes == 30 and plan.disturb == fa.DISTURBANCES
    assert len(plan.pauses()) == 14 and plan.restart_at() == 900
    assert plan.checkpoint_interval == 120 and plan.arms() == ["disturbed", "control"]
    assert fa.make_plan(fa.parse_args(["--control-first"])).arms() == ["control", "disturbed"]
    quiet = fa.make_plan(fa.parse_args(["--disturb", "busy,rogue-client"]))
    assert quiet.schedule() == [] and quiet.job_env() == {}


def test_dry_run_prints_the_plan_and_a_bad_option_is_one_line(capsys):
    assert fa.main(["--dry-run", "--json", "--minutes", "3"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan[0].startswith("2 replicas + 1 warm spare")
    assert fa.main(["--dry-run", "--disturb", "busy,earthquake"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: --disturb: unknown 'earthquake'; any of busy, "
                           "lighthouse-pause, lighthouse-restart, slow-save, rogue-client, "
                           "time-limit")  # fmt: skip
    assert fa.main(["--dry-run", "--pause-s", "5", "--pause-every-s", "4"]) == 2
