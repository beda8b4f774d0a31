"""Slot claims and fencing (ftslurm/replica/slots.py, the worker side in standby.py): the pure
decisions, the claim files, and a race of a slow original against a claiming spare."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest

from ftslurm.replica import slots
from ftslurm.replica.worker import standby

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _claim(slot: int, epoch: int, task: int, t: float = 100.0) -> slots.Claim:
    return slots.Claim(slot, epoch, task, "node", 1, t)


# ---------------------------------------------------------------- pure decisions


def test_startup_slot_first_start_takes_the_home_slot_and_extra_tasks_are_spares() -> None:
    claims: dict[int, slots.Claim | None] = {0: None, 1: None}
    assert slots.startup_slot(0, 2, claims)[0] == 0
    assert slots.startup_slot(1, 2, claims)[0] == 1
    slot, why = slots.startup_slot(2, 2, claims)
    assert slot is None and "beyond the group size 2" in why


def test_startup_slot_requeued_task_takes_its_slot_back_unless_a_spare_took_it() -> None:
    assert slots.startup_slot(0, 2, {0: _claim(0, 3, 0), 1: _claim(1, 0, 1)})[0] == 0
    slot, why = slots.startup_slot(0, 2, {0: _claim(0, 1, 2), 1: _claim(1, 0, 1)})
    assert slot is None and "held by task 2 (epoch 1)" in why
    # the spare that took slot 0 and was then requeued takes slot 0 back, not a home slot
    assert slots.startup_slot(2, 2, {0: _claim(0, 1, 2), 1: _claim(1, 0, 1)})[0] == 0


def test_vacant_slot_when_the_holders_own_heartbeat_is_old() -> None:
    claims = {0: _claim(0, 0, 0, t=100.0), 1: _claim(1, 0, 1, t=100.0)}
    members = {0: "torchtitan_ft_0:a", 1: "torchtitan_ft_1:b"}
    both = {"torchtitan_ft_0:a", "torchtitan_ft_1:b"}
    assert slots.vacant_slot(120, claims, members, both, set(), 300) is None
    assert slots.vacant_slot(125, claims, members, {"torchtitan_ft_0:a"},
                             {"torchtitan_ft_1:b"}, 300) == 1  # fmt: skip
    # a new holder (epoch 1) is starting: the old heartbeat is its predecessor's, not its own
    claims[1] = _claim(1, 1, 1, t=124.0)
    members[1] = None
    assert slots.vacant_slot(125, claims, members, {"torchtitan_ft_0:a"},
                             {"torchtitan_ft_1:b"}, 300) is None  # fmt: skip
    # ... it never gets to torchft's Manager: vacant after the grace
    assert slots.vacant_slot(424, claims, members, {"torchtitan_ft_0:a"},
                             {"torchtitan_ft_1:b"}, 300) == 1  # fmt: skip
    # it runs: its own id is live, the predecessor's stays listed old
    members[1] = "torchtitan_ft_1:c"
    assert slots.vacant_slot(424, claims, members, {"torchtitan_ft_0:a", "torchtitan_ft_1:c"},
                             {"torchtitan_ft_1:b"}, 300) is None  # fmt: skip
    # never claimed: the home task's, never a spare's
    assert slots.vacant_slot(999, {0: None}, {}, set(), {"x_0:y"}, 1) is None


def test_vacant_slot_not_while_the_lighthouse_lists_nobody() -> None:
    """A restarted Lighthouse lists no heartbeat, live or old: every replica would look gone."""
    claims = {0: _claim(0, 0, 0, t=100.0), 1: _claim(1, 0, 1, t=100.0)}
    members = {0: "torchtitan_ft_0:a", 1: None}
    assert slots.vacant_slot(999, claims, members, set(), set(), 300) is None
    # one replica and its spare: the replica's heartbeat turns old, nobody else is live
    assert slots.vacant_slot(125, {0: claims[0]}, members, set(), {"torchtitan_ft_0:a"},
                             300) == 0  # fmt: skip


# ---------------------------------------------------------------- files


def test_claims_are_exclusive_per_epoch_and_fence_the_previous_holder(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    first = slots.try_claim(root, 0, 0, 0, "node-0", 11, 100.0, why="home")
    assert first is not None and slots.current(root, 0) == first
    assert slots.fenced_by(root, first) is None
    assert slots.try_claim(root, 0, 0, 2, "node-2", 22, 101.0) is None  # epoch 0 is taken
    second = slots.try_claim(root, 0, 1, 2, "node-2", 22, 102.0, previous_task=0)
    assert second is not None
    assert slots.fenced_by(root, first) == second
    assert slots.current(root, 0) == second
    assert slots.epochs(root, 0) == [0, 1]
    assert [(c.task, c.epoch) for c in slots.history(root, 1)] == [(0, 0), (2, 1)]
    assert slots.holders(root, 2) == {0: second, 1: None}
    # no temporary files left beside the claims
    assert sorted(p.name for p in (root / "slot-0").iterdir()) == ["epoch-0.json", "epoch-1.json"]


def test_wait_for_slot_claims_the_slot_whose_heartbeat_left(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n0", 1, 100.0)
    slots.try_claim(root, 1, 0, 1, "n1", 2, 100.0)
    slots.record_member(root, 0, 0, "torchtitan_ft_0:a")
    slots.record_member(root, 1, 0, "torchtitan_ft_1:b")
    beats = iter([(["torchtitan_ft_0:a", "torchtitan_ft_1:b"], [])] * 3
                 + [(["torchtitan_ft_0:a"], ["torchtitan_ft_1:b"])] * 9)
    clock = iter(range(200, 300))
    env = {"FTSLURM_SLOTS_DIR": str(root), "FTSLURM_TASK": "2", "FTSLURM_GROUP_SIZE": "2",
           "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1"}  # fmt: skip
    said: list[str] = []
    claim = standby.wait_for_slot(env, said.append, lambda: float(next(clock)),
                                  lambda: next(beats))  # fmt: skip
    assert claim is not None
    assert (claim.slot, claim.epoch, claim.task, claim.previous_task) == (1, 1, 2, 1)
    assert slots.current(root, 1) == claim
    assert "spare (task 2): warm" in said[0]


def test_wait_for_slot_ends_when_the_run_finished(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n0", 1, 100.0)
    slots.mark_finished(root, 0)
    env = {"FTSLURM_SLOTS_DIR": str(root), "FTSLURM_TASK": "1", "FTSLURM_GROUP_SIZE": "1",
           "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1"}  # fmt: skip
    assert standby.wait_for_slot(env, lambda _: None, time.time, lambda: ([], [])) is None


# ---------------------------------------------------------------- the race


ORIGINAL = "torchtitan_ft_0:original"


def _train(root: Path, steps: Path, who: str, claim: slots.Claim, slow: float, seed: int) -> None:
    """A replica's step loop as standby.py runs it: check the fence before each step; a step
    holds the steps file's lock while it writes (the step is atomic for the reader)."""
    rng = random.Random(seed)
    for step in range(1, 10_000):
        with open(steps, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            if slots.fenced_by(root, claim) is not None:
                fh.write(f"{who} fenced {step}\n")
                fh.flush()
                os._exit(standby.FENCED_EXIT)
            fh.write(f"{who} step {step}\n")
            fh.flush()
            time.sleep(rng.uniform(0, slow))  # a slow step, still holding the lock
        time.sleep(rng.uniform(0, slow))


def _original(root: Path, steps: Path, seed: int) -> None:
    claim = slots.current(root, 0)
    assert claim is not None
    _train(root, steps, "original", claim, 0.02, seed)


def _spare(root: Path, steps: Path, go: float, seed: int) -> None:
    env = {"FTSLURM_SLOTS_DIR": str(root), "FTSLURM_TASK": "1", "FTSLURM_GROUP_SIZE": "1",
           "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1"}  # fmt: skip
    # the original's heartbeat is live until `go`, then listed old (the test stopped it)
    claim = standby.wait_for_slot(
        env, lambda _: None, time.time,
        lambda: ([], [ORIGINAL]) if time.time() >= go else ([ORIGINAL], []),
    )  # fmt: skip
    if claim is None:
        os._exit(3)
    _train(root, steps, "spare", claim, 0.005, seed)


def _requeued(root: Path, steps: Path, go: float, seed: int) -> None:
    """The original's task, requeued, racing the spare for the same slot."""
    # before or after the heartbeat leaves: sometimes first, sometimes racing the spare's poll
    start = go + random.Random(seed * 7919 + os.getpid()).uniform(-0.3, 0.3)
    while time.time() < start:
        time.sleep(0.001)
    slot, _ = slots.startup_slot(0, 1, slots.holders(root, 1))
    held = slots.current(root, 0)
    claim = None
    if slot == 0 and held is not None:
        claim = slots.try_claim(root, 0, held.epoch + 1, 0, "n0", os.getpid(), time.time())
    if claim is None:
        os._exit(4)  # lost: it would wait as a spare
    time.sleep(0.05)  # torchrun, imports, torchft's Manager: then its replica id is known
    slots.record_member(root, 0, claim.epoch, "torchtitan_ft_0:requeued")
    _train(root, steps, "requeued", claim, 0.005, seed)


@pytest.mark.process
@pytest.mark.parametrize("seed", range(4))
def test_race_slow_original_against_claiming_spare_exactly_one_trains(
    tmp_path: Path, seed: int
) -> None:
    """The original (slot 0, epoch 0) hangs mid-run (SIGSTOP, as on a node that stalls); its
    heartbeat leaves; a spare and the original's requeued task race for epoch 1; then the
    original wakes up. Exactly one process trains from then on: the original stops before its
    next step, the loser of the race never trains, and no step of two processes interleaves."""
    root, steps = tmp_path / "slots", tmp_path / "steps.txt"
    assert slots.try_claim(root, 0, 0, 0, "n0", 1, time.time()) is not None
    slots.record_member(root, 0, 0, ORIGINAL)
    ctx = multiprocessing.get_context("fork")
    orig = ctx.Process(target=_original, args=(root, steps, seed))
    orig.start()
    deadline = time.time() + 20
    while not (steps.exists() and steps.read_text().count("original step") >= 5):
        assert time.time() < deadline, "the original never trained"
        time.sleep(0.01)
    os.kill(orig.pid, signal.SIGSTOP)  # the slow original: stalled, maybe mid-step
    go = time.time() + 0.2
    spare = ctx.Process(target=_spare, args=(root, steps, go, seed))
    requeued = ctx.Process(target=_requeued, args=(root, steps, go, seed))
    spare.start()
    requeued.start()
    while slots.epochs(root, 0) != [0, 1]:
        assert time.time() < deadline, "nobody claimed the slot"
        time.sleep(0.01)
    time.sleep(0.1)
    os.kill(orig.pid, signal.SIGCONT)  # the original comes back late
    orig.join(10)
    assert orig.exitcode == standby.FENCED_EXIT
    winner_claim = slots.current(root, 0)
    assert winner_claim is not None and winner_claim.epoch == 1
    winner = "spare" if winner_claim.task == 1 else "requeued"
    print(f"race winner: {winner}")  # shown with -s: both outcomes occur over repeated runs
    if winner == "spare":  # the requeued original lost the race: it would wait as a spare
        requeued.join(10)
        assert requeued.exitcode == 4
    else:  # the spare lost the race: it keeps waiting warm (the new holder is starting)
        time.sleep(1.0)
        assert spare.is_alive() and spare.exitcode is None
    time.sleep(0.2)  # let the winner train a few steps
    for p in (spare, requeued):
        if p.is_alive():
            p.kill()
            p.join(5)
    lines = steps.read_text().splitlines()
    writers = [line.split()[0] for line in lines if " step " in line]
    first_new = next(i for i, w in enumerate(writers) if w != "original")
    assert set(writers[:first_new]) == {"original"}
    assert set(writers[first_new:]) == {winner}, "two processes trained as slot 0"
    assert sum(1 for line in lines if line.startswith("original fenced")) == 1
    assert writers[first_new:].count(winner) >= 2


def test_a_paused_lighthouse_listing_every_heartbeat_old_takes_no_slot(tmp_path: Path) -> None:
    """A Lighthouse SIGSTOPped for 3 s lists every heartbeat old when it resumes, until the
    next heartbeats arrive (torchft's 100 ms): a spare claims a slot only when a second read,
    SECOND_LOOK_S later, finds it vacant too. Before, it took the healthy holder's slot at
    the first read and fenced it (the false-action soak)."""
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n0", 1, 100.0)
    slots.record_member(root, 0, 0, "torchtitan_ft_0:a")
    reads = iter([([], ["torchtitan_ft_0:a"]), (["torchtitan_ft_0:a"], []),
                  ([], ["torchtitan_ft_0:a"]), ([], ["torchtitan_ft_0:a"])])  # fmt: skip
    w = standby.Watcher(root, 1, 300.0, lambda: next(reads))
    assert w.poll(200.0) is None  # resumed: old at the first read
    assert w.poll(200.25) is None  # fresh again: not vacant
    assert w.poll(201.0) is None  # old again: a first read once more
    found = w.poll(201.0 + standby.SECOND_LOOK_S)  # still old a second later: gone
    assert found is not None and found[0] == 0


def test_a_spare_whose_run_finished_exits_0_at_once(tmp_path: Path, monkeypatch) -> None:
    """torch's @record on FTTrainer.__init__ swallows SystemExit(0) and torchtitan then
    trains a trainer never built (exit 1: drained, requeued, crash-looped); the spare leaves
    through os._exit(0) instead."""
    from types import SimpleNamespace

    from torchtitan.components.ft.manager import FTManager
    from torchtitan.experiments.ft.train import FTTrainer

    monkeypatch.setattr(FTManager, "__init__", FTManager.__init__)  # restored after the test
    monkeypatch.setattr(FTTrainer, "train_step", FTTrainer.train_step)

    class Finished(Exception):
        pass

    def finished() -> None:
        raise Finished

    monkeypatch.setattr(standby, "wait_for_slot", lambda env: None)
    monkeypatch.setattr(standby, "_exit_finished", finished)
    env = {"FTSLURM_SLOTS_DIR": str(tmp_path / "slots"), "FTSLURM_SPARE": "1",
           "FTSLURM_SLOT_FILE": str(tmp_path / "slot"), "LOCAL_RANK": "0"}  # fmt: skip
    standby.install(env)
    with pytest.raises(Finished):
        FTManager.__init__(object.__new__(FTManager), SimpleNamespace(enable=True))
