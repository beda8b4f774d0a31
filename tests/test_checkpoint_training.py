"""Real training on CPU, every replica stopped at once: the launcher's `python -m
ftslurm.replica job` (per-step FT, two replicas of the debug model, the real Lighthouse), model
checkpoints every 3 steps, both training workers SIGKILLed together after a checkpoint, a save
cut off mid-way, then both restarted.

What must hold (fix 9 in fixes.py): both resume from the newest complete model checkpoint with
their data positions at that step (logged), the half-written checkpoint is skipped with a log
line, and every step after the checkpoint is the step the first life ran: bit-identical
parameter checksums and the same data position (documents read) per replica and step, so no
sample is skipped or repeated. Every process is killed by pid at the end (make_run).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from ftslurm import logvocab
from ftslurm.replica.launcher.job import TIME_LIMIT_EXIT
from ftslurm.replica.worker import ft_checkpoints
from ftslurm.wait import wait_for
from tests.test_replica_training import Replica, Run, _kill
from tests.test_replica_training import make_run as make_run  # the fixture

pytestmark = [pytest.mark.training, pytest.mark.timeout(300), pytest.mark.both_stacks]

INTERVAL = 3
CKPT_ARGS = f"--checkpoint.enable --checkpoint.interval={INTERVAL} --checkpoint.keep_latest_k=2"


def _folder(run: Run) -> Path:
    return run.tmp / "outputs" / "torchft" / "tft-test" / "checkpoint"


def _positions(rep: Replica) -> dict[int, int | None]:
    out = {}
    for line in rep.text().splitlines():
        if (got := logvocab.parse_data_position(line.encode())) is not None:
            out[got[1]] = got[2]
    return out


def _last_checksum_step(rep: Replica) -> int:
    return max((s for s, _ in rep.checksums()), default=0)


def _complete(run: Run) -> list[int]:
    return sorted(s for s, ok in ft_checkpoints.scan(_folder(run)).items() if ok)


def _stop_all_then_restart(run: Run) -> dict:
    r0, r1 = run.start(0), run.start(1)
    # a checkpoint (step 6), then at least one step after it on both replicas
    wait_for(lambda: 2 * INTERVAL in _complete(run) and min(
        _last_checksum_step(r0), _last_checksum_step(r1)) > 2 * INTERVAL,  # fmt: skip
        timeout=200, interval=0.05, what="a model checkpoint and a step after it")
    workers = [r0.worker_pid(), r1.worker_pid()]
    assert None not in workers
    for pid in workers:  # every replica at once
        _kill(pid)  # type: ignore[arg-type]
    wait_for(lambda: r0.proc.poll() is not None and r1.proc.poll() is not None, timeout=60,
             what="both attempts to end")  # fmt: skip
    model_step = max(_complete(run))
    # a save cut off by the failure: the next checkpoint's files without its .metadata (DCP
    # writes .metadata last), where the resumed run will save again
    folder = _folder(run)
    half = folder / f"step-{model_step + INTERVAL}"
    if not half.exists():
        shutil.copytree(folder / f"step-{model_step}", half)
    (half / ".metadata").unlink(missing_ok=True)
    first = {0: r0, 1: r1}
    last = {rid: _last_checksum_step(rep) for rid, rep in first.items()}

    again = {rid: run.start(rid, attempt=1) for rid in (0, 1)}
    target = max(last.values()) + 1
    wait_for(lambda: all(_last_checksum_step(rep) >= target for rep in again.values()),
             timeout=200, what=f"both resumed replicas to commit step {target}")  # fmt: skip
    return {"first": first, "again": again, "model_step": model_step, "half": half,
            "last": last}  # fmt: skip


def test_every_replica_killed_at_once_resumes_bit_identically(make_run) -> None:
    run = make_run("per-step", FTSLURM_EXTRA_ARGS=CKPT_ARGS)
    res = _stop_all_then_restart(run)
    m = res["model_step"]
    for rid, rep in res["again"].items():
        text = rep.text()
        assert logvocab.resume_line(rid, m, m) in text, text[-3000:]
        # (c) the save cut off mid-way is never loaded, and said
        assert logvocab.half_written_line(res["half"]) in text
        first_life = res["first"][rid]
        # training goes on at the checkpoint's step + 1, not at the newest data position
        assert min(s for s, _ in rep.checksums()) == m + 1
        before, after = first_life.checksums(), rep.checksums()
        common = sorted(k for k in before if k in after and k[0] > m)
        assert [k[0] for k in common] == list(range(m + 1, res["last"][rid] + 1))
        assert common, "no step both lives ran"
        for key in common:  # the uninterrupted run's parameters, bit for bit
            assert before[key] == after[key], (rid, key)
        # the data positions: the same documents read after each step in both lives
        p1, p2 = _positions(first_life), _positions(rep)
        assert p1[m] is not None
        # a step's position is logged at its save, after its checksum: the kill may fall
        # between the two on the first life's last step, and only there
        ran = list(range(m + 1, res["last"][rid] + 1))
        assert [s for s in ran if s not in p1] in ([], ran[-1:]), (rid, ran, p1)
        for step in (s for s in ran if s in p1):
            assert p2[step] == p1[step], (rid, step, p1, p2)
    # the replicas agree after the resume (the same committed parameters at each step)
    a, b = (res["again"][i].checksums() for i in (0, 1))
    shared = [k for k in a if k in b]
    assert shared and all(a[k] == b[k] for k in shared)
    # the retention keeps each model checkpoint's data position (a second failure can resume)
    for rid in (0, 1):
        ft = ft_checkpoints.scan(_folder(run) / f"ft-replicat-{rid}")
        model = set(_complete(run))
        assert model <= set(ft), (model, ft)
    assert f"Loading the checkpoint from {_folder(run)}/step-{m}." in res["again"][0].text()


def _launcher_signal(rep: Replica, sig: int) -> None:
    """What Slurm's `--signal=B:USR1@<s>` does: signal the batch shell, which the FT script
    replaced with the launcher (exec)."""
    os.kill(rep.proc.pid, sig)


def test_the_time_limit_saves_a_final_checkpoint_and_training_reaches_steps(make_run) -> None:
    steps = 11
    run = make_run("per-step", STEPS=str(steps), FTSLURM_EXTRA_ARGS=CKPT_ARGS.replace(
        f"interval={INTERVAL}", "interval=5"))  # fmt: skip
    finals: list[int] = []
    for attempt in range(3):
        reps = [run.start(rid, attempt=attempt) for rid in (0, 1)]
        if attempt == 2:  # the last segment runs to STEPS
            break
        start = 0 if not finals else finals[-1]
        wait_for(lambda: min(_last_checksum_step(r) for r in reps) >= start + 2,  # noqa: B023
                 timeout=200, interval=0.05, what="two steps of this segment")  # fmt: skip
        for rep in reps:  # every task of the array reaches the limit together
            _launcher_signal(rep, signal.SIGUSR1)
        for rep in reps:
            rep.proc.wait(timeout=120)
            # not 0: the replica has not finished (job.TIME_LIMIT_EXIT)
            assert rep.proc.returncode == TIME_LIMIT_EXIT, rep.text()[-3000:]
        saved = [logvocab.parse_final_checkpoint(ln.encode()) for rep in reps
                 for ln in rep.text().splitlines()]  # fmt: skip
        stops = sorted({s for s in saved if s is not None})
        assert len(stops) == 1, stops  # both replicas stopped after the same step
        step = stops[0]
        assert step % 5 != 0 or attempt, "a forced save, not the interval's"
        assert step in _complete(run), (step, _complete(run))  # the final checkpoint is complete
        writers = [rep for rep in reps
                   if logvocab.final_checkpoint_line(step, "saved") in rep.text()]  # fmt: skip
        assert len(writers) == 1  # one replica writes the model checkpoint, as torchtitan's FT
        for rep in reps:
            text = rep.text()
            assert logvocab.TIME_LIMIT in text and "Traceback" not in text
            assert "not requeueing" not in text  # its own kind of event, not a failure
        finals.append(step)
    m = finals[-1]
    for rep in reps:
        wait_for(lambda: rep.proc.poll() is not None, timeout=200,  # noqa: B023
                 what="the last segment to reach STEPS")  # fmt: skip
        assert rep.proc.returncode == 0
        text = rep.text()
        assert logvocab.resume_line(rep.replica_id, m, m) in text
        assert max(s for s, _ in rep.checksums()) == steps
        assert "Training completed" in text
    # the segment trains on from its final checkpoint: some replica trains the step after it
    assert min(s for rep in reps for s, _ in rep.checksums()) == m + 1
    # every step trained exactly once across the three segments, per replica; a replica that
    # joined its peer's first quorum of a segment late (a loaded machine) healed from it and
    # trained on from the step it joined at: a life may start later only after a heal in it
    for rid in (0, 1):
        lives_of = [r for r in run.replicas if r.replica_id == rid]
        lives = [sorted(_positions(r)) for r in lives_of]
        bounds = [0, *finals, steps]
        for rep, life, lo, hi in zip(lives_of, lives, bounds[:-1], bounds[1:], strict=True):
            first = lo + 1
            if life and life[0] > first and "Loaded state dict" in rep.text():
                first = life[0]
            assert life == list(range(first, hi + 1)), (rid, lives, finals)
