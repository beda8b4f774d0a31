"""Fix 8 (FTSLURM_FIX_PEER_ABORT): a silent peer costs a survivor no more than a dead one.

A peer that stops without closing a socket (a hung or stopped process, a frozen node, a
partition) leaves every survivor inside its cross-replica collective until the process
group's timeout: PG_TIMEOUT_S, which fix 6 raises to cover a heal (82 s for the 8B preset on
one H200). The Lighthouse knows sooner: it marks the peer's heartbeat old after its heartbeat
timeout. In every training process this module

- keeps the span of each step (start_quorum's return to should_commit) and the members of
  the Manager's current quorum (fix 7's quorum recorder);
- once a step has run longer than its grace (twice the recent median step, at least
  GRACE_FLOOR_S), reads the Lighthouse's /status page every POLL_S. A member of the quorum
  whose heartbeat the page marks old, or that two reads in a row do not list, is lost: the
  step is failed (`report_error`, so should_commit discards it), the process group is
  aborted where its backend can cancel work (NCCL), and the waits on gloo's work return at
  once (gloo cannot cancel a pending receive: measured with torch 2.13, neither torchft's
  nor torch's abort ends it; gloo's thread then runs to its own timeout on tensors that the
  next step no longer uses, as zero_grad sets the gradients to None). The next quorum forms
  without the peer, as after a crash;
- fences this process when it stood still itself (SIGSTOP, a frozen node, a paused VM): a
  ticker thread notes gaps in its own ticks, and a step during which the process stood
  still longer than FREEZE_GAP_S is not committed. Its peers may have dropped it and
  committed that step without it; committing it too would give two replicas the same step
  number with different weights, which no heal would ever mend;
- writes the worker's progress for the launcher's watchdog (watchdog.py):
  FTSLURM_PROGRESS_FILE holds `{"state": ..., "time": ..., "bound_s": ..., "id": ...}`: the
  phase the training thread is in, since when, and how long that phase may last before the
  worker counts as stalled. The phases:
  - `quorum`: waiting for the Lighthouse (which bounds it): never judged;
  - `step`: the training thread computes. Once the process has timed MIN_TIMED_STEPS
    optimizer steps its bound is tight: STALL_STEPS median steps, at least the stall floor
    (FTSLURM_STALL_TIMEOUT_S); before that (the first steps: compilation, warm-up) it is
    the long bound below;
  - `wait` (a cross-replica collective or should_commit waiting on the peers), `save` (a
    checkpoint save) and `heal` (loading a peer's state): long phases, bounded by the long
    bound: FTSLURM_HANG_TIMEOUT_S, HANG_STEPS median steps or twice torchft's timeout.
  When the work a `wait` or `quorum` waited on completes, a thread other than the training
  thread writes `step` at once: a training thread that then does not move on (a CUDA call
  that never returns, a thread stopped) is judged by the tight bound, while its heartbeat
  thread keeps it alive for the Lighthouse. In DiLoCo the inner steps between two syncs
  write `step` (at most once a second) too;
- keeps a survivor alive while a stalled peer holds the quorum: torchft's quorum request
  times out (60 s) while the Lighthouse refuses a quorum without a peer that heartbeats but
  does not ask (more than half of the heartbeating replicas must ask), and upstream raises
  TimeoutError out of the training loop. The request is made again (QUORUM_RETRIES times):
  the stalled peer's own watchdog ends it, its heartbeat stops and the quorum forms.

The watch costs nothing while steps end within their grace: no thread wakes and no request
is sent. Only a hung peer's heartbeat says it is gone: a peer whose main thread hangs while
its heartbeat thread runs (a stuck GPU kernel: a stall) is still a member for the
Lighthouse; the stalled replica's own watchdog ends it by the progress rule above, its
heartbeat stops with it, and then the survivors' watch fails their step.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ftslurm.replica import patches

POLL_S = 0.5  # between reads of the Lighthouse while a step is overdue
GRACE_FLOOR_S = 1.0  # a step younger than this is never overdue
FREEZE_GAP_S = 1.5  # a process that stood still longer does not commit that step
TICK_S = 0.1
ABSENT_READS = 2  # a member missing from this many reads in a row is lost
# The launcher's watchdog kills a worker that made no progress for this long in a step: a
# multiple of the recent median optimizer step, never under the Manager's own timeout twice
# over (a collective may legitimately wait that long, e.g. on a peer's heal) nor the floor.
HANG_STEPS = 20
PROGRESS_EVERY_S = 1.0  # optimizer steps write the progress file at most this often
# The training thread's phases, as the watchdog judges them (see the module docstring)
QUORUM, STEP, WAIT, SAVE, HEAL = "quorum", "step", "wait", "save", "heal"
# A step is stalled after this many median optimizer steps (at least the stall floor): the
# median follows a machine that slows down (it times the last 20 steps), a stall never ends
STALL_STEPS = 3
MIN_TIMED_STEPS = 3  # the tight bound needs this many timed optimizer steps in this process
QUORUM_RETRIES = 10  # quorum requests that time out are made again this many times
# The optimizer-step hook fires for every optimizer a step steps (AdamW, torchtitan's
# container, torchft's wrapper: 2-4 calls microseconds apart): calls this close are one step
SAME_STEP_S = 0.05
_WATCHES: list[PeerWatch] = []  # the process's watches, for the global optimizer hook


# gloo process groups left with a receive pending on a lost peer: kept for the life of the
# process (one per silent failure), since destroying one blocks until that receive times out
_ABANDONED: list[Any] = []


class PeerLost(RuntimeError):
    """A member of the current quorum stopped heartbeating while this step waited on it."""


@dataclass
class _Step:
    token: int
    started: float  # time.monotonic()
    waits: set[threading.Event] = field(default_factory=set)


def _lost(members: list[str], me: str, page: Any, absent: dict[str, int]) -> list[str]:
    """Pure: the members (not `me`) the parsed status page shows gone. `absent` counts the
    reads in a row that did not list a member (updated here)."""
    beats = {h.replica_id: h for h in page.heartbeats}
    mine = beats.get(me)
    if mine is not None and mine.old:
        return []  # the page is stale (a Lighthouse that was paused): this process is alive
    whole = getattr(page, "readable", True)  # an unreadable page's gaps are no evidence
    lost = []
    for rid in members:
        if rid == me:
            continue
        beat = beats.get(rid)
        if beat is None:
            if not whole:
                continue
            absent[rid] = absent.get(rid, 0) + 1
            if absent[rid] >= ABSENT_READS:
                lost.append(rid)
        else:
            absent.pop(rid, None)
            if beat.old:
                lost.append(rid)
    return lost


class PeerWatch:
    """The watch of one Manager; see the module docstring. `read_page(lighthouse)` returns
    the parsed /status page or None (tests give their own)."""

    def __init__(self, manager: Any, lighthouse: str | None, progress: Path | None,
                 hang_floor_s: float, read_page: Callable[[str], Any] | None = None,
                 say: Callable[[str], None] | None = None,
                 stall_floor_s: float | None = None) -> None:  # fmt: skip
        self.manager = manager
        self.url = lighthouse or None  # the Lighthouse's base address
        self.progress = progress
        self.hang_floor_s = hang_floor_s
        # None: no tight bound (every phase gets the long one)
        self.stall_floor_s = stall_floor_s
        self._progress_lock = threading.Lock()
        self._phase = 0  # counts the training thread's announcements (_write_progress)
        self._written: str | None = None  # the state last written to the progress file
        self.read_page = read_page or _fetch
        self.say = say or (lambda line: print(line, flush=True))
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._token = 0
        self._step: _Step | None = None
        self._aborted: int | None = None  # the token of the step the watch failed
        self._lost_text = ""
        self._durations: deque[float] = deque(maxlen=20)
        self._last_tick = time.monotonic()
        self._froze: tuple[int, float] | None = None  # (token, seconds) of a gap in the ticks
        self._absent: dict[str, int] = {}
        self._members_of: object = None
        self._opt_steps: deque[float] = deque(maxlen=20)  # seconds between optimizer steps
        self._last_opt: float | None = None
        self._last_write = 0.0
        self.aborts = 0
        for target, name in ((self._watch, "ftslurm_peer_watch"), (self._tick, "ftslurm_ticker")):
            threading.Thread(target=target, name=name, daemon=True).start()

    # ---- the step's span, from the Manager's hooks

    def quorum_started(self) -> None:
        self._write_progress(QUORUM)

    def step_started(self) -> None:
        with self._lock:
            self._token += 1
            self._step = _Step(self._token, time.monotonic())
            self._wake.notify_all()
        self._write_progress(STEP)

    def step_ending(self) -> str | None:
        """At should_commit: why this step must not commit (this process stood still, or the
        watch failed it), or None. Ends the step's span."""
        with self._lock:
            step, self._step = self._step, None
            self._wake.notify_all()
            if step is None:
                return None
            now = time.monotonic()
            self._durations.append(now - step.started)
            gap = now - self._last_tick
            froze = self._froze[1] if self._froze and self._froze[0] == step.token else 0.0
            froze = max(froze, gap if gap > FREEZE_GAP_S else 0.0)
            if froze:
                return (f"this process stood still for {froze:.1f} s during the step (stopped "
                        "or frozen); its peers may have committed the step without it")
            if self._aborted == step.token:
                return self._lost_text
        return None

    def committing(self) -> None:
        """should_commit waits for the replica group's votes: a wait on peers."""
        self._write_progress(WAIT)

    def committed(self) -> None:
        self._write_progress(STEP)

    def optimizer_stepped(self) -> None:
        now = time.monotonic()
        # calls this close are the same training step (torchtitan's container, torchft's
        # wrapper): one interval
        if self._last_opt is None or now - self._last_opt >= SAME_STEP_S:
            if self._last_opt is not None:
                self._opt_steps.append(now - self._last_opt)
            self._last_opt = now
        if now - self._last_write >= PROGRESS_EVERY_S or self._written != STEP:
            self._write_progress(STEP)

    # ---- waits on cross-replica work

    def wait_done(self, work: Any) -> bool:
        """Block until `work` completes (True) or the watch fails the step (False). Outside a
        step, or for work without a future, returns True at once: upstream's wait follows."""
        try:
            fut = work.get_future()
        except Exception:  # noqa: BLE001 - a work type without a future: upstream waits
            return True
        if fut.done():
            return True
        done = threading.Event()
        phase = self._write_progress(WAIT)

        def finished(_f: Any) -> None:
            done.set()
            self._progress_from_other_thread(phase, STEP)  # the training thread is due now

        fut.add_done_callback(finished)
        with self._lock:
            step = self._step
            if step is None:
                return True
            if self._aborted == step.token:
                return fut.done()
            step.waits.add(done)
        done.wait()
        with self._lock:
            step.waits.discard(done)
            return fut.done() or self._aborted != step.token

    @property
    def lost_text(self) -> str:
        return self._lost_text

    # ---- the threads

    def _grace(self) -> float:
        median = statistics.median(self._durations) if self._durations else 0.0
        return max(GRACE_FLOOR_S, 2 * median)

    def _watch(self) -> None:
        while True:
            with self._lock:
                step = self._step
                if step is None or self._aborted == step.token or self.url is None:
                    self._wake.wait()
                    continue
                wait = step.started + self._grace() - time.monotonic()
                if wait > 0:
                    self._wake.wait(timeout=wait)
                    continue
            try:
                lost = self._check()
            except Exception as e:  # noqa: BLE001 - the watch must outlive any page it reads
                self.say(f"[ftslurm] peer watch: a read failed ({type(e).__name__}); no "
                         "evidence, watching on")  # fmt: skip
                lost = []
            if lost:
                self._abort(step, lost)
                continue
            with self._lock:
                if self._step is step:
                    self._wake.wait(timeout=POLL_S)

    def _check(self) -> list[str]:
        quorum = getattr(getattr(self.manager, "_client", None), "last_quorum", None)
        members = list(getattr(quorum, "replica_ids", None) or [])
        if quorum is not self._members_of:
            self._members_of, self._absent = quorum, {}
        if len(members) < 2 or self.url is None:
            return []
        page = self.read_page(self.url)
        if page is None or not page.heartbeats:
            return []  # no answer, or not a page we know: never abort on no evidence
        return _lost(members, _own_id(self.manager), page, self._absent)

    def _abort(self, step: _Step, lost: list[str]) -> None:
        with self._lock:
            if self._step is not step or self._aborted == step.token:
                return
            since = time.monotonic() - step.started
            self._lost_text = (f"replica(s) {', '.join(lost)} of the quorum stopped "
                               f"heartbeating to the Lighthouse; the step waited {since:.1f} s")
            self._aborted = step.token
            waits = list(step.waits)
            self.aborts += 1
            # under the lock: should_commit cannot end the step in between, so the error
            # never lands on the next step
            self.manager.report_error(PeerLost(self._lost_text))
        pg = getattr(self.manager, "_pg", None)
        if pg is not None and "gloo" in _backend(pg):
            # the next quorum replaces this group; were it destroyed then, its destructor
            # would wait for the pending receive (the quorum thread stuck for PG_TIMEOUT_S)
            _ABANDONED.append(getattr(pg, "_pg", None))
        elif pg is not None:
            try:
                pg.abort()  # NCCL: cancels the collective the stream waits on
            except Exception as e:  # noqa: BLE001 - the step is failed either way
                self.say(f"[ftslurm] peer watch: process group abort failed: {e}")
        for done in waits:
            done.set()
        self.say(f"[ftslurm] peer watch: step failed at once: {self._lost_text}")

    def _tick(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:
                gap = now - self._last_tick
                self._last_tick = now
                if gap > FREEZE_GAP_S and self._step is not None:
                    self._froze = (self._step.token, gap)

    # ---- progress for the launcher

    def _long_bound(self, median: float) -> float:
        timeout = getattr(self.manager, "_timeout", timedelta())
        return max(self.hang_floor_s, HANG_STEPS * median, 2 * timeout.total_seconds())

    def _bound(self, state: str = WAIT) -> float:
        """How long the training thread may stay in `state` before the watchdog ends it."""
        timed = list(self._opt_steps)
        median = statistics.median(timed) if timed else 0.0
        if state == STEP and self.stall_floor_s is not None and len(timed) >= MIN_TIMED_STEPS:
            return max(self.stall_floor_s, STALL_STEPS * median)
        return self._long_bound(median)

    def quorum_done(self, healing: bool) -> None:
        """From torchft's quorum thread: the quorum (and the process group's configuration)
        is done; the training thread goes on to heal (a long phase) or to its step."""
        self._progress_from_other_thread(None, HEAL if healing else STEP)

    def saving(self, started: bool) -> None:
        """Around a checkpoint save (a long phase)."""
        self._write_progress(SAVE if started else STEP)

    def _progress_from_other_thread(self, phase: int | None, state: str) -> None:
        """Write `state` unless the training thread announced another phase since `phase`
        (None: since its last quorum request): a late callback never overwrites a later
        wait with a tight `step`."""
        with self._progress_lock:
            if phase is not None and phase != self._phase:
                return
            if phase is None and self._written != QUORUM:
                return
            self._write_locked(state)

    def _write_progress(self, state: str) -> int:
        """Write the training thread's phase; its number, for _progress_from_other_thread."""
        with self._progress_lock:
            self._phase += 1
            self._write_locked(state)
            return self._phase

    def _write_locked(self, state: str) -> None:
        if self.progress is None:
            return
        self._last_write = time.monotonic()
        self._written = state
        text = json.dumps({"state": state, "time": time.time(), "bound_s": self._bound(state),
                           "id": _own_id(self.manager)})
        tmp = self.progress.with_name(self.progress.name + ".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, self.progress)
        except OSError:
            pass  # a full or gone folder: the watchdog then keeps to the heartbeat rule


def _fetch(lighthouse: str) -> Any:
    from ftslurm.lighthouse.status_page import fetch

    return fetch(lighthouse)


def _own_id(manager: Any) -> str:
    """The Manager's replica id as the Lighthouse knows it (with its per-process uuid)."""
    return str(getattr(getattr(manager, "_logger", None), "_replica_id", "") or "")


def _backend(pg: Any) -> str:
    try:
        return str(pg.getBackendName()).lower()
    except Exception:  # noqa: BLE001 - not configured yet
        return ""


def install(lighthouse: str | None, progress: Path | None, hang_floor_s: float,
            record_quorums: Callable[[Any], None], stall_floor_s: float | None = None,
            emulate_save_s: float = 0.0) -> None:  # fmt: skip
    """Patch torchft's Manager (every one built from now on gets a watch; `record_quorums`
    gives it fix 7's quorum recorder), _ManagedWork's wait and torchtitan's checkpoint save
    (a long phase); idempotent. Where another module wraps the same method, patches.ORDER
    says which wrapper runs first."""
    names = ("peer_abort.init", "peer_abort.start_quorum", "peer_abort.async_quorum",
             "peer_abort.should_commit", "peer_abort.work_wait")  # fmt: skip
    if patches.installed("peer_abort.start_quorum") or not patches.ready(*names):
        return

    def wrap_init(init: Callable[..., None]) -> Callable[..., None]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched
            init(self, *args, **kwargs)
            record_quorums(self)
            self._ftslurm_peer_watch = PeerWatch(self, lighthouse, progress, hang_floor_s,
                                                 stall_floor_s=stall_floor_s)  # fmt: skip
            _WATCHES.append(self._ftslurm_peer_watch)

        return __init__

    def optimizer_stepped(*_args: Any) -> None:
        for watch in _WATCHES:
            watch.optimizer_stepped()

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(optimizer_stepped)
    for name, make in zip(names, (wrap_init, _wrap_start_quorum, _wrap_async_quorum,
                                  _wrap_should_commit, _wrap_wait), strict=True):  # fmt: skip
        patches.install(name, make)
    _announce_saves(emulate_save_s)


def _wrap_start_quorum(start_quorum: Callable[..., Any]) -> Callable[..., Any]:
    def patched_start_quorum(self: Any, *args: Any, **kwargs: Any) -> Any:
        watch = getattr(self, "_ftslurm_peer_watch", None)
        if watch is not None:
            watch.quorum_started()
        out = _quorum_retrying(self, lambda: start_quorum(self, *args, **kwargs),
                               watch.say if watch is not None else print)  # fmt: skip
        if watch is not None:
            watch.step_started()
        return out

    return patched_start_quorum


def _wrap_async_quorum(async_quorum: Callable[..., Any]) -> Callable[..., Any]:
    def patched_async_quorum(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = async_quorum(self, *args, **kwargs)  # torchft's quorum thread
        watch = getattr(self, "_ftslurm_peer_watch", None)
        if watch is not None:
            watch.quorum_done(bool(getattr(self, "_healing", False)))
        return out

    return patched_async_quorum


def _wrap_should_commit(should_commit: Callable[..., bool]) -> Callable[..., bool]:
    def patched_should_commit(self: Any, *args: Any, **kwargs: Any) -> bool:
        watch = getattr(self, "_ftslurm_peer_watch", None)
        why = watch.step_ending() if watch is not None else None
        if why:
            self.report_error(PeerLost(why))
            print(f"[ftslurm] peer watch: not committing: {why}", flush=True)
        if watch is not None:
            watch.committing()
        ok = should_commit(self, *args, **kwargs)
        if watch is not None:
            watch.committed()
        return ok

    return patched_should_commit


def _wrap_wait(wait: Callable[..., bool]) -> Callable[..., bool]:
    def patched_wait(self: Any, timeout: timedelta | None = None) -> bool:
        watch = getattr(self._manager, "_ftslurm_peer_watch", None)
        if watch is not None and not watch.wait_done(self._work):
            self._manager.report_error(PeerLost(watch.lost_text))
            return False
        return wait(self, timeout)

    return patched_wait


def _quorum_retrying(manager: Any, start: Callable[[], Any], say: Callable[[str], None]) -> Any:
    """`start()` (torchft's start_quorum), made again when the Lighthouse formed no quorum in
    time: a survivor waits out a stalled peer (module docstring) instead of crashing."""
    for retry in range(QUORUM_RETRIES + 1):
        try:
            return start()
        except TimeoutError as e:
            if retry == QUORUM_RETRIES:
                raise
            # upstream's start_quorum re-raises a failed quorum future before a new request
            manager._quorum_future = None
            say(f"[ftslurm] quorum: no quorum in time ({str(e)[:160]}); asking again "
                f"(retry {retry + 1} of {QUORUM_RETRIES})")  # fmt: skip
    raise AssertionError("unreachable")


def _announce_saves(emulate_s: float = 0.0) -> None:
    """torchtitan's checkpoint save is a long phase for the watchdog (`save`). `emulate_s`
    (FTSLURM_EMULATE_SAVE_S, benches only): each save also holds the training thread that
    long, as a GPU's save of an 8B rank does (the false-action soak)."""
    try:
        from torchtitan.components.checkpoint import CheckpointManager  # noqa: F401
    except ImportError:  # the tiny worker runs without torchtitan
        return
    patches.install("peer_abort.save", lambda upstream: _announcing(upstream, emulate_s))


def _announcing(upstream: Callable[..., None], emulate_s: float) -> Callable[..., None]:
    """CheckpointManager.save, announced to every watch as a long phase."""

    def save(self: Any, curr_step: int, last_step: bool = False) -> None:
        try:
            saves = bool(self._should_save(curr_step, last_step))
        except Exception:  # noqa: BLE001 - another torchtitan: announce every call
            saves = True
        if not saves:
            return upstream(self, curr_step, last_step)
        for watch in _WATCHES:
            watch.saving(True)
        try:
            upstream(self, curr_step, last_step)
            if emulate_s > 0:
                time.sleep(emulate_s)
        finally:
            for watch in _WATCHES:
                watch.saving(False)

    return save
