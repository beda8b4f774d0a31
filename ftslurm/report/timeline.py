"""Events -> what happened: quorums, failures, requeues, recoveries, degraded intervals.

One pass over the events of all files merged by time (`heapq.merge`: each file is in time
order by itself), after `clock.settle` has set implausible times aside. The state machine
keeps only what the report prints (one record per quorum CHANGE, per failure, per attempt,
per heal) plus bounded per-replica counters, so memory does not grow with the number of
steps. It builds a `model.Report` and knows nothing of how one is printed (`render.py`).

Logs come from nodes whose clocks disagree by seconds, so the merged order of two files'
lines is not the order things happened in: what two logs say of one thing is paired by
what they name, not by their times (the two sides of a heal: heals.py; a survivor's next
commit: the quorum id it reconfigured to; an attempt: the uuid its own log names after its
launch line), and a duration between two clocks is never negative (`model.elapsed`).

Semantics (as torchft's logs of the recorded runs in tests/fixtures/report show them):
- A quorum change is a new `quorum_id`; `Quorum!` repeats every round and is read once per id.
  One without members, or with a negative step, is malformed.
- A replica is `<prefix>_<index>:<uuid>`; the uuid changes on every restart, so a new uuid for
  an index is a new attempt. Report ids are the index (`"1"`).
- A failure is a replica that leaves a quorum while others of its group stay, or comes back
  under a new uuid without having left. Its time is, best first: the injected event
  (events.jsonl), a survivor's failed commit after the replica was last seen, the quorum
  change that showed it (`time_source` says which). The group leaving all at once is the run
  ending (or another job on the same Lighthouse), not a failure; nor is leaving after
  torchtitan's `Training completed`. The survivors' next commit is their first one in the
  quorum that showed it.
- Recovery ranks (`peers need recovery from us [1]`, `recover_src_replica_rank=0`) are ranks
  in the quorum, participants ordered by replica id. Step-0 healing is the initial sync.
- Every rank logs its own lines: commits are deduplicated by (replica, step).
- The event log is shared by runs: a line of another job is left out (sources.py); one that
  names no job is the run's only inside its window (its replica logs' first to last line,
  SLACK_S either side) and, where its launches name nodes, on one of them. Left-out lines are
  listed with why (`Report.left_out`).
- A heal with no failure before it is a start-up sync (a replica that joined its first quorum
  late), counted apart from the recoveries (`Recovery.after_failure`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ftslurm import logvocab as L
from ftslurm.event_log import FAILURE_ACTIONS, RESTART_ACTIONS
from ftslurm.logvocab import Event, split_replica_id
from ftslurm.report.clock import SLACK_S, Settled, settle
from ftslurm.report.goodput import measure
from ftslurm.report.heals import Heals
from ftslurm.report.model import (
    Attempt,
    Baseline,
    ClockBack,
    CommitFailure,
    Degraded,
    Entry,
    Failure,
    LeftOut,
    Quorum,
    Recovery,
    ReplicaSteps,
    Report,
    elapsed,
    went_back,
)
from ftslurm.report.model import replica_key as _idx
from ftslurm.report.reader import ParseStats
from ftslurm.report.sources import (
    ReportFiles,
    clock_offset,
    device_of,
    find_run_files,
    iter_run_events,
)

# ---------------------------------------------------------------- the state machine


class _Builder:
    """The one-pass state machine; see the module docstring for the rules."""

    def __init__(self, group_size: int | None, job: str | None,
                 replica_sources: frozenset[str] = frozenset()) -> None:
        self.forced_group = group_size
        self.job = job
        # The run's window, for the event-log lines that name no job (see feed): the
        # first and last time of its replica logs' lines, and the nodes its launches name.
        self.replica_sources = replica_sources
        self.log_first: float | None = None
        self.log_last: float | None = None
        self.nodes: set[str] = set()
        self.held: list[Event] = []  # such lines, until the run's first replica line
        self.unjobbed: list[tuple[Event, Entry | None]] = []  # such lines taken, their entry
        self.left_out: list[LeftOut] = []
        self.baseline: Baseline | None = None
        self.device: str | None = None
        self.epoch = 0
        self.quorums: list[Quorum] = []
        self.seen_qids: set[tuple[int, int]] = set()
        self.current: Quorum | None = None
        self.failures: list[Failure] = []
        self.commit_failures: list[CommitFailure] = []
        self.attempts: dict[str, list[Attempt]] = {}
        self.by_uuid: dict[tuple[str, str | None], Attempt] = {}
        self.finished: dict[str, float | bool] = {}  # full id -> when it finished training
        self.log_ids: set[str] = set()  # full replica ids the replica logs speak for
        self.heals = Heals()  # both sides of each heal, paired at the end (heals.py)
        self.timeline: list[Entry] = []
        self.reconf: dict[str, int] = {}  # full id -> quorum id it reconfigured to
        self.qmembers: dict[tuple[int, int], list[str]] = {}
        self.pending_injected: dict[str, list[Event]] = {}
        self.restart_actions: dict[str, list[Event]] = {}
        self.awaiting_commit: list[Failure] = []
        self.recent_commit_fail: list[CommitFailure] = []
        self.log_prefixes: dict[str, int] = {}  # prefixes seen in replica logs
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.max_step: int | None = None
        self.init_syncs = 0
        self.injected_all: list[Event] = []
        self.malformed = 0  # events the parser took whose content cannot be (0 members, step < 0)
        # (quorum id, `prefix_i`, time, step): each replica's first commit after reconfiguring
        # for a quorum, in its own log; a failure's survivor commit is found among them
        self.first_commits: list[tuple[int, str, float | None, int]] = []
        self.reconf_committed: dict[str, int] = {}  # full id -> quorum id of its last such
        self.settled = Settled([])  # what clock.settle found (plausible times, clocks set back)
        self.negatives: list[ClockBack] = []  # durations between two clocks that came out < 0
        # (file, replica index) -> the attempt its last launch / process-start line began,
        # until a line of that file names its uuid (see _claim)
        self.unclaimed: dict[tuple[str, str], Attempt] = {}

    # -- helpers
    def _entry(self, t: float | None, kind: str, text: str, replica: str | None = None,
               rid: str | None = None) -> None:
        self.timeline.append(Entry(t, kind, text, replica, rid))

    def _atts(self, gkey: str) -> list[Attempt]:
        """The attempts of `prefix_i`; launcher lines seen before any id (they carry only the
        index) are adopted by the first prefixed id of that index."""
        atts = self.attempts.get(gkey)
        if atts is None:
            idx = _idx(gkey)[1]
            atts = self.attempts.pop(idx, []) if idx != gkey else []
            for a in atts:
                a.replica = gkey
            self.attempts[gkey] = atts
        return atts

    def _attempt_for_uuid(self, gkey: str, uuid: str | None, t: float | None) -> Attempt:
        found = self.by_uuid.get((gkey, uuid))
        if found is not None:
            return found
        atts = self._atts(gkey)
        last = atts[-1] if atts else None
        if last is not None and last.uuid is None:
            last.uuid = uuid
            self.by_uuid[(gkey, uuid)] = last
            return last
        a = Attempt(gkey, len(atts), t, "first-seen", uuid)
        atts.append(a)
        self.by_uuid[(gkey, uuid)] = a
        if a.number > 0:
            self._entry(t, "attempt", f"replica {_short(gkey)} seen with a new id (restarted)",
                        gkey, f"{gkey}:{uuid}")
        return a

    def _new_attempt(self, gkey: str, t: float | None, source: str, node: str = "",
                     number: int | None = None, restart: int = 0) -> Attempt:
        atts = self._atts(gkey)
        a = Attempt(gkey, len(atts), t, source, node=node, launch_number=number, restart=restart)
        atts.append(a)
        return a

    # -- events
    def feed(self, ev: Event) -> None:
        if self.replica_sources and ev.kind == L.INJECTED and not ev.job:
            if self.log_first is None:  # ours only if the run's first replica line is near
                self.held.append(ev)
            else:
                self._place(ev)
            return
        if ev.source in self.replica_sources and ev.time is not None:
            if self.log_first is None:
                self.log_first = ev.time
                self._release(ev.time)
            self.log_last = ev.time
        self._take(ev)

    def _release(self, t: float) -> None:
        """The lines held until the run's first replica line (at `t`): within SLACK_S before
        it (clocks disagree) they are the run's; earlier ones are left out, and said."""
        held, self.held = self.held, []
        for e in held:
            if e.time is not None and e.time < t - SLACK_S:
                self._leave(e, "no job, and before the run's first log line")
            else:
                self._place(e)

    def _place(self, e: Event) -> None:
        if e.node and self.nodes and e.node not in self.nodes:
            self._leave(e, f"no job, and on {e.node}, where no replica of the run was launched")
            return
        n = len(self.timeline)
        self._take(e)
        self.unjobbed.append((e, self.timeline[n] if len(self.timeline) > n else None))

    def _leave(self, e: Event, why: str) -> None:
        self.left_out.append(LeftOut(e.time, e.detail, e.replica, e.node, e.job, why))

    def _scope_end(self) -> None:
        """Lines of no job after the run's last replica line (beyond SLACK_S) are another
        story's, and are taken back out. No quorum of the run comes after its last line, so
        such a line can only have been pending, listed in the timeline, and counted in the
        run's span: those three are undone."""
        for e in self.held:  # no replica line at all came
            self._place(e)
        self.held = []
        if self.log_last is None:
            return
        for e, entry in self.unjobbed:
            if e.time is None or e.time <= self.log_last + SLACK_S:
                continue
            self._leave(e, "no job, and after the run's last log line")
            self.injected_all = [x for x in self.injected_all if x is not e]
            for acts in (*self.pending_injected.values(), *self.restart_actions.values()):
                acts[:] = [x for x in acts if x is not e]
            if entry is not None:
                self.timeline = [x for x in self.timeline if x is not entry]

    def _take(self, ev: Event) -> None:
        t = ev.time
        if t is not None:
            if self.first_time is None or t < self.first_time:
                self.first_time = t
            if self.last_time is None or t > self.last_time:
                self.last_time = t
        if ev.step is not None and ev.kind in (L.COMMIT, L.HEALED) and (
            self.max_step is None or ev.step > self.max_step
        ):
            self.max_step = ev.step
        if ev.replica and ":" in ev.replica and self.unclaimed:
            self._claim(ev)
        handler = getattr(self, "on_" + ev.kind, None)
        if handler is not None:
            handler(ev)

    def _claim(self, ev: Event) -> None:
        """A full id in a replica's own log: the attempt that the file's last launch or
        process-start line began has that uuid, whatever the times say. A quorum read earlier
        (another node's clock ahead of this one) may have shown the uuid first, as a
        `first-seen` attempt: that is this attempt seen early, one attempt and not two."""
        assert ev.replica is not None
        gkey, index = _idx(ev.replica)
        a = self.unclaimed.pop((ev.source, index), None)
        uuid = split_replica_id(ev.replica)[2]
        if a is None or a.uuid is not None:
            return
        atts = self._atts(gkey)
        seen = self.by_uuid.get((gkey, uuid))
        if seen is not None:
            if seen.source != "first-seen" or seen not in atts:
                return
            atts.remove(seen)
            if a.quorum_time is None:
                a.quorum_time = seen.quorum_time
            if a.healed_time is None:
                a.healed_time, a.healed_step = seen.healed_time, seen.healed_step
            rid = f"{gkey}:{uuid}"
            self.timeline = [e for e in self.timeline if not (e.kind == "attempt" and e.rid == rid)]
        a.uuid = uuid
        self.by_uuid[(gkey, uuid)] = a

    def _lighthouse_restarted(self, ev: Event) -> bool:
        """A seen id again, lower than the current one, with other members: the Lighthouse
        restarted and counts from 1 again (seen from replica logs, without its own log)."""
        cur = self.current
        if cur is None or ev.quorum_id is None or ev.quorum_id >= cur.quorum_id:
            return False
        old = self.qmembers.get((self.epoch, ev.quorum_id), [])
        return sorted(m.replica_id for m in ev.members) != sorted(old)

    def on_finished(self, ev: Event) -> None:
        if not ev.replica:
            return
        self._note_log_prefix(ev.replica)
        self.finished[ev.replica] = ev.time if ev.time is not None else True
        gkey, _ = _idx(ev.replica)
        self._entry(ev.time, "finished", f"replica {_short(gkey)} finished training", gkey)

    def on_lighthouse_start(self, ev: Event) -> None:
        if self.quorums:
            self.epoch += 1
        self._entry(ev.time, "lighthouse", "Lighthouse started")

    def on_quorum(self, ev: Event) -> None:
        assert ev.quorum_id is not None
        if not ev.members or any(m.step < 0 for m in ev.members):
            self.malformed += 1  # no quorum has no member; no step is negative
            return
        qkey = (self.epoch, ev.quorum_id)
        if qkey in self.seen_qids:
            if not self._lighthouse_restarted(ev):
                return
            self.epoch += 1
            qkey = (self.epoch, ev.quorum_id)
        self.seen_qids.add(qkey)
        members = sorted(ev.members, key=lambda m: m.replica_id)
        ids = [m.replica_id for m in members]
        self.qmembers[qkey] = ids
        step = max((m.step for m in members), default=0)
        if self.max_step is None or step > self.max_step:
            self.max_step = step
        q = Quorum(
            ev.quorum_id, ev.time, step, ids,
            {m.replica_id: m.commit_failures for m in members if m.commit_failures},
            ev.prev_round_time, self.epoch,
        )
        prev = self.current
        self.quorums.append(q)
        self.current = q
        for m in members:
            gkey, _ = _idx(m.replica_id)
            _, _, uuid = split_replica_id(m.replica_id)
            a = self._attempt_for_uuid(gkey, uuid, ev.time)
            if a.quorum_time is None:
                a.quorum_time = ev.time
        self._diff(prev, q, ev)

    def _diff(self, prev: Quorum | None, q: Quorum, ev: Event) -> None:
        """Who left, who came back with a new uuid: the failures a quorum change shows."""
        if prev is None:
            return
        new_by_key = {_idx(r)[0]: r for r in q.participants}
        new_prefixes = {split_replica_id(r)[0] for r in q.participants}
        for old in prev.participants:
            gkey, idx = _idx(old)
            prefix = split_replica_id(old)[0]
            if prefix not in new_prefixes:
                continue  # the whole group left: end of run, or another job's quorum
            now = new_by_key.get(gkey)
            if now == old:
                continue
            done = self.finished.get(old)
            if now is None and done is not None and (
                done is True or ev.time is None or done <= ev.time + SLACK_S
            ):
                continue  # it finished training: leaving is not a failure
            kind = "left-quorum" if now is None else "restarted"
            f = Failure(
                ev.time, gkey, old, q.step, kind, "quorum-change",
                detected_time=ev.time, last_seen_time=q.last_seen_before, quorum_id=q.quorum_id,
                quorum_pair=(len(self.quorums) - 2, len(self.quorums) - 1),
            )
            inj = self._take_injected(gkey, ev.time)
            if inj is not None:
                f.time, f.kind, f.time_source, f.node = inj.time, inj.detail, "injected", inj.node
                f.rank = inj.rank
            else:
                cands = [
                    c.time for c in self.recent_commit_fail
                    if c.time is not None and _idx(c.replica_id)[0] != gkey
                    and (f.last_seen_time is None or c.time >= f.last_seen_time)
                    and (ev.time is None or c.time <= ev.time)
                ]
                if cands:
                    f.time, f.time_source = min(cands), "commit-failure"
            self.failures.append(f)
            self.awaiting_commit.append(f)

    def _take_injected(self, gkey: str, t: float | None) -> Event | None:
        idx = _idx(gkey)[1]
        pend = self.pending_injected.get(idx)
        if not pend:
            return None
        for i in range(len(pend) - 1, -1, -1):
            e = pend[i]
            if t is None or e.time is None or e.time <= t + SLACK_S:
                del pend[: i + 1]
                return e
        return None

    def on_injected(self, ev: Event) -> None:
        self.injected_all.append(ev)
        where = f" on {ev.node}" if ev.node else ""
        who = f"replica {ev.replica}" if ev.replica is not None else "no replica"
        if ev.rank is not None:  # one rank's worker (simulate-failure --rank)
            who = f"rank {ev.rank} of {who}"
        self._entry(ev.time, "injected", f"injected {ev.detail}: {who}{where}", ev.replica)
        if ev.replica is None:
            return
        if ev.detail in FAILURE_ACTIONS:
            self.pending_injected.setdefault(ev.replica, []).append(ev)
        if ev.detail in RESTART_ACTIONS and not self._bind_late(ev):
            self.restart_actions.setdefault(ev.replica, []).append(ev)

    def _bind_late(self, ev: Event) -> bool:
        """A resume/restart whose attempt's first line is already read: that node's clock is
        behind the event log's by up to SLACK_S. (Not a requeue: that also ends the attempt.)"""
        if ev.detail in FAILURE_ACTIONS or ev.time is None:
            return False
        atts = [a for k, v in self.attempts.items() if _idx(k)[1] == ev.replica for a in v]
        a = atts[-1] if atts else None
        if (a is None or a.number == 0 or a.restart_time is not None or a.start_time is None
                or a.claimed or not ev.time - SLACK_S <= a.start_time <= ev.time):
            return False
        a.restart_time, a.restart_source = ev.time, ev.detail
        return True

    def on_commit(self, ev: Event) -> None:
        """Emitted commits only (see reader.iter_file_events); the counts are in stats."""
        rid = ev.replica or "?"
        self.log_ids.add(rid)
        gkey, _ = _idx(rid)
        step = ev.step if ev.step is not None else -1
        _, _, uuid = split_replica_id(rid)
        if ev.ok:
            a = self._attempt_for_uuid(gkey, uuid, ev.time)
            if a.healed_time is None:
                a.healed_time, a.healed_step = ev.time, step
            qid = self.reconf.get(rid)
            if qid is not None and self.reconf_committed.get(rid) != qid:
                self.reconf_committed[rid] = qid
                self.first_commits.append((qid, gkey, ev.time, step))
            if self.awaiting_commit:
                left = []
                for f in self.awaiting_commit:
                    if f.replica != gkey and (
                        f.detected_time is None or ev.time is None or ev.time >= f.detected_time
                    ):
                        f.next_commit_time, f.next_commit_step, f.survivor = ev.time, step, gkey
                    else:
                        left.append(f)
                self.awaiting_commit = left
        else:
            cf = CommitFailure(ev.time, gkey, rid, step, ev.detail)
            self.commit_failures.append(cf)
            self.recent_commit_fail.append(cf)
            del self.recent_commit_fail[:-16]
            err = f" (errored={cf.detail})" if cf.detail else ""
            self._entry(ev.time, "commit-failure",
                        f"replica {_short(gkey)} failed to commit step {step}{err}", gkey)

    def on_reconfigure(self, ev: Event) -> None:
        if ev.replica and ev.quorum_id is not None:
            self.reconf[ev.replica] = ev.quorum_id
            self._note_log_prefix(ev.replica)

    def _note_log_prefix(self, rid: str) -> None:
        if ":" in rid:
            self.log_ids.add(rid)
        p = split_replica_id(rid)[0]
        self.log_prefixes[p] = self.log_prefixes.get(p, 0) + 1

    def on_launch(self, ev: Event) -> None:
        if ev.node:
            self.nodes.add(ev.node)
        gkey = self._gkey_for_index(ev.replica or "?")
        a = self._new_attempt(gkey, ev.time, "launch", ev.node, number=ev.rank,
                              restart=ev.restart)
        self.unclaimed[(ev.source, _idx(gkey)[1])] = a
        where = (f" on {ev.node}" if ev.node else "") + (f" ({ev.detail})" if ev.detail else "")
        self._entry(ev.time, "attempt",
                    f"replica {_short(gkey)} attempt {ev.rank} launched{where}", gkey)
        if L.TAKEN_FROM in ev.detail:
            # a warm spare took the slot: the resume or requeue injected before it was the
            # failed task's, on another node, and is no start of this attempt
            a.claimed = True
            self.restart_actions.pop(_idx(gkey)[1], None)
            return
        self._bind_restart(a)

    def _gkey_for_index(self, idx: str) -> str:
        for gkey in self.attempts:
            if _idx(gkey)[1] == idx:
                return gkey
        prefix = max(self.log_prefixes, key=self.log_prefixes.get) if self.log_prefixes else None
        return f"{prefix}_{idx}" if prefix else idx

    def on_manager_start(self, ev: Event) -> None:
        if not ev.replica:
            return
        gkey, _ = _idx(ev.replica)
        self._note_log_prefix(ev.replica)
        self.heals.manager_started(ev)
        atts = self._atts(gkey)
        last = atts[-1] if atts else None
        if last is not None and last.source == "launch" and not last.manager_started:
            last.manager_started = True
            return
        a = self._new_attempt(gkey, ev.time, "manager-start")
        a.manager_started = True
        self.unclaimed[(ev.source, _idx(gkey)[1])] = a
        where = f" (manager {ev.detail})" if ev.detail else ""
        self._entry(ev.time, "attempt", f"replica {_short(gkey)} process started{where}", gkey)
        self._bind_restart(a)

    def _bind_restart(self, a: Attempt) -> None:
        acts = self.restart_actions.get(_idx(a.replica)[1])
        if not acts or a.number == 0:
            return
        e = acts[-1]
        if a.start_time is None or e.time is None or e.time <= a.start_time + SLACK_S:
            a.restart_time, a.restart_source = e.time, e.detail
            acts.clear()

    def _heal_step(self, ev: Event) -> bool:
        """Whether a heal line is a recovery: step > 0 (step 0 is the initial sync); a
        negative step is malformed."""
        if ev.replica:
            self._note_log_prefix(ev.replica)
        if ev.step is not None and ev.step < 0:
            self.malformed += 1
            return False
        return bool(ev.replica and ev.step)

    def on_peers_recover(self, ev: Event) -> None:
        if ev.replica and ev.step == 0:
            self._note_log_prefix(ev.replica)
            self.init_syncs += 1
        elif self._heal_step(ev):
            self.heals.side(ev, self.reconf.get(ev.replica or ""))

    def on_heal_required(self, ev: Event) -> None:
        if self._heal_step(ev):  # max_step=0: the initial sync, not a recovery
            self.heals.side(ev, self.reconf.get(ev.replica or ""))

    def on_heal_fetch(self, ev: Event) -> None:
        if ev.replica:
            self._note_log_prefix(ev.replica)
            self.heals.fetching(ev)

    def on_healed(self, ev: Event) -> None:
        if self._heal_step(ev):
            self.heals.side(ev, None)

    # -- the end
    def _run_span(self, stats: ParseStats) -> None:
        """First/last time of the run: its replica logs (else its Lighthouse logs), so that
        another job's lines at the end of a shared Lighthouse log do not stretch it."""
        spans = ([(k, v) for k, v in stats.spans.items() if not v[2]]
                 or list(stats.spans.items()))
        ok = self.settled.plausible
        firsts = [f for k, (f, _, _) in spans if f is not None and ok(f, Path(k).name)]
        lasts = [la for k, (_, la, _) in spans if la is not None and ok(la, Path(k).name)]
        firsts += [e.time for e in self.injected_all if e.time is not None]
        lasts += [e.time for e in self.injected_all if e.time is not None]
        if firsts:
            self.first_time = min(firsts)
        if lasts:
            self.last_time = max(lasts)

    def finish(self, stats: ParseStats) -> Report:
        self._scope_end()
        self._run_span(stats)
        stats.malformed += self.malformed
        # heal ranks are ranks among all of a quorum's participants: before they are narrowed
        heals = self.heals.resolve(self.quorums)
        # The run's replicas: prefixes seen in the replica logs, else all in the quorums.
        if self.log_prefixes:
            prefixes = sorted(self.log_prefixes)
        else:
            counts = Counter(split_replica_id(r)[0] for q in self.quorums for r in q.participants)
            prefixes = [max(counts, key=counts.get)] if counts else []
        ours = set(prefixes)

        def mine(rid: str | None) -> bool:
            return rid is not None and split_replica_id(rid)[0] in ours

        # Ours: a quorum with a member the replica logs speak for (a Lighthouse log may hold
        # other runs of the same job name before or after this one); without such ids, every
        # quorum of the run's prefix.
        ids = self.log_ids | {k.decode("utf-8", "replace") for k in stats.commits}
        quorums, foreign, our_q = [], 0, set()
        before_ours: float | None = None  # the last foreign quorum before the first of ours
        for i, q in enumerate(self.quorums):
            parts = [r for r in q.participants if mine(r)]
            if not parts or (ids and not any(r in ids for r in parts)):
                foreign += bool(q.participants)
                if not quorums and q.time is not None:
                    before_ours = q.time
                continue
            q.participants = parts
            quorums.append(q)
            our_q.add(i)
        known = ids | {r for q in quorums for r in q.participants}
        qtimes = [q.time for q in quorums if q.time is not None]
        if qtimes:
            self.first_time = min(qtimes[0], self.first_time or qtimes[0])
            self.last_time = max(qtimes[-1], self.last_time or qtimes[-1])
        failures = [
            f for f in self.failures
            if mine(f.replica_id) and (f.quorum_pair is None or set(f.quorum_pair) <= our_q)
        ]
        for f in failures:
            self._next_commit_in_quorum(f)
        # Injected failures that no quorum change accounted for (a kill the run absorbed).
        for pend in self.pending_injected.values():
            for e in pend:
                gkey = self._gkey_for_index(e.replica or "?")
                failures.append(Failure(
                    e.time, gkey, gkey, self._step_at(quorums, e.time), e.detail,
                    "injected-only", node=e.node, rank=e.rank,
                ))
        failures.sort(key=lambda f: (f.time is None, f.time or 0.0))
        attempts = []
        for k, atts in self.attempts.items():
            if not _mine_key(k, ours):
                continue
            kept = [a for a in atts if a.uuid is None or f"{a.replica}:{a.uuid}" in known]
            for n, a in enumerate(kept):
                a.number = a.launch_number if a.launch_number is not None else n
            attempts += kept
        group = self.forced_group or max(
            [len(q.participants) for q in quorums]
            + [len({_idx(a.replica)[0] for a in attempts})],
            default=0,
        )
        by_slot: dict[tuple[int, str], list[float | None]] = {}  # (quorum id, slot) -> times
        for qid, gkey, t, _ in self.first_commits:
            by_slot.setdefault((qid, gkey), []).append(t)
        for f in failures:
            self._full_strength(f, our_q, group, by_slot)
        recoveries = sorted(
            (r for r in heals
             if mine(r.target_replica) and (r.target_id is None or r.target_id in known)),
            key=lambda r: (r.time is None, r.time or 0.0),
        )
        for r in recoveries:
            self._link_attempt(r)
            # a heal with no failure before it: a replica that joined its first quorum late
            r.after_failure = any(f.time is None or r.time is None or f.time <= r.time + SLACK_S
                                  for f in failures)
        steps: dict[str, ReplicaSteps] = {}
        for rid_b, c in stats.commits.items():
            gkey, _ = _idx(rid_b.decode("utf-8", "replace"))
            if split_replica_id(gkey)[0] not in ours:
                continue
            st = steps.setdefault(gkey, ReplicaSteps())
            st.attempted += c.attempted
            st.committed += c.committed
            if c.max_step >= 0:
                st.last_step = max(st.last_step or 0, c.max_step)
                if self.max_step is None or c.max_step > self.max_step:
                    self.max_step = c.max_step
        degraded = _degraded(quorums, group, self.last_time, self.max_step)
        clock_back = self.settled.jumps + self._negative_durations(failures, degraded)
        for f in failures:
            self._entry(f.time, "failure", _failure_text(f), f.replica)
        for r in recoveries:
            src = _short(r.source_replica) if r.source_replica else "?"
            self._entry(r.time, "recovery",
                        f"recovery: replica {src} -> replica {_short(r.target_replica)} "
                        f"at step {r.step}", r.target_replica)
            if r.healed_time is not None:
                self._entry(r.healed_time, "healed",
                            f"replica {_short(r.target_replica)} healed at step {r.step}",
                            r.target_replica)
        prevq = None
        for q in quorums:
            self._entry(q.time, "quorum", _quorum_text(q, prevq, group))
            prevq = q
        timeline = [e for e in self.timeline
                    if (e.replica is None or _mine_key(e.replica, ours))
                    and (e.rid is None or e.rid in known)
                    and not (e.kind == "lighthouse" and before_ours is not None
                             and e.time is not None and e.time < before_ours)]
        timeline.sort(key=lambda e: (e.time is None, e.time or 0.0, _ORDER.get(e.kind, 9)))
        good = measure(quorums, failures, group,
                       sum(v.committed for v in steps.values()) if steps else None,
                       self.last_time, self.max_step,
                       heal_steps=_heal_steps(recoveries, stats),
                       decisions=max((v.attempted for v in steps.values()), default=0),
                       baseline=self.baseline, device=self.device)
        return Report(
            quorums, failures, [c for c in self.commit_failures if mine(c.replica_id)],
            attempts, recoveries, degraded, timeline, steps, group, prefixes, stats,
            self.first_time, self.last_time, self.max_step, self.init_syncs, foreign,
            clock_back, self.settled.implausible, good, self.left_out,
        )

    def _full_strength(self, f: Failure, our_q: set[int], group: int,
                       by_slot: dict[tuple[int, str], list[float | None]]) -> None:
        """When the group was whole again after `f`: the first of the run's quorums from the
        one that showed it with `group` members, and the failed slot's first commit in it
        (or in a later one that still has that slot), found by quorum id in the slot's own
        log (`reconfiguring for quorum_id=Q`, then `should_commit=True`), as the survivors'
        next commit is. A false drop: `f` left the quorum (no injected failure) and the same
        full id, the same process, is a member again later."""
        if f.quorum_pair is None:
            return
        new_i = f.quorum_pair[1]
        f.survivors = len(self.quorums[new_i].participants)
        later = [self.quorums[i] for i in range(new_i, len(self.quorums)) if i in our_q]
        f.false_drop = (f.kind == "left-quorum" and f.time_source != "injected"
                        and any(f.replica_id in q.participants for q in later[1:]))
        full = next((j for j, q in enumerate(later) if len(q.participants) >= group), None)
        if full is None:
            return
        f.full_quorum_time = later[full].time
        for q in later[full:]:
            if not any(_idx(r)[0] == f.replica for r in q.participants):
                return  # the slot left again before it committed
            commits = by_slot.get((q.quorum_id, f.replica))
            if commits:  # a restarted Lighthouse counts quorum ids from 1 again: the nearest
                f.full_strength_time = min(commits, key=lambda t: _gap(t, q.time))
                return

    def _next_commit_in_quorum(self, f: Failure) -> None:
        """The survivors' first commit in the quorum that showed the failure, found by its
        id in their own logs (`reconfiguring for quorum_id=Q`, then `should_commit=True`), not
        by comparing times of two nodes' clocks; the earliest of them. Without those lines the
        pass's guess stays: the first commit of another replica after the quorum change."""
        if f.quorum_id is None:
            return
        near: dict[str, tuple[float | None, int]] = {}  # survivor -> its commit nearest in time
        for qid, gkey, t, step in self.first_commits:
            if qid != f.quorum_id or gkey == f.replica:
                continue
            old = near.get(gkey)
            if old is None or _gap(t, f.detected_time) < _gap(old[0], f.detected_time):
                near[gkey] = (t, step)  # a restarted Lighthouse counts quorum ids from 1 again
        if not near:
            return
        gkey, (t, step) = min(near.items(), key=lambda kv: (kv[1][0] is None, kv[1][0] or 0.0))
        f.next_commit_time, f.next_commit_step, f.survivor = t, step, gkey

    def _negative_durations(self, failures: list[Failure],
                            degraded: list[Degraded]) -> list[ClockBack]:
        """The durations that came out negative (counted as 0): two clocks disagree."""
        out = list(self.negatives)  # the requeues' (_link_attempt)
        for d in degraded:
            if back := went_back(d.start_time, d.end_time):
                out.append(ClockBack(f"degraded from step {d.start_step}", d.start_time, back))
        for f in failures:
            if back := went_back(f.time, f.next_commit_time):
                out.append(ClockBack(f"replica {_short(f.replica)}'s failure -> next commit",
                                     f.time, back))
        return out

    def _link_attempt(self, r: Recovery) -> None:
        atts = self.attempts.get(r.target_replica, [])
        uuid = split_replica_id(r.target_id)[2] if r.target_id else None
        att = next((a for a in atts if uuid and a.uuid == uuid), None)
        if att is None:
            later = [a for a in atts if a.quorum_time is not None and r.time is not None
                     and a.quorum_time <= r.time + SLACK_S]
            att = later[-1] if later else None
        if att is None:
            return
        if att.healed_time is not None and r.healed_time is None:
            r.healed_time = att.healed_time
        elif att.healed_time is not None and r.healed_time is not None:
            r.healed_time = max(r.healed_time, att.healed_time)
        # a claimed attempt has no restart time (`on_launch`, `_bind_late`): its start
        start = att.restart_time if att.restart_time is not None else att.start_time
        # a restart in place too, and a warm spare's claim of the slot
        if (att.number > 0 or att.restart or att.claimed) and start is not None:
            r.requeue_time = start
            r.requeue_source = (
                "claim" if att.claimed else
                f"injected {att.restart_source}" if att.restart_time is not None else att.source
            )  # fmt: skip
            r.requeue_to_healed_s = elapsed(start, r.healed_time)
            r.requeue_to_quorum_s = elapsed(start, att.quorum_time)
            for what, end in (("healed", r.healed_time), ("back in quorum", att.quorum_time)):
                if back := went_back(start, end):
                    self.negatives.append(ClockBack(
                        f"replica {_short(r.target_replica)}'s requeue -> {what}", start, back))

    @staticmethod
    def _step_at(quorums: list[Quorum], t: float | None) -> int | None:
        step = None
        for q in quorums:
            if t is not None and q.time is not None and q.time > t:
                break
            step = q.step
        return step


