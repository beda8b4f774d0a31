"""Pure parsers of Slurm client output (Debian's Slurm 22.05; tested on recorded real output).

Unknown states map to UNKNOWN, never an exception: Slurm adds states between releases and
decorates them (`idle*` = not responding, `down~`, `COMPLETING`, `PENDING (BeginTime)`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

JOB_STATES = {
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED",
    "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "REVOKED", "SIGNALING",
    "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "CONFIGURING", "RESV_DEL_HOLD",
}  # fmt: skip
SHORT_JOB_STATES = {
    "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CG": "COMPLETING", "CD": "COMPLETED",
    "CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED",
    "BF": "BOOT_FAIL", "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY", "RQ": "REQUEUED",
    "RH": "REQUEUE_HOLD", "RF": "REQUEUE_FED", "RS": "RESIZING", "RV": "REVOKED",
    "SI": "SIGNALING", "SE": "SPECIAL_EXIT", "SO": "STAGE_OUT", "ST": "STOPPED",
    "CF": "CONFIGURING",
}  # fmt: skip
UNKNOWN = "UNKNOWN"


def normalize_job_state(raw: str | None) -> str:
    """'RUNNING', 'R', 'CANCELLED by 0', 'PENDING' ... -> canonical name, else UNKNOWN."""
    if not raw:
        return UNKNOWN
    word = raw.strip().split()[0].upper().rstrip("+")
    if word in JOB_STATES:
        return word
    return SHORT_JOB_STATES.get(word, UNKNOWN)


NODE_BASE_STATES = {  # sinfo's short forms go through NODE_ALIASES first
    "idle", "allocated", "mixed", "down", "drained", "drain", "draining", "completing", "fail",
    "failing", "future", "maint", "reserved", "unknown", "inval", "planned", "power_down",
    "powered_down", "powering_down", "powering_up", "reboot_issued", "reboot_requested",
    "perfctrs", "npc", "blocked",
}  # fmt: skip
NODE_ALIASES = {
    "alloc": "allocated",
    "mix": "mixed",
    "comp": "completing",
    "drng": "draining",
    "unk": "unknown",
    "futr": "future",
    "resv": "reserved",
    "plnd": "planned",
}


@dataclass(frozen=True)
class NodeState:
    """A node's state split into its base word and Slurm's flags."""

    base: str  # idle, allocated, down, ... or 'unknown'
    not_responding: bool = False  # '*'
    raw: str = ""

    @property
    def usable(self) -> bool:
        return self.base in ("idle", "allocated", "mixed", "completing") and not self.not_responding


def parse_node_state(raw: str) -> NodeState:
    """'idle', 'idle*', 'down*', 'allocated+drain', 'IDLE' -> NodeState."""
    text = raw.strip()
    not_responding = "*" in text
    word = re.split(r"[*~#!%$@^\-+ ]", text.lower(), maxsplit=1)[0]
    word = NODE_ALIASES.get(word, word)
    base = word if word in NODE_BASE_STATES else "unknown"
    return NodeState(base=base, not_responding=not_responding, raw=text)


def parse_sinfo_nodes(text: str) -> dict[str, str]:
    """`sinfo -h -N -o '%N %T'` -> {node: state}. A node in several partitions appears once."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out.setdefault(parts[0], parts[1])
    return out


@dataclass(frozen=True)
class NodeRow:
    """One line of `sinfo -N -o '%N|%P|%T|%G'` (a node in two partitions is two rows)."""

    name: str
    partition: str
    state: str
    gres: str

    @property
    def idle(self) -> bool:
        """Idle capacity, power-saving states included (`idle~`: Slurm powers it up)."""
        return self.state.rstrip("*~#!%$@^").lower() == "idle"

    @property
    def ready(self) -> bool:
        """Idle and usable this minute, for the srun probes: `idle*` (not responding), `idle~`
        (powered down), `idle#`, `idle%`, `idle@`, ... would make a probe fail or wait past
        its --immediate, and blame the Lighthouse address or the filesystem."""
        return self.state.lower() == "idle"

    @property
    def responding(self) -> bool:
        st = parse_node_state(self.state)
        return not st.not_responding and st.base not in (
            "down", "drained", "drain", "fail", "future", "unknown", "inval", "maint",
        )  # fmt: skip


def parse_sinfo_rows(text: str) -> list[NodeRow]:
    """`sinfo -h -N -o '%N|%P|%T|%G'` -> rows (the default partition loses its `*`)."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            name, part, state, gres = (p.strip() for p in parts)
            rows.append(NodeRow(name, part.rstrip("*"), state, gres))
    return rows


def parse_partitions(text: str) -> dict[str, str]:
    """`sinfo -h -o '%R|%a'` -> {partition: up|down|drain|inact}."""
    out = {}
    for line in text.splitlines():
        if "|" in line:
            name, avail = line.strip().split("|", 1)
            out[name.strip()] = avail.strip().lower()
    return out


def parse_time_limit(text: str) -> int:
    """sinfo's `%l` (`infinite`, `1-00:00:00`, `2:00:00`, `30:00`, `30`) -> minutes, 0 = none."""
    text = text.strip().lower()
    if not text or text in ("infinite", "unlimited", "n/a"):
        return 0
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, (m, s) = (0, parts) if not days else (parts[0], (parts[1], 0))
    else:
        h, m, s = (parts[0], 0, 0) if days else (0, parts[0], 0)
    return days * 24 * 60 + h * 60 + m + (1 if s else 0)


