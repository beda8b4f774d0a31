"""Report -> text, JSON (the stable form, documented in docs/report.md) and a PNG timeline.

Times are the logs' own wall clock (local time, no zone, as torchft and torchtitan print it),
written ISO-8601 with milliseconds; durations are seconds. Replica ids are the array index
(`"1"`), with the full `<prefix>_<i>:<uuid>` kept next to it where one is known.
Reads `model.py` only: the state machine (`timeline.py`) and this module do not know each other.
Durations are never negative (`model.elapsed`); where two clocks disagreed the text says so
(`Clock:` lines). Text comes from logs: every line is written through `textsafe.printable`,
so no escape sequence or other control character of a log reaches the terminal.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ftslurm.report.model import (
    Degraded,
    Failure,
    Goodput,
    Recovery,
    Report,
    elapsed,
    replica_key,
)
from ftslurm.textsafe import printable

SCHEMA_VERSION = 1
_EPOCH = datetime(1970, 1, 1)


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return (_EPOCH + timedelta(seconds=t)).isoformat(timespec="milliseconds")


def hms(t: float | None) -> str:
    if t is None:
        return "??:??:??.???"
    return (_EPOCH + timedelta(seconds=t)).strftime("%H:%M:%S.%f")[:-3]


def duration(s: float | None) -> str:
    """`2 m 43 s`, `5.24 s`, `1 h 02 m`: what a person reads at a glance."""
    if s is None:
        return "n/a"
    if s < 0:
        return "-" + duration(-s)
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m} m {sec} s"
    h, rem = divmod(round(s), 3600)
    return f"{h} h {rem // 60:02d} m"


def idx(gkey: str | None) -> str | None:
    return None if gkey is None else replica_key(gkey)[1]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# ---------------------------------------------------------------- the public object


class RenderedReport(Report):
    """A Report with its renderings as methods: what `ftslurm.report.build_report` returns.

    The methods live here, not on `model.Report`, so that the model does not import its
    renderer (a `Report.to_text` that called into this module would close an import cycle
    timeline <-> render).
    """

    @classmethod
    def of(cls, rep: Report) -> RenderedReport:
        """The same report (its fields shared, not copied) with the methods."""
        return cls(**{f.name: getattr(rep, f.name) for f in fields(Report)})

    def summary(self) -> dict[str, Any]:
        return summary_dict(self)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    def to_text(self) -> str:
        return to_text(self)

    def to_plot(self, path: str | Path) -> Path:
        return to_plot(self, Path(path))


# ---------------------------------------------------------------- JSON


def failure_json(f: Failure) -> dict[str, Any]:
    return {
        "time": iso(f.time), "replica": idx(f.replica), "replica_id": f.replica_id,
        "step": f.step, "kind": f.kind, "rank": f.rank, "time_source": f.time_source,
        "detected_time": iso(f.detected_time), "last_seen_time": iso(f.last_seen_time),
        "quorum_id": f.quorum_id, "node": f.node or None,
        "survivor": idx(f.survivor), "next_commit_time": iso(f.next_commit_time),
        "next_commit_step": f.next_commit_step,
        "to_next_commit_s": _r(f.to_next_commit_s),
        "detection_s": _r(f.detection_s), "degraded_s": _r(f.degraded_s),
        "healing_s": _r(f.healing_s), "time_to_full_strength_s": _r(f.time_to_full_strength_s),
        "full_quorum_time": iso(f.full_quorum_time),
        "full_strength_time": iso(f.full_strength_time), "false_drop": f.false_drop,
    }


def recovery_json(r: Recovery) -> dict[str, Any]:
    return {
        "time": iso(r.time), "step": r.step,
        "source_replica": idx(r.source_replica), "target_replica": idx(r.target_replica),
        "source_id": r.source_id, "target_id": r.target_id,
        "healed_time": iso(r.healed_time),
        "requeue_time": iso(r.requeue_time), "requeue_source": r.requeue_source or None,
        "requeue_to_healed_s": _r(r.requeue_to_healed_s),
        "requeue_to_quorum_s": _r(r.requeue_to_quorum_s),
        "after_failure": r.after_failure,
    }


def degraded_json(d: Degraded) -> dict[str, Any]:
    return {
        "start_step": d.start_step, "end_step": d.end_step,
        "start_time": iso(d.start_time), "end_time": iso(d.end_time),
        "replicas": d.replicas, "group_size": d.group_size,
        "duration_s": _r(d.seconds),
        "steps": None if d.end_step is None else d.end_step - d.start_step,
        "open": d.open,
    }


def summary_dict(rep: Report) -> dict[str, Any]:
    per = {
        idx(k): {"attempted": v.attempted, "committed": v.committed,
                 "failed": v.attempted - v.committed}
        for k, v in sorted(rep.steps.items())
    }
    attempted = sum(v["attempted"] for v in per.values())
    committed = sum(v["committed"] for v in per.values())
    deg_s = [d.seconds for d in rep.degraded if d.seconds is not None]
    return {
        "quorums": len(rep.quorums),
        "quorum_changes": max(0, len(rep.quorums) - 1),
        "failures": len(rep.failures),
        "requeues": rep.requeues,
        "restarts_in_place": rep.restarts_in_place,
        "recoveries": len(rep.recoveries) - rep.startup_syncs,
        "startup_syncs": rep.startup_syncs,
        "commit_failures": len(rep.commit_failures),
        "init_syncs": rep.init_syncs,
        "group_size": rep.group_size,
        "degraded_intervals": len(rep.degraded),
        "degraded_s": _r(sum(deg_s)) if deg_s else 0.0,
        "degraded_steps": sum((d.end_step or d.start_step) - d.start_step for d in rep.degraded),
        "failure_to_next_commit_s": [_r(f.to_next_commit_s) for f in rep.failures],
        "requeue_to_healed_s": [_r(r.requeue_to_healed_s) for r in rep.recoveries
                                if r.after_failure],
        "steps_attempted": attempted,
        "steps_committed": committed,
        "steps_by_replica": per,
        "max_step": rep.max_step,
        "start_time": iso(rep.first_time),
        "end_time": iso(rep.last_time),
        "duration_s": _r(elapsed(rep.first_time, rep.last_time)),
        "foreign_quorums": rep.foreign_quorums,
        **goodput_dict(rep),
    }


def baseline_dict(g: Goodput | None) -> dict[str, Any] | None:
    """What the failure-free rate was taken from (`summary.goodput_baseline`)."""
    b = g.baseline if g is not None else None
    if b is None:
        return None
    return {"source": b.source, "rate": _r(b.rate, 5), "stretches": b.stretches,
            "seconds": _r(b.seconds), "run": b.run, "group_size": b.group_size}


def goodput_dict(rep: Report) -> dict[str, Any]:
    """The summary's goodput keys (docs/report.md, "Goodput")."""
    g = rep.goodput
    return {
        "detection_s": [_r(f.detection_s) for f in rep.failures],
        "time_to_full_strength_s": [_r(f.time_to_full_strength_s) for f in rep.failures],
        "false_drops": rep.false_drops,
        "goodput": _r(g.goodput, 4) if g is not None else None,
        "goodput_ratio": _r(g.ratio, 4) if g is not None else None,
        "goodput_unavailable": g.unreadable if g is not None else "no quorum in the logs",
        "goodput_baseline": baseline_dict(g),
        "replica_steps_trained": g.trained if g is not None and not g.unreadable else None,
        "heal_steps": g.heal_steps if g is not None else 0,
        "replica_steps_at_start": g.at_start if g is not None else 0,
        "step_ratio": _r(g.step_ratio, 4) if g is not None else None,
        "lost": {
            "detection": _r(g.lost_detection, 4), "degraded": _r(g.lost_degraded, 4),
            "healing": _r(g.lost_healing, 4), "other": _r(g.lost_other, 4),
        } if g is not None and g.goodput is not None else None,
        "lost_overcount": _r(g.overcount, 4) if g is not None and g.goodput is not None else None,
        "lost_overcount_cause": (overcount_cause(g) if g is not None and g.overcount > 0
                                 else None),
        "device": g.device if g is not None else None,
        "failure_free_step_rate": _r(g.rate, 5) if g is not None else None,
        "full_strength_measured_s": _r(g.full_strength_s) if g is not None else None,
        "goodput_window_s": _r(g.window_s) if g is not None else None,
        "replica_steps_ideal": _r(g.ideal, 1) if g is not None else None,
    }


