"""Planted slot files against `status`, `logs` and `simulate-failure --dry-run` on the real
local Slurm cluster (a light FT-like array, tests/fixtures/failure/mimic_ft.sh): each command
answers within 5 s, without a traceback, with the real holders. Before the fix an empty
`slot-999999999/` made each loop over 10^9 slots and a claim with `"task": Infinity` raised
OverflowError."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.test_failure_slurm import Mimic, mimic  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slurm]


def _plant(run_dir: Path) -> None:
    """Task 0 holds slot 0 (its host an OSC title escape), task 1 slot 1; then what another
    user could plant: an empty far slot, a claim of slot 1 with Infinity as its task, and a
    far epoch of slot 0."""
    root = run_dir / "slots"

    def claim(slot: int, epoch: int, **kw: object) -> None:
        d = {"slot": slot, "epoch": epoch, "task": slot, "host": f"worker-{slot}", "pid": 1,
             "time": time.time(), "previous_task": None, "why": "home"}  # fmt: skip
        d.update(kw)
        (root / f"slot-{slot}").mkdir(parents=True, exist_ok=True)
        (root / f"slot-{slot}" / f"epoch-{epoch}.json").write_text(json.dumps(d))

    claim(0, 0, host="worker-0\x1b]0;PWNED\x07")
    claim(1, 0)
    claim(1, 1, task=float("inf"))
    claim(0, 999_999_999_999_999_999, task=7)
    (root / "slot-999999999").mkdir()


@pytest.mark.timeout(120)
def test_planted_slot_files_break_no_command(mimic: Mimic) -> None:  # noqa: F811
    run_dir = mimic.outputs / "torchft" / f"tft-{mimic.job}"
    _plant(run_dir)
    job = str(mimic.job)
    # status --all: every claim a line (the default counts the first claims: no host shown)
    for argv in (["status", "--job", job, "--no-lighthouse", "--all"],
                 ["logs", "--job", job, "-n", "1"],
                 ["simulate-failure", "--dry-run", "--job", job, "--replica", "0"]):  # fmt: skip
        t0 = time.monotonic()
        out = mimic.cli(*argv, timeout=30)
        took = time.monotonic() - t0
        text = out.stdout + out.stderr
        assert out.returncode == 0 and "Traceback" not in text, (argv, text[-2000:])
        assert took < 5, (argv, took)
        assert "\x1b]0;PWNED" not in text, argv
        if argv[0] == "status":
            assert "claim: slot 0 epoch 0 by task 0 on worker-0\\x1b]0;PWNED\\x07" in out.stdout
            assert "claim: slot 1 epoch 0 by task 1" in out.stdout
            assert "warning: ignoring the slot claim" in out.stderr
            assert "slot-0 beyond its epochs 0..0" in out.stderr  # the far epoch, ignored
        if argv[0] == "simulate-failure":
            assert "holds slot 0" in text, text[-2000:]
