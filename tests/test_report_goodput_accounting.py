"""Goodput that holds up, on recorded real runs (tests/fixtures/report): a heal's first commit
is healing, not training; no share leaves 0..1 and no text says "N of M" with N > M; logs
without commit lines give `n/a`, not 0%; the baseline is said (the run's own stretches, or a
control run); another run's events in the shared event log change nothing; a heal with no
failure before it is a start-up sync, counted apart; an unreadable log is said as one.

Where a test needs a run the fixtures do not hold whole (a failure-free control, a heal with
no failure in view, logs without `should_commit` lines), it cuts a recorded run: the lines of
a time window, or without one kind of line, as a shorter run or a log level would give.
Nothing here writes a log line of its own.
"""

from __future__ import annotations

import gzip
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from ftslurm.errors import UserError
from ftslurm.logvocab import parse_time
from ftslurm.report import build_report
from tests.clirun import invoke

FIX = Path(__file__).parent / "fixtures" / "report"
RUNS = sorted(p for p in FIX.iterdir() if p.is_dir())

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(60)]


def _ts(text: str) -> float:
    return (datetime.fromisoformat(text) - datetime(1970, 1, 1)).total_seconds()


def _lines(path: Path) -> list[bytes]:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    return raw.split(b"\n")


def _cut(src: Path, dst: Path, lo: str | None = None, hi: str | None = None,
         drop: bytes | None = None, logs_only: bool = True) -> Path:
    """A copy of run `src` in `dst` with, of each log, the lines whose time (an untimed line
    takes the time of the timed line before it) is in [lo, hi), without lines holding
    `drop`; the event log left out (`logs_only`)."""
    dst.mkdir(parents=True, exist_ok=True)
    t_lo = _ts(lo) if lo else float("-inf")
    t_hi = _ts(hi) if hi else float("inf")
    for f in sorted(src.iterdir()):
        if f.name.endswith(".jsonl"):
            if not logs_only:
                (dst / f.name).write_bytes(f.read_bytes())
            continue
        if not f.name.endswith((".out", ".out.gz", ".log", ".log.gz")):
            continue
        now: float | None = None
        kept = []
        for line in _lines(f):
            t = parse_time(line)
            now = t if t is not None else now
            if now is None or not t_lo <= now < t_hi:
                continue
            if drop is not None and drop in line:
                continue
            kept.append(line)
        (dst / f.name.removesuffix(".gz")).write_bytes(b"\n".join(kept) + b"\n")
    return dst


# ---------------------------------------------------------------- the heal is healing


def test_heal_first_commit_is_charged_to_healing():
    """tft-11: replica 1 healed twice (steps 5 and 11) and committed after each; those two
    first commits trained nothing of its own: 18 committed, 16 less the window's fencepost
    (both replicas' commits of quorum 1's step 0): 14 trained."""
    js = build_report(FIX / "slurm-tft-11").to_json()
    sm = js["summary"]
    assert [(r["step"], r["target_replica"]) for r in js["recoveries"]] == [(5, "1"), (11, "1")]
    assert sm["steps_committed"] == 18
    assert sm["heal_steps"] == 2 and sm["replica_steps_trained"] == 14
    assert sm["goodput"] == pytest.approx(14 / sm["replica_steps_ideal"], abs=1e-3)
    # the two steps are charged to healing: each one replica-step at the failure-free rate
    f_heal = sum(f["healing_s"] for f in js["failures"])
    window = 2 * sm["goodput_window_s"]
    assert sm["lost"]["healing"] == pytest.approx(
        (f_heal + 2 / sm["failure_free_step_rate"]) / window, abs=1e-4)


# ---------------------------------------------------------------- within 0..1, every run