def to_json(rep: Report) -> dict[str, Any]:
    s = rep.stats
    return {
        "schema_version": SCHEMA_VERSION,
        "bad_nodes": [{**b, "time": _local(b["time"])} for b in rep.bad_nodes],
        "restarts": rep.restarts,
        "files": list(s.files),
        "replica_prefixes": list(rep.prefixes),
        "quorums": [
            {
                "quorum_id": q.quorum_id, "time": iso(q.time), "step": q.step,
                "participants": [idx(r) for r in q.participants],
                "participant_ids": list(q.participants),
                "commit_failures": {idx(k): v for k, v in q.commit_failures.items()},
                "last_seen_before": iso(q.last_seen_before),
                "lighthouse_epoch": q.epoch,
            }
            for q in rep.quorums
        ],
        "failures": [failure_json(f) for f in rep.failures],
        "commit_failures": [
            {"time": iso(c.time), "replica": idx(c.replica), "replica_id": c.replica_id,
             "step": c.step, "detail": c.detail}
            for c in rep.commit_failures
        ],
        "attempts": [
            {
                "replica": idx(a.replica), "attempt": a.number, "start_time": iso(a.start_time),
                "source": a.source, "uuid": a.uuid, "node": a.node or None,
                "restart_in_place": a.restart,
                "restart_time": iso(a.restart_time), "restart_source": a.restart_source or None,
                "quorum_time": iso(a.quorum_time), "first_commit_time": iso(a.healed_time),
                "first_commit_step": a.healed_step,
            }
            for a in rep.attempts
        ],
        "recoveries": [recovery_json(r) for r in rep.recoveries],
        "degraded": [degraded_json(d) for d in rep.degraded],
        "timeline": [
            {"time": iso(e.time), "kind": e.kind, "replica": idx(e.replica), "text": e.text}
            for e in rep.timeline
        ],
        "summary": summary_dict(rep),
        "parse": {
            "files": len(s.files), "missing": list(s.missing),
            "unreadable": [{"file": f, "why": why} for f, why in s.unreadable],
            "bytes": s.bytes,
            "events_left_out": [
                {"time": iso(e.time), "action": e.action, "replica": e.replica,
                 "node": e.node or None, "job": e.job or None, "why": e.why}
                for e in rep.left_out
            ],
            "lines": s.lines, "events": s.events, "skipped": s.skipped,
            "malformed": s.malformed, "overlong": s.overlong, "untimed": s.untimed,
            "crlf": s.crlf, "bad_event_lines": s.bad_events,
            "read_errors": s.read_errors, "implausible_times": rep.implausible_times,
            "clock_back": [
                {"where": c.where, "time": iso(c.time), "back_s": _r(c.back_s),
                 "in_file": c.in_file}
                for c in rep.clock_back
            ],
        },
    }