def parse_partition_limits(text: str) -> tuple[dict[str, int], str | None]:
    """`sinfo -h -o '%P %l'` -> ({partition: time limit in minutes, 0 = none}, the default
    partition (marked `*`) or None)."""
    limits: dict[str, int] = {}
    default = None
    for line in text.splitlines():
        if not line.strip():
            continue
        name, limit = line.split()[:2]
        if name.endswith("*"):
            name = default = name.rstrip("*")
        limits[name] = parse_time_limit(limit)
    return limits, default


def parse_job_ids(text: str) -> list[str]:
    """`squeue -h -o %i` -> the job ids (an array's tasks `21_0`, `21_[2-3]` count as `21`)."""
    ids = {line.split("_")[0] for line in text.split()}
    return sorted(ids, key=lambda i: (len(i), i))


def conf_value(text: str, key: str) -> str | None:
    """The value of `key` in slurm.conf text (keys are case-insensitive; the last one wins)."""
    found = re.findall(rf"^\s*{key}\s*=\s*([^\s#]+)", text, re.IGNORECASE | re.MULTILINE)
    return found[-1] if found else None


_KV = re.compile(r"([A-Za-z][\w:/.]*)=(.*?)(?=\s+[A-Za-z][\w:/.]*=|\s*$)")


def parse_key_values(text: str) -> dict[str, str]:
    """`scontrol show job/node` text -> dict. Values run to the next ` Key=` token, so values
    with spaces (a node's `Reason=ftslurm test [root@...]`) stay whole. One record; see
    `split_scontrol_records` for many."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        for key, value in _KV.findall(line.strip()):
            out.setdefault(key, value)
    return out


def split_scontrol_records(text: str) -> list[dict[str, str]]:
    """Many records separated by blank lines (`scontrol show job` with several jobs)."""
    return [parse_key_values(block) for block in re.split(r"\n\s*\n", text) if block.strip()]


@dataclass
class JobInfo:
    """One Slurm job (or array task) as the FT tools need it."""

    job_id: int
    array_job_id: int | None
    array_task_id: int | None
    state: str
    reason: str = ""
    node: str = ""
    restarts: int = 0
    name: str = ""
    user: str = ""
    stdout: str = ""

    @property
    def key(self) -> str:
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)


def _int_or_none(v) -> int | None:
    if v is None or v == "" or isinstance(v, bool):
        return None
    if isinstance(v, dict):  # newer openapi: {"set": true, "number": 3}
        return _int_or_none(v.get("number")) if v.get("set", True) else None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


_NO_VAL = 0xFFFFFFFE  # Slurm's "no value" in 32-bit fields (NO_VAL); INFINITE is 0xFFFFFFFF
_MAX_EXPANDED = 100_000


def expand_array_tasks(spec: str) -> list[int]:
    """Slurm's task string of the pending tasks of an array (`2-3`, `0,4-9:2`, `[2-3]`,
    `0-99%4`) -> the task ids. squeue lists a pending array's tasks as one record with such a
    string (`21_[2-3]`; `squeue --json` on 22.05: array_task_id null, array_task_string
    "2-3"). Anything that does not parse gives [] (the record is then kept as one)."""
    spec = spec.strip().strip("[]").split("%", 1)[0]
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        rng, _, step_s = part.partition(":")
        lo_s, dash, hi_s = rng.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if dash else lo
            step = int(step_s) if step_s else 1
        except ValueError:
            return []
        if lo < 0 or hi < lo or step < 1 or len(out) + (hi - lo) // step + 1 > _MAX_EXPANDED:
            return []
        out.extend(range(lo, hi + 1, step))
    return out


def _per_task(job: JobInfo, spec: str) -> list[JobInfo]:
    """One JobInfo per pending task of a collapsed array record, else the record itself."""
    tasks = expand_array_tasks(spec) if job.array_job_id and spec else []
    if not tasks:
        return [job]
    return [replace(job, array_task_id=t) for t in tasks]


# Slurm keeps these jobs until someone runs `scontrol release`: as a state (newer Slurm's JSON
# flags, `%T` on some versions) or as PENDING with a hold reason (22.05: "job requeued in held
# state" from `squeue -o %r`, JobHeldUser in --json; launch_failed_requeued_held).
HELD_STATES = ("REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD")
_HELD_REASONS = {"jobhelduser", "jobheldadmin", "jobrequeuedinheldstate",
                 "launchfailedrequeuedheld"}  # fmt: skip


def is_held(job: JobInfo) -> bool:
    """The job waits for `scontrol release` (it will not run by itself)."""
    reason = re.sub(r"[\s_]", "", job.reason).lower()
    return job.state in HELD_STATES or (job.state == "PENDING" and reason in _HELD_REASONS)


def parse_squeue_json(text: str) -> list[JobInfo]:
    """`squeue --json` (openapi v0.0.38 on 22.05; tolerant of newer shapes) -> jobs.

    Note: on 22.05 `squeue --json` ignores -j/-t; callers filter themselves."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return []
    jobs = []
    for j in data.get("jobs", []) if isinstance(data, dict) else []:
        state = j.get("job_state")
        if isinstance(state, list):  # newer Slurm: the base state, then flags (a hold is one)
            state = next((f for f in state if f in HELD_STATES), state[0] if state else None)
        array_job = _int_or_none(j.get("array_job_id"))
        task = _int_or_none(j.get("array_task_id"))
        if task is not None and task >= _NO_VAL:
            task = None
        jobs += _per_task(
            JobInfo(
                job_id=_int_or_none(j.get("job_id")) or 0,
                array_job_id=array_job if array_job else None,
                array_task_id=task,
                state=normalize_job_state(state),
                reason=str(j.get("state_reason") or ""),
                node=str(j.get("nodes") or j.get("batch_host") or ""),
                restarts=_int_or_none(j.get("restart_cnt")) or 0,
                name=str(j.get("name") or ""),
                user=str(j.get("user_name") or ""),
                stdout=str(j.get("standard_output") or ""),
            ),
            str(j.get("array_task_string") or "") if task is None else "",
        )
    return jobs


