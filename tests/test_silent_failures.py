"""Silent failures: a peer that stops without closing a socket (SIGSTOP: the shape of a hang,
a frozen node, a partition) costs the survivor no more than a crash (fix 8, peer_watch.py),
a process that stood still does not commit the step it stood in, and the launcher's
watchdog ends a hung worker (watchdog.py).

The training tests run two tiny replicas (a real torchft Manager, real gloo, the real
Lighthouse) through the real launcher; every process is killed by pid at the end."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from ftslurm.lighthouse.status_page import Heartbeat, QuorumPage, parse_status_html
from ftslurm.replica import handoff
from ftslurm.replica.launcher import watchdog
from ftslurm.replica.worker import peer_watch
from ftslurm.wait import WaitTimeout, wait_for
from tests.test_replica_training import (  # noqa: F401 - make_run: the fixture
    Replica,
    Run,
    _children,
    _cmdline,
    make_run,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "lighthouse"


# ---- pure parts


def test_lost_members_are_the_ones_the_lighthouse_marks_old() -> None:
    page = parse_status_html((FIXTURES / "status_one_heartbeat_old.html").read_text())
    members = ["torchtitan_ft_0:0f3c", "torchtitan_ft_1:9a1d"]
    assert peer_watch._lost(members, "torchtitan_ft_0:0f3c", page, {}) == ["torchtitan_ft_1:9a1d"]
    # seen from the old one itself: its peer is live, nothing is lost
    assert peer_watch._lost(members, "torchtitan_ft_1:9a1d", page, {}) == []


def test_a_member_missing_from_the_page_is_lost_only_after_two_reads() -> None:
    page = QuorumPage(quorum_id=1, heartbeats=[Heartbeat("a:1", 0.1)])
    absent: dict[str, int] = {}
    assert peer_watch._lost(["a:1", "b:2"], "a:1", page, absent) == []
    assert peer_watch._lost(["a:1", "b:2"], "a:1", page, absent) == ["b:2"]
    back = QuorumPage(quorum_id=1, heartbeats=[Heartbeat("a:1", 0.1), Heartbeat("b:2", 0.1)])
    assert peer_watch._lost(["a:1", "b:2"], "a:1", back, absent) == []
    assert absent == {}


def _progress(tmp: Path, state: str, age_s: float, bound_s: float, rid: str = "r:1") -> Path:
    path = tmp / "progress"
    path.write_text(json.dumps({"state": state, "time": time.time() - age_s,
                                "bound_s": bound_s, "id": rid}))  # fmt: skip
    return path


def test_watchdog_progress_rule_spares_quorum_waits_and_young_steps(tmp_path: Path) -> None:
    def dog(path: Path) -> watchdog.Watchdog:
        return watchdog.Watchdog(path, None, floor_s=60)

    def twice(d: watchdog.Watchdog) -> str | None:
        return d.check() or d.check()  # the second look

    assert twice(dog(tmp_path / "none")) is None  # before the first quorum
    assert twice(dog(_progress(tmp_path, "quorum", 500, 10))) is None  # the Lighthouse bounds it
    assert twice(dog(_progress(tmp_path, "step", 30, 10))) is None  # under the floor
    assert twice(dog(_progress(tmp_path, "step", 90, 120))) is None  # under the worker's bound
    d = dog(_progress(tmp_path, "step", 90, 10))
    assert d.check() is None  # one reading is no evidence
    why = d.check()
    assert why is not None and "no progress in its training step for 90 s" in why
    (tmp_path / "progress").write_text('{"state": "step", "time": "x"}')  # not ours: no evidence
    assert twice(dog(tmp_path / "progress")) is None


def test_watchdog_heartbeat_rule_needs_a_live_sighting_two_old_reads_and_a_stopped_worker(
        tmp_path: Path) -> None:  # fmt: skip
    pages = iter([
        QuorumPage(heartbeats=[Heartbeat("r:1", 5.0, old=True)]),  # an id never seen live
        QuorumPage(heartbeats=[Heartbeat("r:1", 0.1)]),
        QuorumPage(heartbeats=[Heartbeat("r:1", 2.5, old=True)]),
        QuorumPage(heartbeats=[Heartbeat("r:1", 3.5, old=True)]),
    ])  # fmt: skip
    dog = watchdog.Watchdog(_progress(tmp_path, "step", 0, 10), "http://lh", floor_s=60,
                            read_page=lambda _url: next(pages), stopped=lambda: True)  # fmt: skip
    assert [dog.check() for _ in range(3)] == [None, None, None]
    why = dog.check()
    assert why is not None and "lost its heartbeat (last seen 3.5 s ago)" in why


def test_a_running_worker_seen_live_costs_the_lighthouse_no_page_reads(tmp_path: Path) -> None:
    """Each launcher read the whole /status page (~0.5 MB at 1,024 replicas, served under the
    Lighthouse's quorum lock) every second: 1,024 reads a second at that size. The heartbeat
    rule needs a stopped process, so while none is the page is read only until the worker
    was seen live (at most every LIVE_LOOK_S), and each check again once one is stopped."""
    reads: list[float] = []
    now = [1000.0]
    stop = [False]

    def read_page(_url: str) -> QuorumPage:
        reads.append(now[0])
        return QuorumPage(heartbeats=[Heartbeat("r:1", 0.1 if len(reads) < 3 else 9.0,
                                                old=len(reads) >= 3)])  # fmt: skip

    dog = watchdog.Watchdog(_progress(tmp_path, "step", 0, 10**6), "http://lh", floor_s=10**6,
                            read_page=read_page, clock=lambda: now[0],
                            stopped=lambda: stop[0])  # fmt: skip
    for _ in range(600):  # ten minutes of checks, a second apart
        assert dog.check() is None
        now[0] += 1.0
    assert len(reads) == 1  # seen live at the first check: no read since
    stop[0] = True  # a process of the worker stopped (SIGSTOP): each check reads again
    assert dog.check() is None and len(reads) == 2  # still live on the page
    assert dog.check() is None and len(reads) == 3  # old: one reading is no evidence
    why = dog.check()
    assert why is not None and "lost its heartbeat" in why and len(reads) == 4


def test_a_worker_not_yet_seen_live_is_looked_for_every_few_seconds(tmp_path: Path) -> None:
    reads: list[float] = []
    now = [0.0]

    def read_page(_url: str) -> QuorumPage:
        reads.append(now[0])
        return QuorumPage(heartbeats=[])  # the worker has not heartbeated yet

    dog = watchdog.Watchdog(_progress(tmp_path, "step", 0, 10**6), "http://lh", floor_s=10**6,
                            read_page=read_page, clock=lambda: now[0])  # fmt: skip
    for _ in range(20):
        dog.check()
        now[0] += 1.0
    assert reads == [0.0, 5.0, 10.0, 15.0]


# ---- false actions: evidence that does not hold on a second look


def _old_pages(n: int, age: float = 2.4) -> list[QuorumPage]:
    """A live sighting, then `n` pages that list the heartbeat as old (a GPU worker's late
    heartbeat at start: 2.4 s on the H200's checkpoint bench)."""
    return ([QuorumPage(heartbeats=[Heartbeat("r:1", 0.1)])]
            + [QuorumPage(heartbeats=[Heartbeat("r:1", age + i, old=True)]) for i in range(n)])


def test_an_old_heartbeat_does_not_end_a_worker_that_runs(tmp_path: Path) -> None:
    """The false kill on the H200: one worker, its heartbeat listed old 2.4 s into training
    while it ran. A worker that is not stopped is left to the stall rule, however many reads
    list its heartbeat old."""
    pages = iter(_old_pages(30))
    dog = watchdog.Watchdog(_progress(tmp_path, "step", 0, 600), "http://lh", floor_s=60,
                            read_page=lambda _url: next(pages), stopped=lambda: False)  # fmt: skip
    assert [dog.check() for _ in range(31)] == [None] * 31


def test_an_old_heartbeat_with_progress_between_the_reads_is_no_evidence(tmp_path: Path) -> None:
    """Stopped or not, a worker whose progress file moved between two old reads ran."""
    pages = iter(_old_pages(4))
    progress = _progress(tmp_path, "step", 0, 600)
    dog = watchdog.Watchdog(progress, "http://lh", floor_s=60,
                            read_page=lambda _url: next(pages), stopped=lambda: True)  # fmt: skip
    assert [dog.check(), dog.check()] == [None, None]
    _progress(tmp_path, "step", 0, 600)  # the worker wrote again
    assert dog.check() is None
    assert dog.check() is not None  # unchanged since: the second look holds


def test_a_stall_needs_the_same_progress_on_the_second_look(tmp_path: Path) -> None:
    progress = _progress(tmp_path, "step", 9, 5)
    dog = watchdog.Watchdog(progress, None, floor_s=60, stall_floor_s=5)
    assert dog.check() is None
    _progress(tmp_path, "step", 8, 5)  # written again (still over the bound): a new reading
    assert dog.check() is None
    why = dog.check()
    assert why is not None and "no progress in its training step for 8 s" in why
    assert "stalled" in why


def test_a_node_that_stood_still_is_judged_from_when_it_woke(tmp_path: Path) -> None:
    """freeze-node: every process of the node stood still, the launcher too. The worker's
    progress looks 8 s old when the launcher wakes; that is no stall."""
    now = [1000.0]
    progress = tmp_path / "progress"
    progress.write_text(json.dumps({"state": "step", "time": 999.0, "bound_s": 5, "id": "r:1"}))
    dog = watchdog.Watchdog(progress, None, floor_s=60, stall_floor_s=5, clock=lambda: now[0])
    assert dog.check() is None
    now[0] = 1008.0  # 8 s without a check: the node was frozen
    assert [dog.check(), dog.check()] == [None, None]
    for _ in range(5):  # checks a second apart, still no progress
        now[0] += 1.0
        assert dog.check() is None
    now[0] += 0.75  # 5.75 s after it woke: over the bound
    assert dog.check() is None
    now[0] += 0.25  # the second look holds
    assert dog.check() is not None


@pytest.mark.parametrize("state", ["wait", "save", "heal"])
def test_long_phases_get_the_long_bound(tmp_path: Path, state: str) -> None:
    """A wait on peers, a checkpoint save or a heal is never judged by the stall floor."""
    dog = watchdog.Watchdog(_progress(tmp_path, state, 30, 5), None, floor_s=60, stall_floor_s=5)
    assert [dog.check(), dog.check()] == [None, None]
    dog = watchdog.Watchdog(_progress(tmp_path, state, 70, 5), None, floor_s=60, stall_floor_s=5)
    assert dog.check() is None
    assert dog.check() is not None


@pytest.mark.parametrize("page", [
    RuntimeError("boom"), object(), QuorumPage(heartbeats=[object()]),  # type: ignore[list-item]
])  # fmt: skip
def test_a_page_that_raises_or_is_not_a_page_is_no_evidence(tmp_path: Path, page: object) -> None:
    def read(_url: str) -> object:
        if isinstance(page, Exception):
            raise page
        return page

    dog = watchdog.Watchdog(_progress(tmp_path, "step", 0, 600), "http://lh", floor_s=60,
                            read_page=read, stopped=lambda: True)  # fmt: skip
    assert [dog.check() for _ in range(4)] == [None] * 4


# ---- real replicas


@pytest.fixture
def tiny_run(make_run):  # noqa: F811 - test_replica_training's fixture
    """A Run of two tiny replicas (per-step FT, 0.2 s steps), torn down by make_run."""
    return lambda **env: make_run("per-step", FTSLURM_PRESET="tiny", FTSLURM_TINY_STEP_S="0.2",
                                  **env)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _steps_after(rep: Replica, t: float) -> list[int]:
    return [s for when, s, _ in rep.steps() if when > t]


def _stop_inside_a_step(worker: int) -> float:
    """SIGSTOP `worker` while its training thread is inside a step (its progress file says
    `step`), not in a quorum or a wait on its peers: a stop at a random moment landed in the
    quorum on a loaded machine, where no step is left to refuse. When it stopped."""
    env = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    progress = Path(next(v for k, _, v in (e.partition(b"=") for e in env)
                         if k == handoff.PROGRESS_ENV.encode()).decode())  # fmt: skip
    for _ in range(100):
        t_stop = time.time()
        _signal(worker, signal.SIGSTOP)
        time.sleep(0.05)  # the stop has landed: the file holds the phase it stopped in
        if json.loads(progress.read_text()).get("state") == peer_watch.STEP:
            return t_stop
        _signal(worker, signal.SIGCONT)
        time.sleep(0.1)
    raise AssertionError(f"{progress} never said `step` at a stop")


def _two_stepping(run: Run) -> tuple[Replica, Replica, int]:
    r0, r1 = run.start(0), run.start(1)
    wait_for(lambda: len(r0.steps()) >= 3 and len(r1.steps()) >= 3, timeout=120,
             what="both tiny replicas stepping")  # fmt: skip
    worker = next(p for p in _children(r1.proc.pid) if "ftslurm.replica.worker.tiny" in _cmdline(p))
    return r0, r1, worker


@pytest.mark.training
@pytest.mark.timeout(300)
def test_a_stopped_peer_costs_the_survivor_no_more_than_a_crash_and_heals_after(tiny_run) -> None:
    """PG_TIMEOUT_S=60 and the watchdog off: replica 1's worker is SIGSTOPped inside its
    step (the tiny worker's pause sits between the quorum and the all-reduce, as compute
    does). Replica 0 commits again well inside the timeout (the test Lighthouse's 5 s
    heartbeat timeout and a step), says why, and trains alone. SIGCONT: replica 1 does not
    commit the step it was frozen in, joins again, heals, and both replicas' checksums agree
    after."""
    run = tiny_run(PG_TIMEOUT_S="60", FTSLURM_HANG_TIMEOUT_S="0", FTSLURM_CHECKSUM_EVERY="1")
    r0, r1, worker = _two_stepping(run)
    assert "[ftslurm] fix peer_abort: ON" in r0.text()
    t_stop = _stop_inside_a_step(worker)
    try:
        wait_for(lambda: len(_steps_after(r0, t_stop + 0.5)) >= 2, timeout=60,
                 what="replica 0 committing alone")  # fmt: skip
        first = min(when for when, _, _ in r0.steps() if when > t_stop + 0.5)
    finally:
        _signal(worker, signal.SIGCONT)
    assert first - t_stop < 15, f"survivor's next commit {first - t_stop:.1f} s after the stop"
    assert "peer watch: step failed at once: replica(s) torchtitan_ft_1:" in r0.text()
    try:
        wait_for(lambda: "peer watch: not committing: this process stood still" in r1.text(),
                 timeout=30, what="replica 1 refusing the step it stood still in")  # fmt: skip
    except WaitTimeout as e:
        raise AssertionError(f"{e}; replica 1's log ends:\n{r1.text()[-4000:]}") from None
    t_cont = time.time()
    wait_for(lambda: len(_steps_after(r1, t_cont)) >= 3, timeout=90,
             what="replica 1 training again after SIGCONT")  # fmt: skip
    assert r1.proc.poll() is None  # the same attempt carried on
    a, b = r0.checksums(), r1.checksums()
    common = sorted(k for k in set(a) & set(b) if k[0] > max(_steps_after(r1, 0)[:1] or [0]))
    later = [k for k in common if k[0] >= min(_steps_after(r1, t_cont))]
    assert later, (sorted(a)[-5:], sorted(b)[-5:])
    assert all(a[k] == b[k] for k in later), [(k, a[k], b[k]) for k in later if a[k] != b[k]]


@pytest.mark.training
@pytest.mark.timeout(300)
def test_the_watchdog_ends_a_stopped_worker(tiny_run) -> None:
    """The launcher's watchdog on: a SIGSTOPped worker is SIGKILLed once the Lighthouse has
    lost its heartbeat (2 s timeout, two reads), and the attempt ends as after a crash (here
    outside a job array: nothing to requeue)."""
    run = tiny_run(PG_TIMEOUT_S="30", FTSLURM_HANG_TIMEOUT_S="60")
    r0, r1, worker = _two_stepping(run)
    t_stop = time.time()
    _signal(worker, signal.SIGSTOP)
    wait_for(lambda: r1.proc.poll() is not None, timeout=60, what="replica 1's launcher to end")
    took = time.time() - t_stop
    text = r1.text()
    assert "watchdog: ending the training worker: the Lighthouse lost its heartbeat" in text
    assert "not requeueing (training exited with code 137)" in text
    assert took < 15, f"the watchdog took {took:.1f} s"
    assert r0.proc.poll() is None and len(_steps_after(r0, t_stop + took)) >= 0


def test_optimizer_steps_are_progress_and_size_the_watchdogs_bound(tmp_path: Path) -> None:
    """DiLoCo's inner steps run between two syncs without the Manager: each optimizer step
    writes the progress (at most once a second), so a long sync interval is no hang; the
    bound is 20 median optimizer steps, twice torchft's timeout, or the floor."""
    from datetime import timedelta
    from types import SimpleNamespace

    manager = SimpleNamespace(_timeout=timedelta(seconds=7),
                              _logger=SimpleNamespace(_replica_id="torchtitan_ft_1:ab"))
    progress = tmp_path / "progress"
    watch = peer_watch.PeerWatch(manager, None, progress, hang_floor_s=5)
    watch.optimizer_stepped()
    first = json.loads(progress.read_text())
    assert first["state"] == "step" and first["id"] == "torchtitan_ft_1:ab"
    assert first["bound_s"] == 14  # no step timed yet: twice torchft's timeout
    watch._opt_steps.extend([3.0, 3.0, 3.0])
    watch._last_write = 0.0
    watch.optimizer_stepped()
    assert json.loads(progress.read_text())["bound_s"] == 60  # 20 x the median of 3 s


@pytest.mark.training
@pytest.mark.timeout(300)
def test_a_stalled_worker_is_ended_by_its_progress_and_the_survivor_trains_on(tiny_run) -> None:
    """The stall: replica 1's training thread stops (ptrace of its main thread, through
    `python -m ftslurm.stall`), its heartbeat thread runs on, so the Lighthouse keeps it.
    PG_TIMEOUT_S=60, as on the 8B preset the cross-replica timeout is long: it must not be
    what bounds the stall. The stalled worker's watchdog ends it by its progress (a compute
    step 3 median steps overdue, at least FTSLURM_STALL_TIMEOUT_S=5); its heartbeat stops
    with it, the survivor's step fails at once (fix 8) and it commits alone, well inside the
    timeout, and never crashes."""
    import subprocess
    import sys

    run = tiny_run(PG_TIMEOUT_S="60", FTSLURM_HANG_TIMEOUT_S="60", FTSLURM_STALL_TIMEOUT_S="5")
    r0, r1, worker = _two_stepping(run)
    wait_for(lambda: len(r1.steps()) >= 8, timeout=60, what="replica 1 timing its steps")
    t_stall = time.time()
    stall = subprocess.Popen([sys.executable, "-m", "ftslurm.stall", "stall", str(worker), "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timed_out = None
    try:
        wait_for(lambda: r1.proc.poll() is not None, timeout=60,
                 what="replica 1's launcher to end its stalled worker")  # fmt: skip
        ended = time.time() - t_stall
        wait_for(lambda: len(_steps_after(r0, t_stall + ended)) >= 2, timeout=60,
                 what="replica 0 committing alone")  # fmt: skip
        first = min(when for when, _, _ in r0.steps() if when > t_stall + ended)
    except WaitTimeout as e:
        timed_out = e
    finally:
        stall.terminate()
        out = stall.communicate(timeout=30)[0]
    if timed_out is not None:  # what the stall tool and replica 1 said, to tell why
        pytest.fail(f"{timed_out}\nstall tool: {out[-1500:]}\nreplica 1: {r1.text()[-3000:]}")
    text = r1.text()
    assert "watchdog: ending the training worker: no progress in its training step" in text, \
        text[-2000:]
    assert "stalled the main thread of pid(s)" in out, out
    assert ended < 15, f"the watchdog took {ended:.1f} s"
    assert first - t_stall < 20, f"survivor's next commit {first - t_stall:.1f} s after the stall"
    assert r0.proc.poll() is None, r0.text()[-2000:]  # the survivor never crashed
    assert "exited with code" not in r0.text() and "watchdog" not in r0.text()


def test_a_member_missing_from_an_unreadable_page_is_not_lost() -> None:
    """A page with items the parser could not read (a hostile replica id beside them) says
    nothing about who is missing from it; an old heartbeat it does list still counts."""
    page = QuorumPage(quorum_id=3, heartbeats=[Heartbeat("a:1", 0.1)], rejected=1)
    absent: dict[str, int] = {}
    assert [peer_watch._lost(["a:1", "b:2"], "a:1", page, absent) for _ in range(3)] == [[]] * 3
    page.heartbeats.append(Heartbeat("b:2", 9.0, old=True))
    assert peer_watch._lost(["a:1", "b:2"], "a:1", page, absent) == ["b:2"]
