"""bench/scale.py at CI size: 8 tiny replicas (FTSLURM_PRESET=tiny) of the real FT sbatch
script on their own 8-node local Slurm with the real Lighthouse, to a full quorum; chaos
(`simulate-failure --chaos`), a double failure and a Lighthouse restart; `ftslurm report`
finds every injected failure and a heal after each. The bench runs the same code with
32-64 replicas (docs/benchmarks-cpu.md); 8 keeps this test near 2 minutes.

Slow (marked slurm and training, so the default fast run skips it): it starts 8 torch
processes on the 2-core machine. Everything is stopped by pid (bench/scale.py's stop)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import scale  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.training]


@pytest.mark.timeout(600)
def test_eight_replicas_survive_chaos_a_double_failure_and_a_lighthouse_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root")
    # run_scale points this process at its own cluster: give the variables back afterwards
    for name in ("SLURM_CONF", "FTSLURM_CLUSTER_DIR"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    cfg = scale.ScaleConfig(replicas=8, failures=4, state=tmp_path, every=10.0, down_for=3.0,
                            timeout=240)  # fmt: skip
    fig = scale.run_scale(cfg, measure=False)
    assert fig["double"] and len(set(fig["double"])) == 2 and fig["double_rc"] == [0, 0]
    assert fig["chaos_rc"] == 0 and fig["chaos_failures"] == 2
    assert fig["down_events"] == 4, fig
    assert fig["missing_failures"] == [], fig
    assert fig["failures_reported"] >= 4
    assert fig["failed_replicas_not_healed"] == [], fig
    assert fig["recoveries_reported"] >= 4
    assert fig["lighthouse_restart_to_quorum_s"] is not None
    assert fig["last_failure_to_full_quorum_s"] is not None, fig.get("full_quorum_error")
    assert fig["memory"]["worker"]["count"] == 8
    assert "aborted_low_memory" not in fig
