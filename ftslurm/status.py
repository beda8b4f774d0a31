"""`ftslurm status`: one row per array task of an FT job, from Slurm's view and the log tail.

Why both sources: Slurm knows the state, the reason and the restart count, but not whether
the replica is actually training; the tail of its log does (last step and loss, how long
since it last wrote). The row builder is a pure function of those two inputs, so it is
tested on recorded output; only `collect` touches Slurm and the files. What a log says is
read by the run model (`ftslurm/run/progress.py`), as every other reader of progress does.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from ftslurm.lighthouse import status_page as sp
from ftslurm.logvocab import split_replica_id

# the replica's side of a row is the run model's progress reader (ftslurm/run/progress.py);
# these names stay here for the callers that read a tail through `status`
from ftslurm.run.progress import TAIL_BYTES as TAIL_BYTES
from ftslurm.run.progress import LogSummary as LogSummary
from ftslurm.run.progress import read_summary as read_summary
from ftslurm.run.progress import summarize_tail as summarize_tail
from ftslurm.run.quorum import LighthouseQuorum as Quorum
from ftslurm.run.quorum import QuorumPage
from ftslurm.slurm.parse import JobInfo, array_tasks
from ftslurm.textsafe import printable


@dataclass
class Row:
    replica: int
    state: str
    reason: str
    node: str
    restarts: int
    attempt: int | None
    last_step: int | None
    last_loss: float | None
    idle_s: float | None  # seconds since the log last changed
    job_id: int  # Slurm's own id of the task
    log: str
    slot: str = ""  # a run with warm spares: the slot (replica) this task holds, or "spare"
    ranks: int = 1  # ranks per replica
    ranks_alive: int | None = None  # see LogSummary.ranks_alive


def build_rows(jobs: list[JobInfo], job: int, logs: dict[int, LogSummary], now: float,
               task_slots: dict[int, str] | None = None) -> list[Row]:  # fmt: skip
    """Pure: one row per array task of `job`, in task order. `task_slots` (a run with warm
    spares, slots.task_slots): task -> the slot it holds; a task missing from it is a spare."""
    rows = []
    for i, t in sorted(array_tasks(jobs, job).items()):
        s = logs.get(i) or LogSummary(path="")
        rows.append(
            Row(
                replica=i,
                state=t.state,
                reason=t.reason if t.reason not in ("None", "") else "",
                node=t.node if t.state in ("RUNNING", "COMPLETING") else "",
                restarts=t.restarts,
                attempt=s.attempt,
                last_step=s.last_step,
                last_loss=s.last_loss,
                idle_s=round(now - s.mtime, 1) if s.mtime is not None else None,
                job_id=t.job_id,
                log=s.path,
                slot="" if task_slots is None else task_slots.get(i, "spare"),
                ranks=s.ranks,
                ranks_alive=s.ranks_alive,
            )
        )
    return rows


def lighthouse_quorum() -> Quorum | None:
    """The managed Lighthouse's current quorum; None when that API is not available. Never
    raises: status must work without a Lighthouse."""
    return lighthouse_view()[0]


def lighthouse_view() -> tuple[Quorum | None, QuorumPage | None]:
    """`lighthouse_quorum`, and the page it came from (None: none came), from ONE read of
    the page: it lists every member and heartbeat (0.5 MB at 1,024 replicas)."""
    try:
        from ftslurm import lighthouse
    except ImportError:
        return None, None
    try:
        st = lighthouse.status(http_timeout=1.0)
    except Exception as e:  # noqa: BLE001 - status must not fail on the Lighthouse
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Quorum(running=False, error=why), None
    if not st.running:
        return Quorum(running=False), None
    return Quorum.from_page(st.address, st.http_error, st.quorum), st.quorum


# -------------------------------------------------------------------- rows not training

MAX_ROWS = 20  # a job of more tasks shows its counts and these many of the rows not training
QUIET_LOG_S = 600.0  # a running replica whose log said nothing for this long is not training
# the Lighthouse's view of a slot, best first: a slot holds the ids of its attempts (a lost
# or gone one, and the new one that heartbeats): the slot is as its best id is
_SLOT_ORDER = (sp.TRAINING, sp.HEALING, sp.LATE, sp.JOINING, sp.LOST, sp.GONE)
ABSENT = "absent"  # a slot the page (read whole) does not name: no heartbeat at all


def slot_states(page: QuorumPage | None) -> dict[str, str]:
    """Slot (`<i>` of `<prefix>_<i>:<uuid>`) -> the Lighthouse's state of it
    (`status_page.PAGE_STATES`), its best id's; {} without a page."""
    if page is None:
        return {}
    out: dict[str, str] = {}
    for r in sp.summarize(page).replicas:
        _, index, _ = split_replica_id(r.replica_id)
        key = str(index) if index is not None else r.replica_id
        if key not in out or _SLOT_ORDER.index(r.state) < _SLOT_ORDER.index(out[key]):
            out[key] = r.state
    return out


def _judged(page: QuorumPage | None) -> dict[str, str] | None:
    """`slot_states` of a page that came whole; None for no page or only its start (a slot
    whose heartbeat is in the rest would read as lost or absent)."""
    return slot_states(page) if page is not None and sp.whole(page) else None


