"""Real DiLoCo training on CPU, every replica stopped at once between two outer syncs, then
resumed from the model checkpoint: the launcher's `python -m ftslurm.replica job` (FT_MODE=
diloco, two replicas of the debug model, the real Lighthouse), model checkpoints every 5 steps.

The CPU preset syncs one of its 2 fragments every 3 inner steps (sync_steps 6): fragment 0 at
steps 3 and 9, fragment 1 at step 6. The checkpoint of step 5 falls between syncs, after
fragment 0's outer optimizer stepped once and before fragment 1's first step. Both training
workers are SIGKILLed once they trained past step 9, the model checkpoints after step 5 are
deleted (the kill may land after step 10's save: the resume must be the one between syncs),
and both are started again.

What must hold (fix 11 in fixes.py): the resumed replicas say what they restored (DiLoCo's
state from the model checkpoint, each replica's own weights from its FT folder), and their
outer syncs after step 5 give the first life's parameters bit for bit (the checksum of the
fragment each sync committed), with the same loss at every step. With the fix off (upstream:
outer momentum from zero, the loaded weights as the last sync's, the schedule from the start)
none of those syncs is reproduced and the losses part. Every process is killed by pid at the
end (make_run).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.replica.worker import ft_checkpoints
from ftslurm.wait import wait_for
from tests.test_replica_training import Replica, Run, _kill
from tests.test_replica_training import make_run as make_run  # the fixture

pytestmark = [pytest.mark.training, pytest.mark.timeout(300), pytest.mark.both_stacks]

INTERVAL = 5  # model checkpoints at steps 5 and 10
RESUME = 5  # between the syncs of steps 3 (fragment 0) and 6 (fragment 1)
LAST = 9  # two outer syncs after the checkpoint: fragment 1 at 6, fragment 0 at 9
CKPT_ARGS = f"--checkpoint.enable --checkpoint.interval={INTERVAL} --checkpoint.keep_latest_k=3"


def _folder(run: Run) -> Path:
    return run.tmp / "outputs" / "torchft" / "tft-test" / "checkpoint"


def _complete(run: Run) -> list[int]:
    return sorted(s for s, ok in ft_checkpoints.scan(_folder(run)).items() if ok)


def _losses(rep: Replica) -> dict[int, str]:
    """Step -> the loss as torchtitan logged it."""
    return {int(m[1]): m[2] for m in logvocab.STEP_TEXT.finditer(rep.text())}


def _reached(rep: Replica, step: int) -> bool:
    return max(_losses(rep), default=0) >= step


def _syncs_after(rep: Replica, step: int) -> dict[tuple[int, str], str]:
    """(step, fragment) -> sha256 of each outer sync committed after `step`."""
    return {k: v for k, v in rep.checksums().items() if k[0] > step}


def _stop_all_between_syncs_then_resume(run: Run) -> dict[int, tuple[Replica, Replica]]:
    """Replica id -> (first life, resumed life)."""
    first = {rid: run.start(rid) for rid in (0, 1)}
    wait_for(lambda: RESUME in _complete(run) and all(_reached(r, LAST) for r in first.values()),
             timeout=200, interval=0.05, what=f"checkpoint {RESUME} and step {LAST}")  # fmt: skip
    workers = [rep.worker_pid() for rep in first.values()]
    assert None not in workers
    for pid in workers:  # every replica at once
        _kill(pid)  # type: ignore[arg-type]
    wait_for(lambda: all(r.proc.poll() is not None for r in first.values()), timeout=60,
             what="both attempts to end")  # fmt: skip
    for step, _ in ft_checkpoints.scan(_folder(run)).items():
        if step > RESUME:
            shutil.rmtree(_folder(run) / f"step-{step}")
    again = {rid: run.start(rid, attempt=1) for rid in (0, 1)}
    wait_for(lambda: all(_reached(r, LAST) for r in again.values()), timeout=200,
             what=f"both resumed replicas to reach step {LAST}")  # fmt: skip
    return {rid: (first[rid], again[rid]) for rid in (0, 1)}


def _common_losses(a: Replica, b: Replica) -> list[tuple[int, str, str]]:
    la, lb = _losses(a), _losses(b)
    return [(s, la[s], lb[s]) for s in range(RESUME + 1, LAST + 1) if s in la and s in lb]


def test_a_diloco_run_resumed_between_syncs_goes_on_bit_identically(make_run) -> None:
    run = make_run("diloco", FTSLURM_EXTRA_ARGS=CKPT_ARGS)
    lives = _stop_all_between_syncs_then_resume(run)
    source = _folder(run) / f"step-{RESUME}"
    # after step 5: inner step 2 of 3, manager step 1 (one sync committed: fragment 1 next),
    # fragment 0's momentum only
    restored = logvocab.diloco_state_line(source, 2, (0,), 2, 3, 1, 1, True)
    for rid, (first, again) in lives.items():
        text = again.text()
        assert logvocab.resume_line(rid, RESUME, RESUME) in text, text[-3000:]
        assert restored in text, [ln for ln in text.splitlines() if "DiLoCo state" in ln]
        own = _folder(run) / f"ft-replicat-{rid}" / f"step-{RESUME}"
        assert logvocab.diloco_own_state_line(own, True) in text
        assert min(_losses(again)) == RESUME + 1
        before, after = _syncs_after(first, RESUME), _syncs_after(again, RESUME)
        common = sorted(k for k in before if k in after)
        assert common[:2] == [(6, "fragment1"), (9, "fragment0")], (before, after)
        for key in common:  # the uninterrupted run's parameters, bit for bit
            assert before[key] == after[key], (rid, key)
        losses = _common_losses(first, again)
        assert [s for s, _, _ in losses] == list(range(RESUME + 1, LAST + 1))
        assert all(x == y for _, x, y in losses), (rid, losses)


def test_a_diloco_resume_without_the_fix_diverges(make_run) -> None:
    """The bug reproduced: the same scenario with FTSLURM_FIX_DILOCO_STATE=0. The resumed run
    syncs on another schedule (fragment 0 first, from its loaded weights), so no sync of the
    first life after the checkpoint is reproduced, and the losses part after the resume."""
    run = make_run("diloco", FTSLURM_EXTRA_ARGS=CKPT_ARGS, FTSLURM_FIX_DILOCO_STATE="0")
    lives = _stop_all_between_syncs_then_resume(run)
    for rid, (first, again) in lives.items():
        text = again.text()
        assert "[ftslurm] fix diloco_state: OFF" in text
        assert logvocab.DILOCO_STATE_PREFIX not in text
        assert logvocab.resume_line(rid, RESUME, RESUME) in text, text[-3000:]
        before, after = _syncs_after(first, RESUME), _syncs_after(again, RESUME)
        assert (6, "fragment1") in before and (9, "fragment0") in before, before
        assert after, "no outer sync after the resume"
        assert all(after.get(k) != v for k, v in before.items()), (before, after)
        losses = _common_losses(first, again)
        assert any(x != y for _, x, y in losses), (rid, losses)
