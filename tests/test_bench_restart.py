"""bench/restart_speed.py reads its figures from the logs the runs wrote: checked on the raw
logs committed with the figures (docs/cpu/2026-11-25/restart/)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "docs" / "cpu" / "2026-11-25" / "restart"


def _bench():
    spec = importlib.util.spec_from_file_location("restart_speed", ROOT / "bench/restart_speed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_breakdown_of_the_recorded_importtime_logs_is_the_committed_one() -> None:
    bench = _bench()
    logs = sorted((RAW / "logs").glob("*-importtime.out.gz"))
    got = [bench.import_breakdown(p) for p in logs]
    assert got == json.loads((RAW / "importtime_breakdown.json").read_text())
    by_mode = {b["log"].split("-")[2]: b for b in got}
    old, new = by_mode["old"], by_mode["new"]
    # torchrun's own interpreter and inductor's compiler: only the old way imports them
    assert {"torch.distributed.run", "torch._inductor.compile_fx"} <= set(old["named"])
    assert not {"torch.distributed.run", "torch._inductor.compile_fx"} & set(new["named"])
    assert [n for n, _ in old["top_level"]].count("torch") == 1  # + torch.distributed.run
    assert new["top_level_total_s"] < old["top_level_total_s"]


def test_recorded_runs_give_the_committed_medians() -> None:
    """Each timed run's milestones come from its own log: the banner and `Starting job`
    lines are in every kept log, and the medians are those of the runs listed."""
    import statistics

    result = json.loads((RAW / "restart_speed.json").read_text())
    for mode, s in result["modes"].items():
        runs = [r for r in result["runs"] if r["mode"] == mode]
        assert len(runs) == result["repeats"]
        vals = [r["banner_to_starting_job_s"] for r in runs]
        assert s["median_banner_to_starting_job_s"] == round(statistics.median(vals), 3)
        for r in runs:
            text = (RAW / "logs" / r["log"]).read_text()
            assert "launching replica 0 (attempt 0)" in text and "Starting job" in text
            assert r["returncode"] == 0