def _heal_steps(recoveries: list[Recovery], stats: ParseStats) -> int:
    """Heals whose target committed a step at or after the step it healed to: each such
    first commit is a healing step (goodput.py), not a trained one."""
    by_gkey: dict[str, list[tuple[str, int]]] = {}
    for rid_b, c in stats.commits.items():
        if c.committed:
            rid = rid_b.decode("utf-8", "replace")
            by_gkey.setdefault(_idx(rid)[0], []).append((rid, c.max_step))
    n = 0
    for r in recoveries:
        ids = by_gkey.get(r.target_replica, [])
        if r.target_id is not None and any(rid == r.target_id for rid, _ in ids):
            ids = [(rid, m) for rid, m in ids if rid == r.target_id]
        n += any(m >= r.step for _, m in ids)
    return n


def _gap(t: float | None, ref: float | None) -> float:
    return 0.0 if t is None or ref is None else abs(t - ref)


# same-time entries: causes before effects
_ORDER = {"lighthouse": 0, "injected": 1, "commit-failure": 2, "failure": 3, "finished": 3,
          "attempt": 4, "quorum": 5, "recovery": 6, "healed": 7}


def _mine_key(gkey: str, ours: set[str]) -> bool:
    prefix, index, _ = split_replica_id(gkey)
    return index is None or prefix in ours