# `squeue -h -o` format used when --json is missing; '|' never appears in these fields.
SQUEUE_FORMAT = "%i|%F|%K|%T|%r|%N|%j|%u"


def parse_squeue_text(text: str) -> list[JobInfo]:
    """`squeue -h -o SQUEUE_FORMAT` -> jobs (restarts are not in squeue's text output)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 8:
            continue
        jid, array_job, task, state, reason, node, name, user = parts[:8]
        base = jid.split("_", 1)[0]
        task_id = _int_or_none(task) if task not in ("N/A", "") else None
        # a pending array collapsed to one line (`21_[2-3]|21|2-3|PENDING`, squeue without -r)
        collapsed = task if task_id is None and "_[" in jid else ""
        jobs += _per_task(
            JobInfo(
                job_id=_int_or_none(base) or 0,
                array_job_id=_int_or_none(array_job) if task_id is not None or collapsed else None,
                array_task_id=task_id,
                state=normalize_job_state(state),
                reason="" if reason in ("None", "(null)") else reason,
                node=node,
                name=name,
                user=user,
            ),
            collapsed,
        )
    return jobs


def job_from_scontrol(rec: dict[str, str]) -> JobInfo:
    """One record of `scontrol show job` -> JobInfo (has Restarts, which squeue text lacks)."""
    task = _int_or_none(rec.get("ArrayTaskId"))
    node = rec.get("BatchHost") or rec.get("NodeList", "")
    return JobInfo(
        job_id=_int_or_none(rec.get("JobId")) or 0,
        array_job_id=_int_or_none(rec.get("ArrayJobId")) if task is not None else None,
        array_task_id=task,
        state=normalize_job_state(rec.get("JobState")),
        reason="" if rec.get("Reason") in (None, "None") else rec["Reason"],
        node="" if node in ("(null)", "None") else node,
        restarts=_int_or_none(rec.get("Restarts")) or 0,
        name=rec.get("JobName", ""),
        user=rec.get("UserId", "").split("(", 1)[0],
        stdout=rec.get("StdOut", ""),
    )


LIVE_STATES = ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "REQUEUED")


def array_tasks(jobs: list[JobInfo], job: int) -> dict[int, JobInfo]:
    """The tasks of array `job`: task id -> its entry; a live entry wins over a finished one
    of the same task (squeue can list both while a task is requeued)."""
    out: dict[int, JobInfo] = {}
    for j in jobs:
        if j.array_job_id != job or j.array_task_id is None:
            continue
        prev = out.get(j.array_task_id)
        if prev is None or (prev.state not in LIVE_STATES and j.state in LIVE_STATES):
            out[j.array_task_id] = j
    return out


@dataclass(frozen=True)
class NodeReason:
    """One line of `sinfo -h -N -o '%N|%T|%H|%E'`: a node, its state, when its Reason= was
    set (Slurm's local time, `Unknown` when none) and the reason."""

    name: str
    state: str
    since: str
    reason: str


def parse_sinfo_reasons(text: str) -> list[NodeReason]:
    """`sinfo -h -N -o '%N|%T|%H|%E'` -> one NodeReason per node (`none` reason: empty); a
    reason may hold `|`, so it is the rest of the line."""
    out: dict[str, NodeReason] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[0]:
            name, state, since, reason = (x.strip() for x in parts)
            out[name] = NodeReason(name, state, since, "" if reason == "none" else reason)
    return list(out.values())