def problems(r: Row, slots: dict[str, str] | None) -> list[str]:
    """Why the row's replica is not training normally ([]: it is): not RUNNING, ranks down,
    its log quiet for QUIET_LOG_S, or the Lighthouse not counting it as training (`slots`:
    `slot_states` of a page that came whole, a slot it does not name is absent; None: no
    such page). A spare waits by design."""
    why = [r.state] if r.state != "RUNNING" else []
    if r.ranks_alive is not None and r.ranks_alive < r.ranks:
        why.append(f"ranks {r.ranks_alive}/{r.ranks}")
    if r.state == "RUNNING" and r.idle_s is not None and r.idle_s > QUIET_LOG_S:
        why.append(f"log quiet {_fmt_age(r.idle_s)}")
    if slots is not None and r.slot != "spare":
        state = slots.get(r.slot or str(r.replica), ABSENT)
        if state != sp.TRAINING:
            why.append(f"lighthouse: {state}")
    return why


def _fmt_age(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h"


def _ranks_cell(r: Row) -> str:
    """`alive/ranks`, e.g. `2/2`; `-/2` before the attempt's first commit."""
    alive = "-" if r.ranks_alive is None else str(r.ranks_alive)
    return f"{alive}/{r.ranks}"


def _cells(r: Row, with_slot: bool = False, with_ranks: bool = False) -> list[str]:
    return [
        str(r.replica),
        *([r.slot or "-"] if with_slot else []),
        r.state,
        *([_ranks_cell(r)] if with_ranks else []),
        r.reason or "-",
        r.node or "-",
        str(r.restarts),
        "-" if r.attempt is None else str(r.attempt),
        "-" if r.last_step is None else str(r.last_step),
        "-" if r.last_loss is None else f"{r.last_loss:.4f}",
        _fmt_age(r.idle_s) + (" ago" if r.idle_s is not None else ""),
    ]


def render_table(job: int, rows: list[Row], quorum: Quorum | None,
                 page: QuorumPage | None = None, limit: int | None = MAX_ROWS) -> str:  # fmt: skip
    """The table for a person. Cells are escaped (`printable`): node names and reasons come
    from Slurm, the Lighthouse's member ids from whoever started a replica.

    A job of up to `limit` tasks (None: any) shows every row, the Lighthouse's line last. A
    bigger one (1,024 tasks) starts with its counts and shows only the rows not training
    (`problems`, judged with the Lighthouse's `page` too), at most `limit`."""
    if limit is None or len(rows) <= limit:
        lines = [f"job {job}: {len(rows)} array task(s)", *_table(rows)]
        if quorum is not None:
            lines.append(render_quorum(quorum))
        return "\n".join(lines)
    slots = _judged(page)
    why = {r.replica: problems(r, slots) for r in rows}
    bad = [r for r in rows if why[r.replica]]
    states = Counter(r.state for r in rows)
    counts = ", ".join(f"{n} {state}" for state, n in states.most_common())
    lines = [f"job {job}: {len(rows)} array task(s): {counts}; {len(rows) - len(bad)} "
             f"training, {len(bad)} not"]  # fmt: skip
    if quorum is not None:
        lines.append(render_quorum(quorum))
    if page is not None:
        lines.append(printable(_page_counts(sp.summarize(page))))
    if bad:
        lines.append(
            f"not training ({len(bad)}): not RUNNING, ranks down, log quiet over "
            f"{_fmt_age(QUIET_LOG_S)}, or not training for the Lighthouse"
        )
        shown = bad[:limit]
        lines += _table(shown, ["; ".join(why[r.replica]) for r in shown])
        if len(bad) > limit:
            lines.append(f"  ... and {len(bad) - limit} more (--all / --json for all)")
    return "\n".join(lines)


def _page_counts(s: sp.PageSummary) -> str:
    n = s.states
    return (f"lighthouse ids: {n[sp.TRAINING]} training, {n[sp.HEALING]} healing, {n[sp.LATE]} "
            f"late, {n[sp.LOST]} lost, {n[sp.JOINING]} joining, {n[sp.GONE]} gone; "
            f"heartbeats {s.heartbeating} live, {s.old} old")  # fmt: skip


def _table(rows: list[Row], why: list[str] | None = None) -> list[str]:
    """The header and one line per row, columns aligned; `why`: a last WHY column."""
    head = ["REPLICA", "STATE", "REASON", "NODE", "RESTARTS", "ATTEMPT", "STEP", "LOSS", "LAST LOG"]
    with_slot = any(r.slot for r in rows)  # a run with warm spares: which task holds which slot
    if with_slot:
        head = ["TASK", "SLOT", *head[1:]]
    # replicas of several ranks: how many of them are training (torchrun ends all at once)
    with_ranks = any(r.ranks > 1 for r in rows)
    if with_ranks:
        at = head.index("STATE") + 1
        head = [*head[:at], "RANKS", *head[at:]]
    body = [[printable(c) for c in _cells(r, with_slot, with_ranks)] for r in rows]
    if why is not None:
        head = [*head, "WHY"]
        body = [[*cells, printable(w)] for cells, w in zip(body, why, strict=True)]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    return ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
            for cells in [head, *body]]  # fmt: skip