# ---------------------------------------------------------------- text

_SOURCE_WORDS = {"manager-start": "process start", "first-seen": "first sighting",
                 "claim": "claim of the slot by a warm spare"}  # fmt: skip
_CLOCK_LINES = 5


def to_text(rep: Report) -> str:
    """The report for a person; every line escaped (`printable`): it quotes the logs."""
    from ftslurm.report import restarts

    return "".join(printable(line) + "\n" for line in
                   _text_lines(rep) + _bad_node_lines(rep) + restarts.lines(rep.restarts))


def _local(epoch: float) -> str:
    """An epoch time (the launchers' node actions) as ISO-8601 with the local zone."""
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def _bad_node_lines(rep: Report) -> list[str]:
    """The nodes the run's launchers took out of its way, with the reason and the undo."""
    out = ["", "Nodes taken out (drained / avoided by the launchers):"] if rep.bad_nodes else []
    for b in rep.bad_nodes:
        undo = f"  (undo: {b['undo']})" if b.get("undo") else ""
        out.append(f"  {_local(b['time'])}  {b['node']}  {b['action']}  {b['reason']}{undo}")
    return out


def _text_lines(rep: Report) -> list[str]:
    s = rep.stats
    sm = summary_dict(rep)
    out: list[str] = []
    names = ", ".join(Path(f).name for f in s.files) or "none"
    reps = sorted({idx(k) or "?" for k in rep.steps} | {
        idx(r) or "?" for q in rep.quorums for r in q.participants} | {
        idx(a.replica) or "?" for a in rep.attempts}, key=lambda x: (len(x), x))
    out.append(f"Run: {len(s.files)} file{'' if len(s.files) == 1 else 's'} ({names})")
    out.append(
        f"     replicas {', '.join(reps) or 'none'}"
        f"{' (' + ', '.join(rep.prefixes) + ')' if rep.prefixes else ''}, "
        f"group size {rep.group_size}; {iso(rep.first_time) or '?'} -> {hms(rep.last_time)} "
        f"({duration(sm['duration_s'])}), last step "
        f"{rep.max_step if rep.max_step is not None else 'n/a'}"
    )
    out.append("")
    out.append("Timeline")
    if not rep.timeline:
        out.append("  (no events)")
    for e in rep.timeline:
        out.append(f"  {hms(e.time)}  {e.text}")
    out.append("")
    out.append("Summary")
    out.append(f"  quorum changes    {sm['quorum_changes']} "
               f"({' -> '.join(str(q.quorum_id) for q in rep.quorums) or 'no quorum'})")
    out.append(f"  failures          {len(rep.failures)}")
    for f in rep.failures:
        step = f" at step {f.step}" if f.step is not None else ""
        kind = f.kind if f.rank is None else f"{f.kind}, rank {f.rank}"
        out.append(f"    replica {idx(f.replica)}{step} ({kind}) at {hms(f.time)}")
    out.append(f"  requeues          {rep.requeues}"
               + (f" (and {rep.restarts_in_place} restarts in place)"
                  if rep.restarts_in_place else ""))
    out.append(f"  recoveries        {sm['recoveries']}")
    for r in rep.recoveries:
        if r.after_failure:
            out.append(f"    replica {idx(r.source_replica) or '?'} -> replica "
                       f"{idx(r.target_replica)} at step {r.step} ({hms(r.time)})")
    if rep.startup_syncs:
        out.append(f"  start-up syncs    {rep.startup_syncs} (no failure before them: a replica "
                   "that joined its first quorum late took the state from a peer)")
        for r in rep.recoveries:
            if not r.after_failure:
                out.append(f"    replica {idx(r.source_replica) or '?'} -> replica "
                           f"{idx(r.target_replica)} at step {r.step} ({hms(r.time)})")
    out.append(f"  commit failures   {len(rep.commit_failures)}")
    out.append(f"  degraded          {len(rep.degraded) or 'never'}")
    for d in rep.degraded:
        end = f"{d.end_step}" + (" (end of logs)" if d.open else "")
        out.append(f"    {d.replicas}/{d.group_size} replicas from step {d.start_step} to {end}, "
                   f"{duration(d.seconds)} ({hms(d.start_time)} -> {hms(d.end_time)})")
    if rep.failures:
        out.append("  failure -> survivor's next committed step")
        for f in rep.failures:
            nxt = (f"{duration(f.to_next_commit_s)} (replica {idx(f.survivor)} "
                   f"committed step {f.next_commit_step} at {hms(f.next_commit_time)})"
                   if f.next_commit_time is not None else "n/a (no later commit in the logs)")
            out.append(f"    replica {idx(f.replica)} failed {hms(f.time)} "
                       f"[{f.time_source}]: {nxt}")
            if (f.time_source == "quorum-change" and f.last_seen_time is not None
                    and f.next_commit_time is not None):
                # the logs only show when the failure was noticed: give the upper bound too
                out.append(f"      last seen in a quorum at {hms(f.last_seen_time)}: at most "
                           f"{duration(elapsed(f.last_seen_time, f.next_commit_time))} "
                           "from the failure")
    if len(rep.recoveries) > rep.startup_syncs:
        out.append("  requeue -> first healed step")
        for r in (r for r in rep.recoveries if r.after_failure):
            label = _SOURCE_WORDS.get(r.requeue_source, r.requeue_source)
            since = (f"{label} at {hms(r.requeue_time)}"
                     if r.requeue_time is not None else "restart time unknown")
            back = (f"back in quorum after {duration(r.requeue_to_quorum_s)}"
                    if r.requeue_to_quorum_s is not None else "")
            if r.requeue_to_healed_s is not None:
                text = f"{duration(r.requeue_to_healed_s)} after the {since}"
                text += f" ({back})" if back else ""
            else:
                text = "n/a, no committed step of the new attempt in the logs (" + "; ".join(
                    x for x in (since, back) if x) + ")"
            out.append(f"    replica {idx(r.target_replica)} healed at step {r.step}: {text}")
    per = ", ".join(f"replica {k}: {v['committed']}/{v['attempted']}"
                    for k, v in sm["steps_by_replica"].items())
    out.append(f"  steps committed   {sm['steps_committed']} of {sm['steps_attempted']} "
               f"attempted" + (f" ({per})" if per else ""))
    out += _goodput_lines(rep, sm)
    out.append("")
    notes = [f"{s.lines} lines", f"{s.events} events", f"{s.skipped} skipped"]
    bad = (f"{s.malformed} malformed ({rep.implausible_times} of them implausible times)"
           if rep.implausible_times else f"{s.malformed} malformed")
    for name, n in ((bad, s.malformed), ("overlong", s.overlong),
                    ("without time", s.untimed), ("CRLF", s.crlf),
                    ("bad event-log lines", s.bad_events), ("files cut short", s.read_errors),
                    ("foreign quorums ignored", rep.foreign_quorums)):
        if n:
            notes.append(name if name is bad else f"{n} {name}")
    out.append("Parsed: " + ", ".join(notes))
    for m in s.missing:
        out.append(f"Missing: {m}")
    for f, why in s.unreadable:
        out.append(f"Unreadable: {f} ({why})")
    if rep.left_out:
        out.append(f"Left out: {len(rep.left_out)} event-log line"
                   f"{'' if len(rep.left_out) == 1 else 's'}, not this run's:")
        for e in rep.left_out[:_CLOCK_LINES]:
            who = f" replica {e.replica}" if e.replica is not None else ""
            where = f" on {e.node}" if e.node else ""
            out.append(f"  {hms(e.time)}  {e.action}{who}{where}: {e.why}")
        if len(rep.left_out) > _CLOCK_LINES:
            out.append(f"  {len(rep.left_out) - _CLOCK_LINES} more (see --json)")
    for c in rep.clock_back[:_CLOCK_LINES]:
        out.append(
            f"Clock: {c.where} went back {duration(c.back_s)} after {hms(c.time)} "
            "(its clock was set back)" if c.in_file else
            f"Clock: {c.where} came out {duration(c.back_s)} negative from {hms(c.time)}, "
            "counted as 0 s (the two logs' clocks disagree)"
        )
    if len(rep.clock_back) > _CLOCK_LINES:
        out.append(f"Clock: {len(rep.clock_back) - _CLOCK_LINES} more times back (see --json)")
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _goodput_lines(rep: Report, sm: dict[str, Any]) -> list[str]:
    """Per failure: detection, degraded, healing, time to full strength; the run's goodput."""
    out: list[str] = []
    if rep.failures:
        out.append("  failure -> full strength (detection + degraded + healing)")
        for f in rep.failures:
            drop = "; FALSE DROP: the same process came back" if f.false_drop else ""
            if f.full_strength_time is None:
                why = ("the group was not whole again in the logs" if f.full_quorum_time is None
                       else "no commit of the healed replica in the logs")
                out.append(f"    replica {idx(f.replica)} failed {hms(f.time)}: n/a ({why}){drop}")
                continue
            out.append(
                f"    replica {idx(f.replica)} failed {hms(f.time)}: "
                f"{duration(f.time_to_full_strength_s)} ({duration(f.detection_s)} + "
                f"{duration(f.degraded_s)} + {duration(f.healing_s)}; full strength at "
                f"{hms(f.full_strength_time)}){drop}")
    g = rep.goodput
    if g is None:
        out.append("  goodput           n/a (no quorum in the logs)")
    elif g.unreadable:
        out.append(f"  goodput           n/a ({g.unreadable})")
    elif g.goodput is None:
        out.append("  goodput           n/a (no full-strength stretch to measure a rate on)")
    else:
        out += _goodput_figures(g, rep.group_size)
    out.append(f"  false quorum drops {sm['false_drops']}")
    return out


