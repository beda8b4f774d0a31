"""Slurm's REAL time limit on the local cluster: the FT script, submitted with `ftslurm submit
--time=2 --time-limit-signal 60` (2 replicas of the CPU debug model, per-step FT, the real
Lighthouse), reaches its STEPS across a requeue. Nothing here signals the job: slurmctld sends
USR1 itself, the launcher saves a final checkpoint and requeues its task, and the next segment
resumes at the step after that checkpoint, so each step is trained once per replica.

Why a 60 s margin: slurmctld checks limits every 30 s (PERIODIC_TIMEOUT) and sends the signal at
the first check within margin + 30 s of the end, so a 2-minute job gets USR1 30-60 s after it
starts (after the ~6-15 s start-up) and is killed 120-150 s after it starts, which leaves 60 s
or more for a step, the save and the requeue. No change to the cluster's slurm.conf is needed.
Once every replica has requeued, the test lifts the array's limit (`scontrol update
TimeLimit`): the second segment runs to STEPS instead of a third one starting on a slow machine
(segments of 30-60 s, steps of 1-2 s); one requeue is what is under test.

Beside it, at the same time (Slurm's signal comes in the same window), one replica submitted
through the Python API (`ftslurm.submit_ft_array(timeout_min=2)`): that array goes through
submitit's own batch script, which must get `--signal=B:USR1@<s>` and `exec` the launcher
(a `--signal=USR2@90` without `B:` signalled no process of the batch step: the job was killed
by the limit with no checkpoint).

Run under the heavy lock:
`flock /tmp/ftslurm-heavy.lock pytest tests/test_time_limit_slurm.py`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import knobs, lighthouse, logvocab
from ftslurm.replica import handoff
from ftslurm.run.progress import steps_in
from ftslurm.slurm import client
from ftslurm.wait import free_port, wait_for
from tests.ftjob import ANSI_RE, FT_SCRIPT, ROOT, STEP_RE, cancel, failure_excerpt

pytestmark = [pytest.mark.slurm, pytest.mark.training]

# a first segment trains 24-54 s (~1-2 s a step): 70 steps are never done in it; the second
# segment trains the rest without a limit
STEPS = 70
MARGIN_S = 60


def _submit(outputs: Path, lh: lighthouse.LighthouseInfo) -> int:
    env = {
        **client.current().environment(),
        "DEVICE": "cpu",
        "FT_MODE": "per-step",  # the checkpoint is the group's state at its step
        "STEPS": str(STEPS),
        "TORCHFT_LIGHTHOUSE": lh.address,
        "FTSLURM_OUTPUTS": str(outputs),
    }
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "submit", "--json", "--time-limit-signal",
         str(MARGIN_S), "--time=2", "--array=0-1",
         f"--output={outputs}/torchft/slurm-%A_%a.out", str(FT_SCRIPT)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return int(json.loads(out.stdout)["job_id"])


def _text(outputs: Path, job: int, task: int) -> str:
    p = outputs / "torchft" / f"tft-{job}" / f"tft-{job}_{task}.out"
    return ANSI_RE.sub("", p.read_text(errors="replace")) if p.exists() else ""


def _slurm_out(outputs: Path, job: int, task: int) -> str:
    """Slurm's own --output of the task: slurmstepd's messages (`... DUE TO TIME LIMIT ***`)."""
    p = outputs / "torchft" / f"slurm-{job}_{task}.out"
    return p.read_text(errors="replace") if p.exists() else ""


def _lives(text: str) -> list[str]:
    """The log of each attempt (the text after each banner)."""
    return text.split(logvocab.BANNER.decode())[1:]


def _positions(life: str) -> list[int]:
    """The steps whose data position this attempt saved (one per trained step)."""
    return [got[1] for line in life.splitlines()
            if (got := logvocab.parse_data_position(line.encode())) is not None]  # fmt: skip


def _step_times(life: str) -> list[float]:
    """The wall times of this attempt's step lines (torchtitan's own stamps)."""
    return [r.time for r in steps_in(life) if r.time is not None]


def _finals(life: str) -> list[int]:
    return [s for line in life.splitlines()
            if (s := logvocab.parse_final_checkpoint(line.encode())) is not None]  # fmt: skip


@pytest.mark.timeout(480)
@pytest.mark.both_stacks
def test_a_two_minute_time_limit_reaches_steps_across_requeues(slurm_cluster, tmp_path):
    outputs = tmp_path / "outputs"
    (outputs / "torchft").mkdir(parents=True)
    lh_dir = outputs / "lighthouse"
    # both replicas in every quorum: a segment's first step is taken together
    lh = lighthouse.start(bind=f"0.0.0.0:{free_port()}", advertise="login-0",
                          state_dir=lh_dir, min_replicas=2)  # fmt: skip
    api_dir = tmp_path / "api"
    api_lh = lighthouse.start(bind=f"0.0.0.0:{free_port()}", advertise="login-0",
                              state_dir=api_dir / "lighthouse", min_replicas=1)  # fmt: skip
    job = api_run = None
    try:
        job = _submit(outputs, lh)
        api_run = _submit_api(api_dir, api_lh)
        wait_for(lambda: all(logvocab.TIME_LIMIT in _text(outputs, job, i) for i in (0, 1)),
                 240, interval=2, what="each replica's first time-limit checkpoint")  # fmt: skip
        _lift_time_limit(job)
        _check_api_replica(api_run)
        cancel(api_run.job_id)

        def finished() -> bool:
            tasks = client.current().array_tasks(job)
            return bool(tasks) and all(t.state not in ("RUNNING", "PENDING", "COMPLETING",
                                                       "CONFIGURING") for t in tasks.values())

        wait_for(finished, 450, interval=2, what=f"job {job} to reach STEPS={STEPS}")
        tasks = client.current().array_tasks(job)
        texts = {i: _text(outputs, job, i) for i in (0, 1)}
        for i, t in tasks.items():
            assert t.state == "COMPLETED", (t, failure_excerpt(texts[i]))
            assert t.restarts == 1, f"task {i}: one requeue, then no limit: {t}"
        for i, text in texts.items():
            lives = _lives(text)
            assert len(lives) == tasks[i].restarts + 1, (i, len(lives), tasks[i])
            # the launcher was told the margin (Slurm does not tell a job its --signal)
            assert handoff.signal_margin_line(
                {knobs.TIME_LIMIT_SIGNAL: str(MARGIN_S)}) in text  # fmt: skip
            # never killed by the limit itself
            assert "DUE TO TIME LIMIT" not in text + _slurm_out(outputs, job, i)
            assert "Traceback" not in text, text[max(0, text.index("Traceback") - 3000):][:6000]
            stops: list[int] = []
            for n, life in enumerate(lives[:-1]):  # every segment but the last: the limit
                finals = _finals(life)
                assert len(finals) == 1, (i, n, finals, life[-3000:])
                assert logvocab.TIME_LIMIT in life, (i, n, life[-3000:])
                assert "not requeueing" not in life  # its own kind of event, not a failure
                stops.append(finals[0])
            last = lives[-1]
            assert "Training completed" in last and not _finals(last)
            # each segment resumes at its final checkpoint and trains each step once
            bounds = [0, *stops, STEPS]
            for n, (life, lo, hi) in enumerate(zip(lives, bounds[:-1], bounds[1:], strict=True)):
                if n:
                    assert logvocab.resume_line(i, lo, lo) in life, (i, n, life[:3000])
                trained = [int(m[1]) for m in STEP_RE.finditer(life)]  # a line per step
                assert trained == list(range(lo + 1, hi + 1)), (i, n, stops, trained)
                # a data position saved for each (the final save writes its step's twice)
                assert sorted(set(_positions(life))) == trained, (i, n, stops)
            # the figures: steps per segment, and the gap from a segment's last step to the
            # next one's first (the final save, the requeue, Slurm's hold, the start-up)
            times = [_step_times(life) for life in lives]
            gaps = [round(b[0] - a[-1], 1) for a, b in zip(times[:-1], times[1:], strict=True)]
            print(f"replica {i}: segments end at steps {stops} of {STEPS}; restarts "
                  f"{tasks[i].restarts}; gap last step -> next first step {gaps} s")
        # the two replicas stopped after the same steps; one wrote each model checkpoint
        stops_of = {i: [f for life in _lives(texts[i]) for f in _finals(life)] for i in (0, 1)}
        assert stops_of[0] == stops_of[1], stops_of
        for step in stops_of[0]:
            writers = [i for i in (0, 1)
                       if logvocab.final_checkpoint_line(step, "saved") in texts[i]]  # fmt: skip
            assert len(writers) == 1, (step, writers)
        # the report says each as its own kind of event, with no step lost
        rep = subprocess.run([sys.executable, "-m", "ftslurm", "report", "--json",
                              str(outputs / "torchft" / f"tft-{job}")], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        rows = json.loads(rep.stdout)["restarts"]
        assert rows and all(r["kind"] == "time limit" and r["lost_steps"] == 0 for r in rows), rows
        assert sorted({r["resumed_from"] for r in rows}) == stops_of[0]
    finally:
        for running in (job, api_run and api_run.job_id):
            if running is not None:
                cancel(running)
        lighthouse.stop(lh_dir)
        lighthouse.stop(api_dir / "lighthouse")


def _submit_api(outputs: Path, lh: lighthouse.LighthouseInfo):
    import ftslurm

    config = {"DEVICE": "cpu", "FT_MODE": "per-step", "STEPS": "1000",
              knobs.TIME_LIMIT_SIGNAL: str(MARGIN_S)}  # fmt: skip
    run = ftslurm.submit_ft_array(1, config, lh, outputs=outputs, timeout_min=2)
    submitted = (outputs / "submitit" / f"{run.job_id}_submission.sh").read_text()
    assert f"#SBATCH --signal=B:USR1@{MARGIN_S}" in submitted.splitlines(), submitted
    return run


def _check_api_replica(run) -> None:
    """The API's replica took its time-limit checkpoint as well: Slurm's signal reached the
    launcher through submitit's batch script, in the same window as the CLI's array."""
    (replica,) = run.replicas

    def text() -> str:
        return ANSI_RE.sub("", replica.text())

    wait_for(lambda: logvocab.TIME_LIMIT in text(), 120, interval=2,
             what="the API replica's time-limit checkpoint")  # fmt: skip
    got = text()
    assert handoff.signal_margin_line({knobs.TIME_LIMIT_SIGNAL: str(MARGIN_S)}) in got, \
        got[-3000:]  # fmt: skip
    assert "DUE TO TIME LIMIT" not in got, got[-3000:]


def _lift_time_limit(job: int) -> None:
    """Every task of `job` gets a 10-minute limit (its requeued segment included)."""
    out = subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=10"],
                         env=client.current().environment(), capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_the_margin_fits_slurms_check_interval() -> None:
    """The reasoning above in numbers: signal at the first 30 s check within margin + 30 s of
    the end, kill at the first check past it; at least a 30 s window for a step and the save."""
    end, tick = 120, 30
    for phase in range(tick):
        checks = range(phase, 200, tick)
        signal_at = next(t for t in checks if t + MARGIN_S + tick >= end)
        kill_at = next(t for t in checks if t >= end)
        assert 30 <= signal_at <= 60 and kill_at - signal_at >= 60, (phase, signal_at, kill_at)
    assert re.search(r"#SBATCH --signal=B:USR1@\d+", FT_SCRIPT.read_text())
