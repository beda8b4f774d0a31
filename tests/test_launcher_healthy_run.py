"""The launcher never stops a healthy run (job.py, warm_restart.py): a full TMPDIR costs the
warm next run, not the training; a finished run stays finished when Slurm's time-limit signal
comes during its last step; a launcher note in the submitter's environment never reaches the
workers. The watchdog's own false-action rules: tests/test_silent_failures.py."""

from __future__ import annotations

import dataclasses
import errno
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from ftslurm.replica import handoff
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import job, lifecycle, preflight, warm_restart
from tests.test_warm_restart import FakeChild

pytestmark = [pytest.mark.timeout(60)]
ROOT = Path(__file__).resolve().parent.parent


def _enospc(*_a: object, **_k: object) -> str:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.unit
def test_a_full_tmpdir_costs_the_warm_next_run_not_the_training(tmp_path: Path,
                                                                 monkeypatch) -> None:  # fmt: skip
    said: list[str] = []
    spawned: list[int] = []
    h = warm_restart.Holder(True, 3, "ftslurm-test-warm-",
                            lambda folder, r: spawned.append(r) or FakeChild(),  # type: ignore
                            say=said.append)  # fmt: skip
    progress = tmp_path / "progress"
    progress.write_text("{}")
    monkeypatch.setattr(tempfile, "mkdtemp", _enospc)
    assert h.maybe_start(progress, 0, blocked=False) is None  # no exception
    assert not spawned and not h.enabled
    assert "no warm next run in this allocation (OSError" in said[0]
    monkeypatch.undo()
    assert h.maybe_start(progress, 0, blocked=False) is None  # off for the allocation


@pytest.mark.unit
def test_a_go_that_cannot_be_written_is_no_release(tmp_path: Path, monkeypatch) -> None:
    ready = warm_restart.Standby(FakeChild(), tmp_path, 1)  # type: ignore[arg-type]
    monkeypatch.setattr(warm_restart.safefile, "write_atomic", _enospc)
    assert ready.release() is False


@pytest.mark.unit
def test_launcher_notes_from_the_submitter_are_dropped() -> None:
    leaked = {handoff.GO_ENV: "/tmp/go", "FTSLURM_PROGRESS_FILE": "/tmp/p",
              "FTSLURM_TIME_LIMIT_FILE": "/tmp/t", "FTSLURM_LAUNCHER_PID": "1",
              "DEVICE": "cpu", "PATH": "/bin"}  # fmt: skip
    assert job.launcher_env(leaked) == {"DEVICE": "cpu", "PATH": "/bin"}


def _plan(code: str) -> planlib.Plan:
    env = {"DEVICE": "cpu", "FTSLURM_PRESET": "tiny", "SLURM_ARRAY_JOB_ID": "12",
           "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}  # fmt: skip
    plan = planlib.build_ft_plan(env, ROOT, ["torchrun"])
    return dataclasses.replace(plan, argv=[sys.executable, "-c", code])


# the worker: Slurm's signal arrives (the launcher's handler touches the file) during its
# last step, and it exits 0, as torchtitan does once it trained every step
_FINISHES = "import os, pathlib; pathlib.Path(os.environ['FTSLURM_TIME_LIMIT_FILE']).touch()"
# the worker: it saw the signal, saved its final checkpoint and stopped early
_STOPS = (_FINISHES + "; p = os.environ['FTSLURM_TIME_LIMIT_FILE'] + '.stopped'; "
          "pathlib.Path(p).write_text('7')")


@pytest.fixture
def own_handlers():
    """_run_torchrun installs the launcher's signal handlers: put pytest's back after."""
    sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
    saved = {s: signal.getsignal(s) for s in sigs}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.usefixtures("own_handlers")
@pytest.mark.parametrize("code, requeued", [(_FINISHES, False), (_STOPS, True)],
                         ids=["finished", "stopped-early"])
def test_the_time_limit_at_the_last_step_leaves_a_finished_run_finished(
        tmp_path: Path, monkeypatch, capsys, code: str, requeued: bool) -> None:  # fmt: skip
    """Deterministic: the signal is in before the worker exits 0. Only a worker that said
    it stopped early is requeued; a finished one exits 0 and is not requeued (before, it was
    requeued and its next attempt resumed from the model-only last-step checkpoint)."""
    calls: list[object] = []
    monkeypatch.setattr(preflight, "requeue", lambda *a: calls.append(a))
    monkeypatch.setattr(preflight, "after_failure",
                        lambda *a, **k: (False, "training finished", []))  # fmt: skip
    env = {"DEVICE": "cpu", "FTSLURM_HANG_TIMEOUT_S": "0", "SLURM_ARRAY_JOB_ID": "12",
           "SLURM_ARRAY_TASK_ID": "1", "PATH": "/usr/bin:/bin"}  # fmt: skip
    notes = lifecycle.Notes(tmp_path)
    code_ = job._run_torchrun(_plan(code), env, notes, 0.0)
    out = capsys.readouterr().out
    if requeued:
        assert code_ == job.TIME_LIMIT_EXIT and len(calls) == 1
    else:
        assert code_ == 0 and calls == []
        assert "training finished: Slurm's time-limit signal came during its last step" in out
    assert handoff.stopped_early_note(notes.time_limit).exists() is requeued


def test_a_leaked_go_file_does_not_reach_the_first_runs_worker(tmp_path: Path) -> None:
    """The first run's worker gets no FTSLURM_WARM_GO_FILE even when the submitter had one."""
    out = tmp_path / "env"
    code = (f"import os, pathlib; pathlib.Path({str(out)!r})"
            f".write_text(os.environ.get({handoff.GO_ENV!r}, 'unset'))")
    env = job.launcher_env({handoff.GO_ENV: str(tmp_path / "go"), "PATH": "/usr/bin:/bin"})
    child = job._spawn_worker(_plan(code), env, lifecycle.Notes(tmp_path))
    assert child.wait(timeout=30) == 0
    assert out.read_text() == "unset"