# a failure-free rate measured over fewer steps a replica than this is too rough for the lost
# shares (each a few steps) to add up to what goodput leaves
FEW_BASELINE_STEPS = 20


def overcount_cause(g: Goodput) -> str:
    """Why the lost shares add up to more than goodput leaves: survivors that stepped faster
    than the failure-free rate while they trained alone (`faster_cause`: only when the run was
    degraded), and a failure-free rate that stands on a few steps a replica (a short run: each
    share is a step or two, and the rate's own error is as large)."""
    b = g.baseline
    steps = b.rate * b.seconds if b is not None and b.rate else None
    faster = faster_cause(g.device) if g.lost_degraded > 0 else None
    if steps is None or steps >= FEW_BASELINE_STEPS:
        return faster or faster_cause(g.device)
    plural = "" if round(steps) == 1 else "s"
    rough = (f"the failure-free rate stands on {steps:.0f} step{plural} a replica, too few for "
             "the shares to add up (run longer, or give a failure-free control run: "
             "--baseline RUN)")
    return f"{faster}; and {rough}" if faster else rough


def faster_cause(device: str | None) -> str:
    """Why replicas can step faster than the failure-free rate while degraded, for the device
    the logs name: what makes the loss phases add up past what goodput leaves."""
    if device == "cpu":
        return ("replicas stepped faster than the full-strength rate, as survivors do on CPUs "
                "they shared with the failed replica")
    if device in ("cuda", "gpu", "rocm", "xpu"):
        return ("replicas stepped faster than the full-strength rate, as survivors do on a GPU "
                "they shared with the failed replica, or with fewer peers to all-reduce with")
    return ("replicas stepped faster than the full-strength rate (a device the replicas shared, "
            "or fewer peers to all-reduce with; the logs do not name the device)")


