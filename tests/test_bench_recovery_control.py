"""bench/recovery.py against a control: the arms' order, goodput against the control of each
round (median and spread per arm), the figures per failure mode, the failure mode handed to
the demo. The demo is replaced by recorded runs: tft-11 (2 node-downs) for every failure arm,
and tft-11's lines before its first failure as the failure-free control."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
from pathlib import Path

import pytest

from ftslurm.demo import DemoConfig
from ftslurm.report import build_report
from tests.test_bench_recovery import _load

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "report"

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(120)]




def _control(tmp_path: Path) -> Path:
    from tests.test_report_goodput_accounting import _cut

    return _cut(FIX / "slurm-tft-11", tmp_path / "ctrl" / "tft-10", hi="2026-11-23T10:10:59")


def test_schedule_rotates_and_runs_the_control_last_in_round_one():
    rec = _load("recovery")
    assert rec.schedule(["spares0", "spares1"], 3, True) == [
        ["spares0", "spares1", "control"],
        ["spares1", "control", "spares0"],
        ["control", "spares0", "spares1"],
    ]
    assert rec.schedule(["spares1"], 2, False) == [["spares1"], ["spares1"]]


def test_compare_goodput_against_the_control(tmp_path):
    rec = _load("recovery")
    ctrl = _control(tmp_path)
    seen: list[DemoConfig] = []

    def fake_run(cfg, say):
        seen.append(cfg)
        return ctrl if cfg.failures == 0 else FIX / "slurm-tft-11"

    a = argparse.Namespace(backend="slurm", replicas=2, failures=2, spares_list=[0, 1],
                           modes=[], control=True, repeats=2, heartbeat_timeout_ms=None)
    out = io.StringIO()
    res = rec.compare(a, tmp_path / "out", out=out, run=fake_run)
    assert res["order"] == [["spares0", "spares1", "control"],
                            ["spares1", "control", "spares0"]]
    # the control: no failures, no spares, as long as the longest failure run (its window)
    controls = [c for c in seen if c.failures == 0]
    assert len(controls) == 2 and all(c.spares == 0 for c in controls)
    window = build_report(FIX / "slurm-tft-11").to_json()["summary"]["goodput_window_s"]
    assert all(c.min_run_s == pytest.approx(window) for c in controls)
    assert sorted(c.spares for c in seen if c.failures) == [0, 0, 1, 1]
    # goodput against the control: 14 trained / (2 x the control's rate x the run's window)
    rate = build_report(ctrl).to_json()["summary"]["failure_free_step_rate"]
    want = round(min(1.0, 14 / (2 * rate * window)), 4)
    for arm in ("spares0", "spares1"):
        g = res["arms"][arm]["goodput"]
        assert g["values"] == [want, want] and g["median"] == want
        assert g["spread"] == [want, want] and g["n"] == 2
        assert res["arms"][arm]["goodput_against"] == "control"
        assert res["arms"][arm]["goodput_below_1_when_failed"] is True
        for run in res["arms"][arm]["runs"]:
            assert run["goodput_baseline"]["source"] == "control"
            assert run["goodput_baseline"]["run"] == str(ctrl)
    assert 0 < want < 1
    assert res["arms"]["control"]["failure_free_step_rate"]["median"] == round(rate, 4)
    assert res["modes"]["default"]["median_full_strength_s"] == pytest.approx(
        (38.653 + 49.126) / 2, abs=1e-3)
    assert "per arm: goodput median" in out.getvalue()


def test_modes_are_handed_to_the_demo_and_reported_per_mode(tmp_path):
    rec = _load("recovery")
    seen: list[DemoConfig] = []

    def fake_run(cfg, say):
        seen.append(cfg)
        return FIX / "slurm-tft-11"

    a = argparse.Namespace(backend="slurm", replicas=2, failures=2, spares_list=[1],
                           modes=["node-down", "kill"], control=False, repeats=1,
                           heartbeat_timeout_ms=None)
    res = rec.compare(a, tmp_path / "out", out=io.StringIO(), run=fake_run)
    assert set(res["modes"]) == {"node-down", "kill"}
    for m in ("node-down", "kill"):
        assert res["modes"][m]["median_detection_s"] == pytest.approx((4.988 + 5.17) / 2,
                                                                      abs=1e-3)
        assert res["modes"][m]["median_full_strength_s"] is not None
        assert res["modes"][m]["runs"] == 1
    has_field = "failure_mode" in {f.name for f in dataclasses.fields(DemoConfig)}
    got = [c.failure_mode if has_field else c.modes for c in seen]  # type: ignore[attr-defined]
    assert got == (["node-down", "kill"] if has_field else [("node-down",), ("kill",)])
    # without a mode the demo's own (no failure_mode, no modes handed over)
    cfg = rec.demo_config("slurm", 2, tmp_path, 2, 0)
    assert cfg.modes == () and cfg.min_run_s == 0.0


def test_a_mode_the_demo_does_not_know_is_refused_before_running(tmp_path):
    rec = _load("recovery")
    if "failure_mode" in {f.name for f in dataclasses.fields(DemoConfig)}:
        pytest.skip("the demo has failure_mode: it validates the mode itself")
    with pytest.raises(SystemExit, match="no such failure mode"):
        rec.demo_config("slurm", 2, tmp_path, 2, 0, mode="melt")


def test_soak_control_arms_against_the_control(tmp_path):
    """bench/soak.py --backend slurm --spares 0,1 --control --repeats 2, the demo replaced."""
    soak = _load("soak")
    ctrl = _control(tmp_path)
    run = tmp_path / "tft-11"
    run.mkdir()
    import gzip

    for f in (FIX / "slurm-tft-11").iterdir():  # the soak reads its replica logs as text
        data = f.read_bytes()
        name = f.name
        if name.endswith(".gz"):
            data, name = gzip.decompress(data), name.removesuffix(".gz")
        (run / name).write_bytes(data)
    seen: list[DemoConfig] = []

    def fake_run(cfg, say):
        seen.append(cfg)
        return ctrl if cfg.failures == 0 else run

    a = argparse.Namespace(replicas=2, count=2, down_for=2.0, spares="0,1", modes="",
                           every=60.0, heartbeat_timeout_ms=None, control=True, repeats=2)
    res = soak.control_arms(a, tmp_path / "out", run=fake_run)
    assert res["order"] == [["spares0", "spares1", "control"],
                            ["spares1", "control", "spares0"]]
    assert [c.spares for c in seen if c.failures] == [0, 1, 1, 0]
    window = build_report(run).to_json()["summary"]["goodput_window_s"]
    assert [c.min_run_s for c in seen if not c.failures] == [pytest.approx(window)] * 2
    seen.clear()  # --control-s: the control as long as asked, not as the soak
    soak.control_arms(argparse.Namespace(**{**vars(a), "repeats": 1, "control_s": 600.0}),
                      tmp_path / "out2", run=fake_run)  # fmt: skip
    assert [c.min_run_s for c in seen if not c.failures] == [600.0]
    rate = build_report(ctrl).to_json()["summary"]["failure_free_step_rate"]
    want = round(min(1.0, 14 / (2 * rate * window)), 4)
    for arm in ("spares0", "spares1"):
        assert res["arms"][arm]["goodput"]["values"] == [want, want]
        assert res["arms"][arm]["goodput_against"] == "control"
        for r in res["arms"][arm]["runs"]:
            assert r["report"]["goodput_baseline"]["source"] == "control"
            assert r["report_self"]["goodput_baseline"]["source"] == "self"


def test_reread_a_kept_bench(tmp_path):
    """--reread DIR: the runs a kept bench made, read again with this checkout's report.
    The recorded round-1 pair of the 2026-11-27 bench: the 1-spare run and its control."""
    rec = _load("recovery")
    import shutil

    shutil.copytree(FIX / "slurm-spares-tft-3", tmp_path / "round1-spares1" / "torchft" / "tft-3")
    shutil.copytree(FIX / "slurm-control-tft-6",
                    tmp_path / "round1-control" / "torchft" / "tft-6")
    a = argparse.Namespace(backend="slurm", replicas=2, failures=5, spares_list=[1],
                           modes=[], control=True, repeats=1, heartbeat_timeout_ms=None)
    res = rec.compare(a, tmp_path, out=io.StringIO(), run=rec.kept_run)
    want = build_report(FIX / "slurm-spares-tft-3",
                        baseline=FIX / "slurm-control-tft-6").to_json()["summary"]["goodput"]
    g = res["arms"]["spares1"]["goodput"]
    assert g["values"] == [want] and 0 < want < 1
    assert res["arms"]["spares1"]["goodput_below_1_when_failed"] is True
    assert res["arms"]["spares1"]["failures"] == [5]


def test_restart_arms_set_ft_max_restarts_for_each_run_and_ranks_reach_the_demo(tmp_path,
                                                                                monkeypatch):
    rec = _load("recovery")
    monkeypatch.delenv("FT_MAX_RESTARTS", raising=False)
    seen: list[tuple[str | None, int]] = []

    def fake_run(cfg, say):
        seen.append((os.environ.get("FT_MAX_RESTARTS"), cfg.ranks))
        return FIX / "slurm-tft-11"

    a = argparse.Namespace(backend="slurm", replicas=2, failures=2, spares_list=[0],
                           modes=["kill"], control=False, repeats=2, restarts_list=[0, 3],
                           ranks=2, heartbeat_timeout_ms=None)  # fmt: skip
    res = rec.compare(a, tmp_path / "out", out=io.StringIO(), run=fake_run)
    assert res["order"] == [["spares0-restarts0-kill", "spares0-restarts3-kill"],
                            ["spares0-restarts3-kill", "spares0-restarts0-kill"]]
    assert seen == [("0", 2), ("3", 2), ("3", 2), ("0", 2)]  # alternated, each run its own
    assert [res["arms"][n]["max_restarts"] for n in res["arms"]] == [0, 3]
    assert (res["restarts"], res["ranks"]) == ([0, 3], 2)
    assert "FT_MAX_RESTARTS" not in os.environ  # put back after every run


def test_one_arm_per_interpreter_with_its_python_and_figures_per_stack(tmp_path):
    """--python: every arm once per interpreter, alternated in each round, the demo's jobs
    run by that interpreter (FTSLURM_PYTHON), the figures per stack."""
    rec = _load("recovery")
    seen: list[str | None] = []

    def fake_run(cfg, say):
        seen.append(os.environ.get("FTSLURM_PYTHON"))
        return FIX / "slurm-tft-11"

    pythons = {"torchtitan-0.2": "/py/old", "torchtitan-0.3": "/py/new"}
    a = argparse.Namespace(backend="slurm", replicas=2, failures=2, spares_list=[0],
                           modes=["kill"], control=False, repeats=2, heartbeat_timeout_ms=None,
                           pythons=pythons)  # fmt: skip
    before = os.environ.get("FTSLURM_PYTHON")
    res = rec.compare(a, tmp_path / "out", out=io.StringIO(), run=fake_run)
    assert res["order"] == [["spares0-kill-torchtitan-0.2", "spares0-kill-torchtitan-0.3"],
                            ["spares0-kill-torchtitan-0.3", "spares0-kill-torchtitan-0.2"]]
    assert seen == ["/py/old", "/py/new", "/py/new", "/py/old"]
    assert os.environ.get("FTSLURM_PYTHON") == before
    full = res["modes"]["kill"]["full_strength_s"]
    for stack, python in pythons.items():
        got = res["stacks"][stack]
        assert got["python"] == python
        assert got["modes"]["kill"]["full_strength_s"]["n"] == len(full) // 2
        assert res["arms"][f"spares0-kill-{stack}"]["stack"] == stack
