"""The warm next run of a replica (replica/launcher/warm_restart.py): when the launcher starts
it, hands it to a restart in place, or ends it; the worker's wait for `go`; failure injection
leaving a waiting run alone. The real run on the local Slurm is in
tests/test_restart_in_place_slurm.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ftslurm import safefile
from ftslurm.replica import handoff
from ftslurm.replica.launcher import warm_restart
from ftslurm.replica.worker import standby

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class FakeChild:
    """What Holder uses of a Popen: a pid that is no process, poll, wait, send_signal."""

    pid = 2**22 + 12345  # above pid_max's default: never a live process

    def __init__(self, rc: int | None = None) -> None:
        self.rc, self.waited = rc, 0

    def poll(self) -> int | None:
        return self.rc

    def wait(self, timeout: float | None = None) -> int:
        self.waited += 1
        self.rc = 0 if self.rc is None else self.rc
        return self.rc


def _holder(tmp_path: Path, enabled: bool = True, cap: int = 3):
    spawned: list[tuple[Path, int]] = []

    def spawn(folder: Path, restart: int) -> FakeChild:
        spawned.append((folder, restart))
        return FakeChild()

    h = warm_restart.Holder(enabled, cap, "ftslurm-test-warm-", spawn)  # type: ignore[arg-type]
    progress = tmp_path / "progress"
    return h, spawned, progress


def test_started_once_the_current_run_trains_and_only_once(tmp_path: Path) -> None:
    h, spawned, progress = _holder(tmp_path)
    assert h.maybe_start(progress, 0, blocked=False) is None and not spawned  # not training yet
    progress.write_text("{}")
    ready = h.maybe_start(progress, 0, blocked=False)
    assert ready is not None and ready.restart == 1 and len(spawned) == 1
    assert spawned[0] == (ready.folder, 1) and ready.folder.is_dir()
    assert h.maybe_start(progress, 0, blocked=False) is None and len(spawned) == 1
    h.discard()
    assert not ready.folder.exists() and safefile.read_text(ready.go_file) is None


@pytest.mark.parametrize("enabled, restart, blocked", [
    (False, 0, False),  # FT_WARM_RESTART=0
    (True, 3, False),  # no restart in place left: the next start is a requeue
    (True, 0, True),  # a stop or time-limit signal came: nothing restarts here
])  # fmt: skip
def test_not_started(tmp_path: Path, enabled: bool, restart: int, blocked: bool) -> None:
    h, spawned, progress = _holder(tmp_path, enabled=enabled, cap=3)
    progress.write_text("{}")
    assert h.maybe_start(progress, restart, blocked) is None and not spawned


def test_the_restart_takes_a_live_run_of_its_number(tmp_path: Path) -> None:
    h, _, progress = _holder(tmp_path)
    progress.write_text("{}")
    ready = h.maybe_start(progress, 0, blocked=False)
    assert h.take(1) is ready and h.ready is None
    ready.release()
    assert safefile.read_text(ready.go_file) == handoff.GO


@pytest.mark.parametrize("dead, restart", [(True, 1), (False, 2)])
def test_a_dead_or_wrong_run_is_discarded_and_the_restart_starts_cold(
        tmp_path: Path, dead: bool, restart: int) -> None:  # fmt: skip
    h, _, progress = _holder(tmp_path)
    progress.write_text("{}")
    ready = h.maybe_start(progress, 0, blocked=False)
    assert ready is not None
    if dead:
        ready.child.rc = 1  # type: ignore[attr-defined]
    assert h.take(restart) is None
    assert not ready.folder.exists()
    if not dead:  # a live one is told to stop, then waited for
        assert ready.child.waited >= 1  # type: ignore[attr-defined]


def test_the_worker_waits_for_go_or_stop(tmp_path: Path) -> None:
    go = tmp_path / "go"
    t = threading.Timer(0.3, lambda: safefile.write_atomic(go, handoff.GO))
    t.start()
    assert standby.wait_for_go(go, poll_s=0.01) is True
    t.join()
    go.write_text(handoff.STOP)
    assert standby.wait_for_go(go, poll_s=0.01) is False


def test_failure_injection_leaves_a_waiting_run_alone(tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {handoff.GO_ENV: str(go)}
    assert warm_restart.waiting(env)  # started ahead, not told anything
    go.write_text(handoff.STOP)
    assert warm_restart.waiting(env)
    go.write_text(handoff.GO)
    assert not warm_restart.waiting(env)  # it is the replica's training now
    assert not warm_restart.waiting({})  # an ordinary worker


def test_on_for_cpu_off_for_gpus_by_default() -> None:
    assert warm_restart.enabled({}, "cpu") and not warm_restart.enabled({}, "cuda")
    assert not warm_restart.enabled({"FT_WARM_RESTART": "0"}, "cpu")
    assert warm_restart.enabled({"FT_WARM_RESTART": "1"}, "cuda")


@pytest.mark.process
@pytest.mark.timeout(30)
def test_a_stopped_run_is_killed_not_released(tmp_path: Path) -> None:
    """A hang injected by pkill -STOP on a real cluster stops the waiting run as well:
    released, it would never train, so the restart starts cold and the stopped run is killed."""
    import signal

    from ftslurm import procs, runner

    h = warm_restart.Holder(True, 3, "ftslurm-test-warm-",
                            lambda folder, r: runner.spawn(["sleep", "60"], detach=False))
    progress = tmp_path / "progress"
    progress.write_text("{}")
    ready = h.maybe_start(progress, 0, blocked=False)
    assert ready is not None and h.take(1) is ready  # a live one that runs is handed over
    ready.discard(wait_s=0)
    ready = h.maybe_start(progress, 0, blocked=False)
    assert ready is not None
    ready.child.send_signal(signal.SIGSTOP)
    from ftslurm.wait import wait_for

    wait_for(ready.stopped, 5, 0.05, "the process to stop")
    assert h.take(1) is None
    assert ready.child.poll() is not None and not procs.pid_alive(ready.child.pid)


@pytest.mark.parametrize("preset, device, on", [
    ("debug_cpu", "cpu", True),  # torchtitan: its FTManager waits for `go`
    ("tiny", "cpu", False),  # the tiny worker has no such wait: a second copy would train
    ("llama3_8b_ft", "cuda", False),  # off on GPUs until measured there
])  # fmt: skip
def test_the_launcher_starts_a_warm_next_run_only_for_a_worker_that_waits(
        preset: str, device: str, on: bool) -> None:  # fmt: skip
    from ftslurm.replica.launcher import job
    from tests.test_restart_in_place import _plan

    env = {"DEVICE": device, "FTSLURM_PRESET": preset, "SLURM_ARRAY_JOB_ID": "7",
           "SLURM_ARRAY_TASK_ID": "1"}  # fmt: skip
    plan = _plan(**env, FT_MAX_RESTARTS="3")
    assert job._warm_holder(plan, env).enabled is on


def test_no_warm_next_run_outside_a_job_array() -> None:
    """A restart in place needs an array task (outside one a failed replica just ends): a
    waiting copy there would only be one more worker for a bench or a test to find."""
    from ftslurm.replica import plan as planlib
    from ftslurm.replica.launcher import job
    from tests.test_restart_in_place import ROOT

    env = {"DEVICE": "cpu", "FTSLURM_PRESET": "debug_cpu", "FTSLURM_REPLICA_ID": "1",
           "FTSLURM_GROUP_SIZE": "2"}  # fmt: skip
    plan = planlib.build_ft_plan(env, ROOT, ["torchrun"])
    assert not job._warm_holder(plan, env).enabled
    array = {**env, "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "1"}
    assert job._warm_holder(planlib.build_ft_plan(array, ROOT, ["torchrun"]), array).enabled