def _goodput_figures(g: Goodput, group: int) -> list[str]:
    """The goodput line and what it stands on: trained vs expected, the heals charged, the
    baseline, the lost shares. Never "N of M" with N > M: a ratio above 1 is said as one."""
    assert g.rate is not None and g.ideal is not None
    at = f"{g.rate:.3f} steps/s x group {group} x {duration(g.window_s)}"
    expected = f"{g.ideal:.1f}" if g.ideal < 100 else f"{g.ideal:.0f}"
    ratio = g.ratio or 0.0
    if ratio <= 1.0:
        head = f"{g.trained} trained of {expected} expected at {at}"
    else:
        head = (f"capped: {g.trained} trained, {ratio:.2f}x the {expected} expected at {at}; "
                "the run stepped faster than its failure-free rate")
    capped = " (capped)" if (g.step_ratio_raw or 0.0) > 1.0 else ""
    out = [f"  goodput           {_pct(g.goodput)} of replica-steps ({head}); "
           f"steps: {_pct(g.step_ratio)}{capped}"]
    heals = (f" - {g.heal_steps} heal step{'' if g.heal_steps == 1 else 's'} (a healed "
             "replica's first commit: its state came from a peer; charged to healing)"
             if g.heal_steps else "")
    out.append(f"    trained = {g.committed} committed{heals} - {g.at_start} of the first "
               "quorum's step (the window holds N steps between rounds, N + 1 commits)")
    b = g.baseline
    if b is not None and b.source == "control":
        grp = f", group {b.group_size}" if b.group_size is not None else ""
        out.append(f"    failure-free rate from the control run {b.run} ({b.stretches} "
                   f"full-strength stretch{'' if b.stretches == 1 else 'es'}, "
                   f"{duration(b.seconds)}{grp})")
    elif b is not None:
        out.append(f"    failure-free rate from this run's own {b.stretches} full-strength "
                   f"stretch{'' if b.stretches == 1 else 'es'} ({duration(b.seconds)}); "
                   "a failure-free control run gives a firmer one: --baseline RUN")
    out.append(
        f"    lost: detection {_pct(g.lost_detection)}, degraded {_pct(g.lost_degraded)}, "
        f"healing {_pct(g.lost_healing)}, other {_pct(g.lost_other)}")
    if g.overcount > 0:
        out.append(f"    the phases add up to {_pct(g.overcount)} more than goodput leaves: "
                   f"{overcount_cause(g)}")
    return out


