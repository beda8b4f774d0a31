"""failure.slot_of: with warm spares an injected failure names the slot the array task holds,
read from the slots beside the run's logs, wherever the run's outputs are (the demo's and the
benches' are not the default outputs: their events named the task, which the report then
took for a replica)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ftslurm.failure import slot_of
from ftslurm.replica import slots

pytestmark = pytest.mark.unit


def test_slot_of_reads_the_given_run_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path / "elsewhere"))
    run_dir = tmp_path / "outputs" / "torchft" / "tft-7"
    root = slots.slots_dir(run_dir)
    now = time.time()
    assert slots.try_claim(root, 0, 0, 0, "n0", 1, now) is not None
    assert slots.try_claim(root, 1, 0, 1, "n1", 2, now) is not None
    assert slots.try_claim(root, 1, 1, 2, "n2", 3, now, previous_task=1) is not None
    assert [slot_of(7, t, run_dir) for t in (0, 1, 2)] == ["0", "spare", "1"]
    assert slot_of(7, 2) is None  # the default outputs hold no such run
    assert slot_of(None, 2, run_dir) is None