def _short(gkey: str | None) -> str:
    if gkey is None:
        return "?"
    return _idx(gkey)[1]


def _failure_text(f: Failure) -> str:
    step = f" at step {f.step}" if f.step is not None else ""
    how = {"injected": "injected", "commit-failure": "first failed commit",
           "quorum-change": "seen by quorum change", "injected-only": "no quorum change seen"}
    kind = f.kind if f.rank is None else f"{f.kind} of rank {f.rank}"
    return f"replica {_short(f.replica)} failed{step} ({kind}; time: {how.get(f.time_source)})"


def _quorum_text(q: Quorum, prev: Quorum | None, group: int) -> str:
    names = ", ".join(_short(_idx(r)[0]) for r in q.participants)
    verb = "formed" if prev is None else "changed"
    text = (f"quorum {q.quorum_id} {verb} at step {q.step}: "
            f"{len(q.participants)}/{group} replicas [{names}]")
    if prev is not None:
        old = {_idx(r)[0] for r in prev.participants}
        new = {_idx(r)[0] for r in q.participants}
        left, joined = sorted(old - new), sorted(new - old)
        renewed = sorted(_idx(r)[0] for r in q.participants
                         if _idx(r)[0] in old and r not in prev.participants)
        for label, xs in (("left", left), ("joined", joined), ("rejoined", renewed)):
            if xs:
                text += f"; {label}: " + ", ".join(_short(x) for x in xs)
    if prev is not None and q.step < prev.step:
        text += f"; step back from {prev.step} (no member had the newer state)"
    cf = dict(q.commit_failures)
    if cf:
        text += "; commit_failures " + ", ".join(
            f"{_short(_idx(k)[0])}={v}" for k, v in sorted(cf.items()))
    return text


