"""bench/recovery.py's figures come from the report: its `measure` on a recorded run (the
demo replaced by the fixture's run dir), the JSON keys of its result (full strength, detection,
goodput, step ratio), the spares and the heartbeat timeout passed to the demo."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "report"

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(60)]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recovery_measure_reads_the_report(tmp_path, monkeypatch):
    rec = _load("recovery")
    seen = {}

    def fake_demo(cfg, say):
        seen["cfg"] = cfg
        cfg.measured.append({"failure": 1, "spares": 1, "mode": "node-down",
                             "full_strength_s": 9.5})  # fmt: skip
        return FIX / "slurm-tft-11"

    monkeypatch.setattr(rec, "run_demo", fake_demo)
    out = io.StringIO()
    res = rec.measure("slurm", 2, tmp_path, replicas=2, spares=1, out=out,
                      heartbeat_timeout_ms=2000)  # fmt: skip
    cfg = seen["cfg"]
    assert (cfg.spares, cfg.tasks, cfg.failures, cfg.heartbeat_timeout_ms) == (1, 3, 2, 2000)
    assert res["demo_full_strength_s"] == [9.5] and res["heartbeat_timeout_ms"] == 2000
    assert res["spares"] == 1 and res["failures"] == 2
    assert res["full_strength_s"] == [38.653, 49.126]
    assert res["median_full_strength_s"] == pytest.approx((38.653 + 49.126) / 2, abs=1e-3)
    assert res["detection_s"] == [4.988, 5.17]
    # the two heals' first commits are healing, not trained, and step 0's commits are the
    # window's fencepost (18 committed, 14 trained)
    assert res["goodput"] == pytest.approx(0.5753, abs=1e-4)
    assert res["heal_steps"] == 2 and res["replica_steps_trained"] == 14
    assert res["goodput_baseline"]["source"] == "self"
    assert res["step_ratio"] == pytest.approx(0.9862, abs=1e-3)
    assert res["false_drops"] == 0
    assert ("goodput (replica-steps) 57.5% against its own full-strength rate, step ratio "
            "98.6%") in out.getvalue()


def test_soak_report_figures_from_a_recorded_run():
    soak = _load("soak")
    fig = soak.report_figures(FIX / "false-drop")
    assert fig["false_drops"] == 1 and fig["failures"] == 1
    assert fig["median_full_strength_s"] == pytest.approx(2.048, abs=1e-3)
    assert 0 < fig["goodput"] <= 1 and fig["step_ratio"] is not None