_OF = re.compile(r"(\d+) (?:committed|trained) of ([\d.]+)")


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_no_share_leaves_0_1(run):
    rep = build_report(run)
    sm = rep.to_json()["summary"]
    for key in ("goodput", "step_ratio"):
        assert sm[key] is None or 0.0 <= sm[key] <= 1.0, (key, sm[key])
    for key, v in (sm["lost"] or {}).items():
        assert 0.0 <= v <= 1.0, (key, v)
    if sm["lost"] is not None:  # what is lost and what is kept add up, the excess said apart
        total = sm["goodput"] + sum(sm["lost"].values())
        assert total - sm["lost_overcount"] == pytest.approx(1.0, abs=2e-3)
    # detection + degraded + healing = failure -> full strength (the phases do not overlap)
    for f in rep.to_json()["failures"]:
        parts = (f["detection_s"], f["degraded_s"], f["healing_s"])
        if None not in parts and f["time_to_full_strength_s"] is not None:
            assert sum(parts) == pytest.approx(f["time_to_full_strength_s"], abs=2e-3)
    text = rep.to_text()
    for n, m in _OF.findall(text):
        assert int(n) <= float(m), (n, m)
    assert "% of replica-steps" not in text or re.search(r"goodput +\d+\.\d%", text)
    assert not re.search(r"-\d+\.\d%", text)  # no negative share printed


# ---------------------------------------------------------------- commits not readable


def test_no_commit_lines_say_na_not_zero(tmp_path):
    """cpu-run1 without its `should_commit` lines (a log level above INFO for them): the
    quorums advance 199 steps and no commit can be counted: n/a and why, not 0.0%."""
    run = _cut(FIX / "cpu-run1", tmp_path / "cpu-run1", drop=b"should_commit", logs_only=False)
    rep = build_report(run)
    sm = rep.to_json()["summary"]
    assert sm["goodput"] is None and sm["lost"] is None and sm["replica_steps_trained"] is None
    assert "should_commit" in sm["goodput_unavailable"]
    text = rep.to_text()
    line = next(x for x in text.splitlines() if x.startswith("  goodput "))
    assert line.startswith("  goodput           n/a (the replica logs hold 0 commit decisions")
    assert "0.0%" not in line


def test_guide_excerpt_says_na():
    """The guide's excerpt: one `should_commit=False` for 122 steps the quorums advanced."""
    rep = build_report(FIX / "guide")
    sm = rep.to_json()["summary"]
    assert sm["goodput"] is None and sm["step_ratio"] is None
    assert ("  goodput           n/a (the replica logs hold 1 commit decision (0 committed) "
            "for the 122 steps the quorums advanced") in rep.to_text()


# ---------------------------------------------------------------- the baseline


def test_baseline_self_is_said():
    sm = build_report(FIX / "slurm-tft-11").to_json()["summary"]
    b = sm["goodput_baseline"]
    assert b["source"] == "self" and b["stretches"] == 3 and b["seconds"] == 30.302


