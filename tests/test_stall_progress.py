"""The worker's side of the stall rule (peer_watch.py): the phases its training thread
announces, the bound each gets, and the writes that other threads make when the work a wait
waited on is done; a survivor's quorum request that times out is made again."""

from __future__ import annotations

import concurrent.futures
import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ftslurm.replica.worker import peer_watch

pytestmark = pytest.mark.unit


def _watch(tmp: Path, stall: float | None = 5.0) -> tuple[peer_watch.PeerWatch, Path]:
    manager = SimpleNamespace(_timeout=timedelta(seconds=30),
                              _logger=SimpleNamespace(_replica_id="r:1"))  # fmt: skip
    progress = tmp / "progress"
    return peer_watch.PeerWatch(manager, None, progress, hang_floor_s=60,
                                stall_floor_s=stall), progress  # fmt: skip


def _read(progress: Path) -> dict[str, Any]:
    return json.loads(progress.read_text())


def test_a_compute_step_gets_the_tight_bound_once_steps_are_timed(tmp_path: Path) -> None:
    watch, progress = _watch(tmp_path)
    watch.step_started()
    assert _read(progress) == {**_read(progress), "state": "step", "bound_s": 60}  # first steps
    watch._opt_steps.extend([0.5, 0.5, 0.5])
    watch.step_started()
    assert _read(progress)["bound_s"] == 5  # 3 x 0.5 s is under the floor
    watch._opt_steps.extend([3.0] * 10)
    watch.step_started()
    assert _read(progress)["bound_s"] == 9  # 3 median steps
    for phase in (watch.committing, lambda: watch.saving(True)):
        phase()
        assert _read(progress)["bound_s"] == 60  # long phases: the long bound
    assert _read(progress)["state"] == "save"
    watch.saving(False)
    assert _read(progress)["state"] == "step"


def test_without_a_stall_floor_every_phase_gets_the_long_bound(tmp_path: Path) -> None:
    watch, progress = _watch(tmp_path, stall=None)
    watch._opt_steps.extend([0.5] * 5)
    watch.step_started()
    assert _read(progress)["bound_s"] == 60


class _Work:
    def __init__(self) -> None:
        self.fut: concurrent.futures.Future[None] = concurrent.futures.Future()

    def get_future(self) -> concurrent.futures.Future[None]:
        return self.fut


def test_a_wait_is_a_long_phase_until_its_work_is_done(tmp_path: Path) -> None:
    """The survivor waiting on a stalled peer is in `wait`; the stalled replica whose work
    completed while its training thread did not move on is back in `step` (tight)."""
    import threading

    watch, progress = _watch(tmp_path)
    watch.step_started()
    work = _Work()
    states: list[str] = []
    t = threading.Thread(target=lambda: states.append(str(watch.wait_done(work))))
    t.start()
    from ftslurm.wait import wait_for

    wait_for(lambda: _read(progress)["state"] == "wait", timeout=5, what="the wait announced")
    work.fut.set_result(None)  # the peers' part arrived: the training thread is due now
    t.join(5)
    assert states == ["True"] and _read(progress)["state"] == "step"


def test_a_late_completion_never_overwrites_a_later_phase(tmp_path: Path) -> None:
    watch, progress = _watch(tmp_path)
    phase = watch._write_progress("wait")
    watch._write_progress("wait")  # the training thread is in its next wait already
    watch._progress_from_other_thread(phase, "step")
    assert _read(progress)["state"] == "wait"
    watch.quorum_done(healing=False)  # not in a quorum: nothing to say
    assert _read(progress)["state"] == "wait"
    watch.quorum_started()
    watch.quorum_done(healing=True)
    assert _read(progress)["state"] == "heal"


def test_a_done_wait_writes_nothing(tmp_path: Path) -> None:
    watch, progress = _watch(tmp_path)
    work = _Work()
    work.fut.set_result(None)
    assert watch.wait_done(work) is True and not progress.exists()


def test_a_quorum_that_times_out_is_asked_again() -> None:
    """torchft raises TimeoutError when the Lighthouse forms no quorum in time (a stalled peer
    heartbeats but does not ask): the survivor asks again rather than crash; the failed
    future is cleared, or upstream's start_quorum would raise it again."""
    manager = SimpleNamespace(_quorum_future="failed")
    calls: list[object] = []
    said: list[str] = []

    def start() -> str:
        calls.append(manager._quorum_future)
        if len(calls) < 3:
            raise TimeoutError("status: Cancelled, message: \"Timeout expired\"")
        return "quorum"

    assert peer_watch._quorum_retrying(manager, start, said.append) == "quorum"
    assert calls == ["failed", None, None] and len(said) == 2
    assert "asking again (retry 1 of" in said[0]


def test_quorum_retries_end() -> None:
    manager = SimpleNamespace(_quorum_future=None)

    def start() -> str:
        raise TimeoutError("Timeout expired")

    with pytest.raises(TimeoutError):
        peer_watch._quorum_retrying(manager, start, lambda _line: None)


def test_other_quorum_errors_are_not_retried() -> None:
    def start() -> str:
        raise RuntimeError("connection refused")

    with pytest.raises(RuntimeError):
        peer_watch._quorum_retrying(SimpleNamespace(), start, lambda _line: None)


def test_one_training_step_is_one_interval_however_many_optimizers_it_steps(
        tmp_path: Path, monkeypatch) -> None:  # fmt: skip
    """AdamW, torchtitan's container and torchft's wrapper each fire the optimizer-step hook
    in one step: timed as intervals, their median was ~0 and the stall rule's bound fell to
    its floor, ending healthy workers whose steps took 5 s on a busy machine."""
    watch, _ = _watch(tmp_path)
    now = [100.0]
    monkeypatch.setattr(peer_watch.time, "monotonic", lambda: now[0])
    for _step in range(4):
        for _optimizer in range(3):
            watch.optimizer_stepped()
            now[0] += 0.0001
        now[0] += 5.0
    assert [round(x, 2) for x in watch._opt_steps] == [5.0, 5.0, 5.0]
    watch.step_started()
    assert _read(tmp_path / "progress")["bound_s"] == pytest.approx(15, abs=0.01)  # 3 x 5 s


def test_a_stale_page_that_lists_this_process_old_is_no_evidence() -> None:
    """A Lighthouse that was paused lists every heartbeat old, this process's own too: no
    peer is lost on that page."""
    from ftslurm.lighthouse.status_page import Heartbeat, QuorumPage

    page = QuorumPage(quorum_id=1, heartbeats=[Heartbeat("a:1", 3.1, old=True),
                                               Heartbeat("b:2", 3.1, old=True)])  # fmt: skip
    assert peer_watch._lost(["a:1", "b:2"], "a:1", page, {}) == []
    page.heartbeats[0] = Heartbeat("a:1", 0.1)
    assert peer_watch._lost(["a:1", "b:2"], "a:1", page, {}) == ["b:2"]
