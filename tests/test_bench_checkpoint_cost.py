"""bench/checkpoint_cost.py's per-save figure: what each save adds to the steps after it,
measured inside one run against its other steps (pure: no training)."""

from __future__ import annotations

import pytest

from tests.test_bench_recovery import _load

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_a_save_costs_what_the_steps_after_it_took_beyond_the_others() -> None:
    bench = _load("checkpoint_cost")
    deltas = {s: 1.0 for s in range(4, 31)}
    deltas[11] += 0.3  # the save after step 10 is staged before step 11's line
    deltas[12] += 0.1  # its background write slows the next step
    deltas[21] += 0.2
    assert bench.save_excess(deltas, 10) == pytest.approx([0.4, 0.2])
    # a save too close to the end to see its window is left out; no save: nothing
    assert bench.save_excess(deltas, 29) == []
    assert bench.save_excess({s: 1.0 for s in range(4, 9)}, 10) == []