def _degraded(quorums: list[Quorum], group: int, last_time: float | None,
              max_step: int | None) -> list[Degraded]:
    """Contiguous stretches where fewer than `group` replicas were in the quorum."""
    out: list[Degraded] = []
    cur: Degraded | None = None
    for q in quorums:
        n = len(q.participants)
        if cur is not None and n != cur.replicas:
            cur.end_step, cur.end_time = q.step, q.time
            out.append(cur)
            cur = None
        if cur is None and n < group:
            cur = Degraded(q.step, None, q.time, None, n, group)
    if cur is not None:
        cur.end_step = max_step if max_step is not None else cur.start_step
        cur.end_time = last_time
        cur.open = True
        out.append(cur)
    return out


# ---------------------------------------------------------------- entry point


def build_model(
    *paths: str | Path | Sequence[str | Path],
    lighthouse: Sequence[str | Path] = (),
    events: Sequence[str | Path] = (),
    group_size: int | None = None,
    baseline: Baseline | None = None,
) -> Report:
    """Read the files of one run (see find_run_files) and build its Report, in one pass.

    `build_model("outputs/torchft/tft-12")`, `build_model("a.out", "b.out")` and
    `build_model(["a.out", "b.out"])` are the same; no path: the newest run. The data only:
    `ftslurm.report.build_report` adds the renderings.
    """
    flat: list[str | Path] = []
    for p in paths:
        flat.extend([p] if isinstance(p, (str, Path)) else p)
    files = find_run_files(flat, lighthouse=lighthouse, events=events)
    stats = ParseStats()
    offset = clock_offset(files.lighthouse_logs + files.replica_logs)
    return model_of(files, stats, lambda left_out: iter_run_events(files, stats, offset, left_out),
                    group_size, baseline)  # fmt: skip


def model_of(
    files: ReportFiles,
    stats: ParseStats,
    events_of: Callable[[list[LeftOut]], Iterable[Event]],
    group_size: int | None = None,
    baseline: Baseline | None = None,
) -> Report:
    """The Report of a run's files from its events, merged by time (`events_of(left_out)`:
    `iter_run_events`, or what a live report kept of its earlier reads, see live.py)."""
    b = _Builder(group_size, files.job, frozenset(p.name for p in files.replica_logs))
    b.baseline = baseline
    b.device = device_of(files.replica_logs)
    b.settled = settle(events_of(b.left_out), stats)
    for ev in b.settled.events:
        b.feed(ev)
    stats.events += len(b.settled.events)
    return b.finish(stats)