# ---------------------------------------------------------------- PNG


def lanes(rep: Report) -> dict[str, list[tuple[float, float, str]]]:
    """Per replica index: (start, end, state) with state alive|training|recovering.

    Gaps are "absent". Built from attempts (process up), quorums (in the quorum) and
    recoveries (from the heal decision to the first healed step).
    """
    end = rep.last_time
    out: dict[str, list[tuple[float, float, str]]] = {}
    for a in rep.attempts:
        if a.start_time is not None and end is not None:
            stop = a.quorum_time if a.quorum_time is not None else end
            if stop > a.start_time:
                out.setdefault(idx(a.replica) or "?", []).append((a.start_time, stop, "alive"))
    fails = [(idx(f.replica), f.time) for f in rep.failures if f.time is not None]
    for i, q in enumerate(rep.quorums):
        nxt = rep.quorums[i + 1].time if i + 1 < len(rep.quorums) else end
        if q.time is None or nxt is None:
            continue
        for r in q.participants:
            name = idx(r) or "?"
            # a replica that failed before the quorum noticed stops training at the failure
            stop = min([t for n, t in fails if n == name and q.time < t < nxt], default=nxt)
            out.setdefault(name, []).append((q.time, stop, "training"))
    for r in rep.recoveries:
        if r.time is not None:
            stop = r.healed_time if r.healed_time is not None else r.time
            out.setdefault(idx(r.target_replica) or "?", []).append(
                (r.time, max(stop, r.time + 0.001), "recovering"))
    return out