def test_baseline_control_run(tmp_path):
    """tft-11 against a failure-free control: tft-11's own logs before its first failure
    (quorum 1 of both replicas, 10:10:50.580 on), cut at 10:10:59."""
    ctrl = _cut(FIX / "slurm-tft-11", tmp_path / "tft-10", hi="2026-11-23T10:10:59")
    cjs = build_report(ctrl).to_json()["summary"]
    assert cjs["failures"] == 0 and cjs["failure_free_step_rate"]
    rep = build_report(FIX / "slurm-tft-11", baseline=ctrl)
    sm = rep.to_json()["summary"]
    b = sm["goodput_baseline"]
    assert b["source"] == "control" and b["run"] == str(ctrl) and b["group_size"] == 2
    assert sm["failure_free_step_rate"] == cjs["failure_free_step_rate"]
    ideal = 2 * cjs["failure_free_step_rate"] * sm["goodput_window_s"]
    assert sm["goodput"] == pytest.approx(min(1.0, 14 / ideal), abs=2e-3)
    assert f"    failure-free rate from the control run {ctrl} (1 full-strength" in rep.to_text()
    # the CLI: --baseline; a control with failures is refused in one line
    res = invoke("report", str(FIX / "slurm-tft-11"), "--baseline", str(ctrl), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["summary"]["goodput_baseline"]["source"] == "control"
    res = invoke("report", str(FIX / "cpu-run1"), "--baseline", str(FIX / "slurm-tft-11"))
    assert isinstance(res.exception, UserError)
    assert "not a failure-free run (2 failure(s) in its logs)" in str(res.exception)


# ---------------------------------------------------------------- the device in the cause


def test_negative_other_names_the_device():
    """tft-3 trained on CPU (`FTSLURM_DEVICE=cpu`, `CPU capacity: cpu`): the excess of the
    phases is put down to shared CPUs; cpu-run1's logs name no device: the text says so."""
    t3 = build_report(FIX / "slurm-3-replicas-tft-3")
    assert t3.to_json()["summary"]["device"] == "cpu"
    assert "as survivors do on CPUs they shared" in t3.to_text()
    assert "steps: 100.0% (capped)" in t3.to_text()  # 105.4% steps: not printed as such
    fd = build_report(FIX / "false-drop")
    sm = fd.to_json()["summary"]
    assert sm["device"] is None and sm["lost_overcount"] > 0
    assert "the logs do not name the device" in fd.to_text()
    assert "CPUs it shared" not in fd.to_text()


# ---------------------------------------------------------------- another run's events


def _copy(src: Path, dst: Path) -> Path:
    """The recorded run under its Slurm name (`tft-<job>`): the report then reads the shared
    event log too, as `ftslurm report outputs/torchft/tft-11` does."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _comparable(js: dict) -> dict:
    """A report's JSON less what says which files were read and how many lines."""
    return {k: v for k, v in js.items() if k not in ("parse", "files")}


def test_other_runs_events_leave_the_report_unchanged(tmp_path, monkeypatch):
    """tft-11 with the shared event log holding: a simulate-failure with no job 20 minutes
    after the run (on one of its nodes: the time alone rules it out), one of another job
    during it, one with no job an hour before it. The report is the same as without them,
    and lists the three with why."""
    run = _copy(FIX / "slurm-tft-11", tmp_path / "tft-11")
    alone = build_report(run).to_json()
    shared = tmp_path / "events.jsonl"
    lines = [
        {"time": "2026-11-23T09:10:00.000+00:00", "action": "kill", "replica": 1,
         "node": "worker-1", "job": None, "detail": "an hour before"},
        {"time": "2026-11-23T10:11:20.000+00:00", "action": "node-down", "replica": 0,
         "node": "worker-0", "job": "99", "detail": "another job"},
        {"time": "2026-11-23T10:33:00.000+00:00", "action": "node-down", "replica": None,
         "node": "worker-1", "job": None, "detail": "20 minutes after"},
    ]
    shared.write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv("FTSLURM_EVENTS", str(shared))
    rep = build_report(run)
    js = rep.to_json()
    assert str(shared) in js["files"]
    assert _comparable(js) == _comparable(alone)
    out = js["parse"]["events_left_out"]
    assert len(out) == 3
    whys = {e["time"]: e["why"] for e in out}
    assert whys["2026-11-23T10:11:20.000"] == "job 99, not the run's job 11"
    assert whys["2026-11-23T09:10:00.000"] == "no job, and before the run's first log line"
    assert whys["2026-11-23T10:33:00.000"] == "no job, and after the run's last log line"
    text = rep.to_text()
    assert "Left out: 3 event-log lines, not this run's:" in text
    assert ("  10:33:00.000  node-down on worker-1: no job, and after the run's last log line"
            in text)
    assert text.count("goodput           57.5%") == 1


def test_an_event_of_no_job_on_another_node_during_the_run_is_left_out(tmp_path, monkeypatch):
    """Inside the window but on a node where no replica of tft-11 was launched."""
    run = _copy(FIX / "slurm-tft-11", tmp_path / "tft-11")
    alone = build_report(run).to_json()
    shared = tmp_path / "events.jsonl"
    shared.write_text(json.dumps({
        "time": "2026-11-23T10:11:20.000+00:00", "action": "node-down", "replica": 1,
        "node": "worker-5", "job": None, "detail": "elsewhere"}) + "\n")
    monkeypatch.setenv("FTSLURM_EVENTS", str(shared))
    js = build_report(run).to_json()
    assert str(shared) in js["files"]
    assert _comparable(js) == _comparable(alone)
    [e] = js["parse"]["events_left_out"]
    assert e["why"] == "no job, and on worker-5, where no replica of the run was launched"


def test_the_runs_own_events_of_no_job_are_kept():
    """cpu-run1's event log names no job (a run by hand): its kill is still the failure's
    time (inside the run's window)."""
    js = build_report(FIX / "cpu-run1").to_json()
    assert js["failures"][0]["time_source"] == "injected"
    assert js["parse"]["events_left_out"] == []


# ---------------------------------------------------------------- start-up syncs


def test_a_heal_with_no_failure_before_it_is_a_startup_sync(tmp_path):
    """tft-11 from 10:11:02 to 10:11:50: replica 0 trains alone (quorum 2), replica 1's
    attempt 1 is launched, joins quorum 3 at step 5 and heals from replica 0. No failure is
    in these lines: that heal is a start-up sync (`after_failure: false`), not a recovery."""
    run = _cut(FIX / "slurm-tft-11", tmp_path / "tft-11", lo="2026-11-23T10:11:02",
               hi="2026-11-23T10:11:50")
    rep = build_report(run)
    js = rep.to_json()
    assert js["failures"] == []
    [r] = js["recoveries"]
    assert (r["step"], r["target_replica"], r["after_failure"]) == (5, "1", False)
    sm = js["summary"]
    assert sm["recoveries"] == 0 and sm["startup_syncs"] == 1
    assert sm["requeue_to_healed_s"] == []
    text = rep.to_text()
    assert "  recoveries        0\n" in text
    assert "  start-up syncs    1 (no failure before them" in text
    # the whole run: the same heal is after the node-down, a recovery
    whole = build_report(FIX / "slurm-tft-11").to_json()
    assert [r["after_failure"] for r in whole["recoveries"]] == [True, True]
    assert whole["summary"]["recoveries"] == 2 and whole["summary"]["startup_syncs"] == 0


# ---------------------------------------------------------------- unreadable logs


def test_unreadable_log_is_said_with_the_reason(tmp_path, monkeypatch):
    """A log this user may not read is not "Missing": the text says it is there and why it
    could not be read (root reads any file, so the refusal is the one open_log raises)."""
    run = _copy(FIX / "slurm-tft-11", tmp_path / "tft-11")
    from ftslurm.report import reader

    real = reader.open_log
    locked = run / "tft-11_1.out.gz"

    def open_log(path):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(reader, "open_log", open_log)
    rep = build_report(run)
    text = rep.to_text()
    assert f"Unreadable: {locked} (permission denied)" in text
    assert "Missing:" not in text
    assert rep.to_json()["parse"]["unreadable"] == [
        {"file": str(locked), "why": "permission denied"}]


# ---------------------------------------------------------------- a control and a spare run


def test_a_failure_free_run_scores_one():
    """The recorded control (one quorum, steps 0-35 on both replicas): 72 commits, of which
    both step-0 commits are the window's fencepost: 70 trained of 70 expected, ratio 1 (not
    the 72/70 = 1.03 the commits alone give)."""
    sm = build_report(FIX / "slurm-control-tft-6").to_json()["summary"]
    assert sm["failures"] == 0 and sm["steps_committed"] == 72
    assert sm["replica_steps_at_start"] == 2 and sm["replica_steps_trained"] == 70
    assert sm["goodput_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert sm["lost_overcount"] == 0.0


def test_spare_run_against_its_control_is_below_one():
    """The 1-spare run of the same round against the control: 5 failures, goodput < 1 (the
    spare's heals are healing steps; the window at the control's rate)."""
    spare = FIX / "slurm-spares-tft-3"
    js = build_report(spare, baseline=FIX / "slurm-control-tft-6").to_json()
    sm = js["summary"]
    assert sm["failures"] == 5 and sm["heal_steps"] == 5 and sm["recoveries"] == 5
    assert sm["goodput_baseline"]["source"] == "control"
    ctrl = build_report(FIX / "slurm-control-tft-6").to_json()["summary"]
    ideal = 2 * ctrl["failure_free_step_rate"] * sm["goodput_window_s"]
    assert sm["goodput"] == pytest.approx((40 - 5 - 2) / ideal, abs=2e-3)
    assert 0.6 < sm["goodput"] < 1.0
    # the 5th failure: the quorum whole again (the spare in) before replica 0's next commit:
    # detection ends there, no degraded time, and the phases add up to the whole
    f5 = js["failures"][4]
    assert f5["to_next_commit_s"] == pytest.approx(2.696, abs=1e-3)
    assert f5["degraded_s"] == 0.0
    assert (f5["detection_s"] + f5["degraded_s"] + f5["healing_s"]
            == pytest.approx(f5["time_to_full_strength_s"], abs=2e-3))