def render_quorum(q: Quorum) -> str:
    """One line; escaped like the table (the Lighthouse's address, errors and member ids)."""
    return printable(_quorum_text(q))


MAX_NAMES = 8  # quorum members named on the line; the rest are counted
MAX_NAME = 40  # characters of a member's name shown, the cut marked `...`


def _member_names(participants: list[str]) -> str:
    """The members as the line names them (`torchtitan_ft_0`: the id before its uuid), at
    most MAX_NAMES of MAX_NAME characters: a member's id is whatever its replica asked the
    Lighthouse for a quorum with (a 5,000-digit one too), and the line stays one line."""
    names = [p.split(":", 1)[0] for p in participants[:MAX_NAMES]]
    shown = [n if len(n) <= MAX_NAME else n[: MAX_NAME - 3] + "..." for n in names]
    more = len(participants) - len(shown)
    return ", ".join(shown) + (f", {more} more" if more else "") or "none"


def _quorum_text(q: Quorum) -> str:
    if not q.running:
        return "lighthouse: not running" + (f" ({q.error})" if q.error else "")
    if q.quorum_id is None:
        return f"lighthouse: {q.address} running" + (f", {q.error}" if q.error else "")
    who = _member_names(q.participants)
    n = len(q.participants)
    text = f"lighthouse: {q.address} quorum {q.quorum_id}: {n} member{'s' * (n != 1)} ({who})"
    if q.heartbeating is not None:
        text += f", {q.heartbeating} heartbeating"
    return text


def to_json(job: int, rows: list[Row], quorum: Quorum | None,
            page: QuorumPage | None = None) -> dict[str, Any]:  # fmt: skip
    """Strict JSON: a diverged loss (nan, inf in the log) is null (json.dumps would write the
    NaN / Infinity that strict parsers refuse); the text table shows it as logged. `summary`:
    the tasks per Slurm state, why each task not training is not (task -> reasons), and the
    Lighthouse page's counts (its member list is `lighthouse.participants`, once)."""
    tasks = [asdict(r) for r in rows]
    for t in tasks:
        if not t["slot"]:
            del t["slot"]  # a run without spares: the keys it always had
        if t["last_loss"] is not None and not math.isfinite(t["last_loss"]):
            t["last_loss"] = None
    slots = _judged(page)
    why = {str(r.replica): w for r in rows if (w := problems(r, slots))}
    return {
        "job": job,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tasks": tasks,
        "lighthouse": asdict(quorum) if quorum is not None else None,
        "summary": {
            "tasks": len(rows), "states": dict(Counter(r.state for r in rows)),
            "not_training": why,
            "lighthouse": sp.summarize(page).counts() if page is not None else None,
        },
    }  # fmt: skip


MAX_EVENTS = 10  # newest claims that took a slot over, and node actions, shown without --all


def claim_summary(claims: list[Any], limit: int | None = MAX_EVENTS) -> list[str]:
    """The warm spares' claims for a person (slots.Claim, oldest first). Each slot's first
    claim (at the start: 1,024 of them in a 1,024-replica run) is counted, not listed; the
    claims that took a slot from another task are listed, the newest `limit` (None: every
    claim, one line each)."""
    from ftslurm.replica import slots

    if limit is None or not claims:
        return slots.claim_lines(claims)
    firsts = [c for c in claims if c.epoch == 0]
    later = [c for c in claims if c.epoch != 0]
    lines = [f"claims: {len(firsts)} slot(s) claimed at the start, {len(later)} taken over "
             "since (by a spare, or a task back from a failure)"]  # fmt: skip
    if len(later) > limit:
        lines.append(f"  ... {len(later) - limit} earlier takeover(s): ftslurm status --all "
                     "lists every claim")  # fmt: skip
    return lines + slots.claim_lines(later[-limit:] if limit else [])


def node_action_lines(actions: list[Any], limit: int | None = None) -> list[str]:
    """The nodes this run's launchers took out of its way (preflight.NodeAction: drained,
    avoided through ExcNodeList, or kept as the last node), each with the time, the reason and
    the command that brings it back; the newest `limit` (None: all)."""
    if not actions:
        return []
    lines = ["nodes taken out of this run's way (preflight.py):"]
    if limit is not None and len(actions) > limit:
        lines.append(f"  ... {len(actions) - limit} earlier: ftslurm status --all lists them")
        actions = actions[-limit:] if limit else []
    for a in actions:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.time))
        undo = a.undo()
        lines.append(printable(f"  {a.node}  {a.action}  at {when}  {a.reason}"
                               + (f"  (undo: {undo})" if undo else "")))  # fmt: skip
    return lines


def node_actions_json(actions: list[Any]) -> list[dict[str, Any]]:
    """`node_action_lines` as JSON: node, action, time (epoch s), reason, job, task, undo."""
    return [{**asdict(a), "undo": a.undo()} for a in actions]
