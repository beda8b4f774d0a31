"""The failure-mode registry agrees with what each mode's plan does, with the event log's
vocabulary and with the CLI's help: a mode added to one and not the others fails here."""

from __future__ import annotations

import pytest

from ftslurm import failure_modes, failure_plan, logvocab
from ftslurm.failure_plan import KillSelection, Target
from tests.clirun import invoke

pytestmark = pytest.mark.unit

TASK = Target("worker-1", job=12, replica=1, raw_job_id=13)
LOCAL = KillSelection(local=True, pids=(4242,), described=("4242: python -m x",))


def _plan(mode: str) -> failure_plan.FailurePlan:
    kill = LOCAL if failure_modes.MODES[mode].signals else None
    return failure_plan.make_plan(mode, TASK, down_for=7, kill=kill)


@pytest.mark.parametrize("mode", failure_modes.NAMES)
def test_each_mode_plan_matches_its_record(mode: str) -> None:
    record, plan = failure_modes.MODES[mode], _plan(mode)
    kinds = [a.kind for a in plan.actions]
    assert plan.down_for == (7 if record.timed else 0)
    assert ("wait" in kinds) is record.timed  # held, then undone
    # a silent mode stops processes (SIGSTOP or ptrace), a loud one kills them or has Slurm act
    stops = any(k.startswith(("stop", "stall")) for k in kinds)
    assert stops is record.silent, kinds
    assert bool(record.held) is record.timed


def test_the_names_are_the_event_logs_and_the_help_names_each() -> None:
    assert logvocab.FAILURE_MODES == failure_modes.NAMES == failure_plan.MODES
    assert set(failure_plan.SILENT_MODES) == {"hang", "stall", "freeze-node"}
    help_text = invoke("simulate-failure", "--help").output
    said = " ".join(help_text.split())
    for name in failure_modes.NAMES:  # `--mode`'s help explains each: `hang: SIGSTOP ...`
        assert f"; {name}:" in said or f"; {name} (" in said or f"{name}: scontrol" in said, name