_TAKEN_OUT = "#9467bd"  # the nodes the launchers took out: a colour no lane or mark uses
_TAKEN_OUT_ROWS = 3  # label rows above the lanes: actions close in time do not overprint


def _taken_out_marks(ax: Any, rep: Report, t0: float, top: float) -> float:
    """A solid vertical line at each node action of `rep.bad_nodes` (drain / avoid / kept),
    and `<node> <how>` in a row of its own above the lanes and quorum labels (`top`);
    returns how much higher the axis must reach for those rows (0: no action). The actions
    carry Unix times, the plot's axis is the logs' local clock: they are moved by the logs'
    zone offset (`sources.clock_offset`), as the event log's times are."""
    if not rep.bad_nodes:
        return 0.0
    from ftslurm.report.sources import clock_offset

    offset = clock_offset([Path(f) for f in rep.stats.files])
    span = max((rep.last_time or t0) - t0, 1.0)
    rows = min(len(rep.bad_nodes), _TAKEN_OUT_ROWS)
    for i, b in enumerate(rep.bad_nodes):
        x = b["time"] + offset - t0
        ax.axvline(x, color=_TAKEN_OUT, lw=1.5)
        label = f"{printable(str(b['node']))[:40]} {printable(str(b['action']))[:10]}"
        ax.text(x, top + 0.05 + 0.3 * (i % rows), label, fontsize=8, color=_TAKEN_OUT,
                ha="left" if x < span / 2 else "right", va="bottom",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
    return 0.2 + 0.3 * rows


def to_plot(rep: Report, path: Path) -> Path:
    """A PNG: one lane per replica, quorum changes, failures and the nodes the launchers took
    out marked, step on a 2nd axis."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the install
        from ftslurm.errors import UserError

        raise UserError("--plot needs matplotlib: pip install 'ftslurm[report]'") from e
    t0 = rep.first_time or 0.0
    colors = {"alive": "#bbbbbb", "training": "#2ca02c", "recovering": "#ff7f0e"}
    data = lanes(rep)
    names = sorted(data, key=lambda k: (len(k), k)) or ["0"]
    # lanes shrink past 16 replicas (64 lanes: 0.2 in each), so a 64-replica run stays one
    # readable page instead of a 40-inch strip
    many = len(names) > 16
    lane = max(0.2, 9.6 / len(names)) if many else 0.6
    fig, ax = plt.subplots(figsize=(11, 1.8 + lane * len(names)))
    for y, name in enumerate(names):
        ax.broken_barh([(0, (rep.last_time or t0) - t0)], (y - 0.35, 0.7),
                       facecolors="#f2f2f2")
        for state in ("alive", "training", "recovering"):
            bars = [(s - t0, e - s) for s, e, st in data.get(name, []) if st == state]
            if bars:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors[state])
    for q in rep.quorums[1:]:
        if q.time is not None:
            ax.axvline(q.time - t0, color="#1f77b4", lw=0.8 if len(rep.quorums) < 40 else 0.4,
                       ls="--")  # fmt: skip
            if len(rep.quorums) < 40:  # more labels than fit: the lines alone
                ax.text(q.time - t0, len(names) - 0.4, f"q{q.quorum_id}", fontsize=7,
                        color="#1f77b4")  # fmt: skip
    for f in rep.failures:
        if f.time is not None:
            y = names.index(idx(f.replica)) if idx(f.replica) in names else 0
            ax.plot(f.time - t0, y, "rx", ms=6 if many else 10, mew=2)
            if f.full_strength_time is not None:  # failure -> full strength, shaded
                ax.axvspan(f.time - t0, f.full_strength_time - t0, color="#d62728", alpha=0.08)
                if not many:  # 64 lanes: the shading says it, labels would bury the plot
                    ax.text(f.time - t0, -0.55, f"{duration(f.time_to_full_strength_s)} to full"
                            + (" (false drop)" if f.false_drop else ""), fontsize=7,
                            color="#d62728")  # fmt: skip
    taken = _taken_out_marks(ax, rep, t0, len(names))
    ax.set_yticks(range(len(names)), [f"replica {n}" for n in names],
                  fontsize=6 if many else None)  # fmt: skip
    ax.set_xlabel(f"seconds since {iso(rep.first_time)}")
    ax.set_ylim(-0.6, len(names) + taken)
    steps = [(q.time - t0, q.step) for q in rep.quorums if q.time is not None]
    if steps and rep.last_time is not None and rep.max_step is not None:
        steps.append((rep.last_time - t0, max(rep.max_step, steps[-1][1])))
    if steps:
        ax2 = ax.twinx()
        xs, ys = zip(*steps, strict=True)
        ax2.plot(xs, ys, color="#7f7f7f", lw=1, marker=".")
        ax2.set_ylabel("step")
    from matplotlib.patches import Patch

    fig.legend(
        handles=[Patch(color=c, label=k) for k, c in colors.items()]
        + [Patch(color="#f2f2f2", label="absent")]
        + ([Patch(color=_TAKEN_OUT, label="node taken out")] if taken else []),
        loc="upper right", fontsize=7, ncol=5 if taken else 4,
    )
    g = rep.goodput
    good = (f"\ngoodput {_pct(g.goodput)} of replica-steps" if g is not None
            and g.goodput is not None else "")
    nodes = "\nnodes the launchers took out: purple lines, labelled node and how" if taken else ""
    ax.set_title("replicas; quorum changes dashed, failures x, failure -> full strength shaded"
                 + nodes + good, loc="left", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
