"""Slot claim files (ftslurm/replica/slots.py) as another user could plant them: an empty far
slot folder, a valid claim in a far slot, malformed claims (Infinity, NaN, a bool task, a
field of another type) and a far epoch. Each read stays bounded, a malformed claim is ignored
with a warning and its slot held by an unknown task, the spare's watcher keeps the epoch
chain, and claim lines are terminal-safe. Real slot files, no Slurm (the same files on the
real local Slurm: tests/test_planted_slot_files_slurm.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ftslurm.replica import slots
from ftslurm.replica.worker import standby

pytestmark = pytest.mark.timeout(60)


def _claim_file(root: Path, slot_: int, epoch_: int, **fields: object) -> None:
    slot, epoch = slot_, epoch_
    d = {"slot": slot, "epoch": epoch, "task": slot, "host": "n", "pid": 1, "time": 100.0,
         "previous_task": None, "why": ""}  # fmt: skip
    d.update(fields)
    folder = root / f"slot-{slot}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"epoch-{epoch}.json").write_text(json.dumps(d))


def test_an_empty_far_slot_folder_costs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    (root / "slot-999999999").mkdir()
    t0 = time.monotonic()
    assert slots.slot_count(root) == 1
    assert slots.task_slots(root) == {0: "0"}
    assert [c.task for c in slots.history(root, slots.slot_count(root))] == [0]
    assert time.monotonic() - t0 < 1.0


def test_a_valid_claim_in_a_far_slot_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    _claim_file(root, 999_999_999, 0)
    t0 = time.monotonic()
    assert slots.slot_count(root) == 1
    assert slots.holders(root, 10**9).keys() == set(range(slots.MAX_SLOTS))
    assert time.monotonic() - t0 < 5.0


@pytest.mark.parametrize("bad", [
    {"task": float("inf")}, {"task": float("nan")}, {"time": 1e300}, {"time": -1e20},
    {"time": float("nan")}, {"task": True}, {"task": "3"}, {"slot": 0}, {"epoch": 7},
    {"pid": 10**30}, {"previous_task": float("-inf")}, {"host": ["x"]},
])  # fmt: skip
def test_a_malformed_claim_is_ignored_with_a_warning_and_held_by_an_unknown_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: dict[str, object]
) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    slots.try_claim(root, 1, 0, 1, "n", 1, 100.0)
    _claim_file(root, 1, 1, **bad)  # json.dumps writes Infinity / NaN as JavaScript does
    slots._warned.clear()
    holders = slots.holders(root, 2)
    assert holders[0] is not None and holders[0].task == 0
    assert holders[1] is not None and not holders[1].known and holders[1].epoch == 1
    assert slots.task_slots(root) == {0: "0", 1: "spare"}
    lines = slots.claim_lines(slots.history(root, slots.slot_count(root)))
    assert len(lines) == 2
    assert "warning: ignoring the slot claim" in capsys.readouterr().err
    # the spare's watcher neither crashes nor loses the epoch chain
    slots.record_member(root, 0, 0, "torchtitan_ft_0:a")
    w = standby.Watcher(root, 2, 300.0, lambda: (["torchtitan_ft_0:a"], []))
    assert w.poll(1000.0) is None  # vacant at the first read: claimed on the second look
    found = w.poll(1000.0 + standby.SECOND_LOOK_S)
    assert found is not None and found[0] == 1 and found[1].epoch == 1
    assert slots.try_claim(root, 1, 2, 5, "n", 1, 1000.0) is not None


def test_a_planted_far_epoch_neither_hides_the_holder_nor_blocks_claims(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    slots.try_claim(root, 0, 1, 2, "n", 1, 101.0, previous_task=0)
    _claim_file(root, 0, 999_999_999_999_999_999, task=7)
    assert slots.current(root, 0).task == 2
    assert slots.epochs(root, 0) == [0, 1]
    nxt = slots.try_claim(root, 0, slots.current(root, 0).epoch + 1, 3, "n", 1, 102.0)
    assert nxt is not None and slots.current(root, 0) == nxt
    assert slots.task_slots(root) == {0: "spare", 2: "spare", 3: "0"}


def test_status_claim_lines_are_terminal_safe(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "w-0\x1b]0;PWNED\x07", 1, 100.0)
    (line,) = slots.claim_lines(slots.history(root, 1))
    assert "\x1b" not in line and "\x07" not in line and "w-0\\x1b]0;PWNED\\x07" in line
