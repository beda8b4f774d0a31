"""The log vocabulary: every line ftslurm writes or reads in replica logs, and their file names.

Why one module: `report`, `status`, `demo`, `failure` and `logs` all read the launcher's banner,
torchtitan's steps, torchft's heal and quorum lines and the files the sbatch script names; one
writer or parser per shape keeps them in step, and the fuzz tests fuzz the dispatcher the report
really uses (`parse_line`). Every shape is copied from real logs (the recorded runs under
tests/fixtures, the cluster guide's excerpt); nothing is guessed. Four formats interleave:

- Rust env_logger (Lighthouse and the Rust half of the Manager):
  `2026-11-23T08:50:55.316 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 1, ...`
- torchtitan's Python logging: `[titan] 2025-07-16 13:49:32,462 - torchft.manager - INFO - ...`,
  its step lines `step: 121  loss:  5.97775 ...` (in ANSI colours);
- bare Python logging (torchft's own examples): `INFO:torchft.manager:[train_ddp_0:<uuid>/0 -
  step 22] ...` with NO timestamp: a file reader gives it the time of the line before;
- the launcher's banner: `[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on worker-0`.

Lines are bytes: the streaming reader (`report/reader.py`) finds the few lines that matter in
big binary chunks and hands only those to `parse_line`, which decodes what it keeps.
Files: `<outputs>/torchft/tft-<job>/tft-<job>_<i>.out` (`.out.gz` once archived).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Protocol

from ftslurm import failure_modes, paths

# ---------------------------------------------------------------- files of a run

# A number in a log (a step, an attempt, a replica index, a quorum id) has at most 18 digits
# (the `{1,18}` in the shapes below): they do not match a longer one, the line is then malformed
# (the report counts it), and int() never meets the thousands of digits it refuses (ValueError
# past 4300: `step: 999...` in a log stopped `report` and `status`).
MAX_DIGITS = 18

RUN_PREFIX = "tft-"
_LOG_NAME = re.compile(r"^tft-(.+)_(\d{1,18})\.out(\.gz)?$")


class LogName(NamedTuple):
    job: str
    replica: int
    archived: bool  # `.out.gz`


def run_dir(job: object, outputs: Path | None = None) -> Path:
    """`<outputs>/torchft/tft-<job>`: where the FT sbatch script writes a run's logs."""
    return paths.torchft_runs_dir(outputs) / f"{RUN_PREFIX}{job}"


def replica_log(job: object, replica: object, folder: Path | None = None) -> Path:
    """`tft-<job>_<replica>.out` in `folder` (default: the run's folder, `run_dir(job)`)."""
    return (run_dir(job) if folder is None else folder) / f"{RUN_PREFIX}{job}_{replica}.out"


def parse_log_name(name: str) -> LogName | None:
    """`tft-12_1.out` -> ('12', 1, False); `tft-12_1.out.gz` -> ('12', 1, True); else None."""
    m = _LOG_NAME.match(name)
    return LogName(m.group(1), int(m.group(2)), bool(m.group(3))) if m else None


def run_job(name: str) -> str | None:
    """The job of a run folder's name (`tft-12` -> '12'), else None."""
    job = name[len(RUN_PREFIX) :] if name.startswith(RUN_PREFIX) else ""
    return job or None


def newest_run_dir(root: Path) -> Path | None:
    """The most recently modified `tft-<job>` folder under `root` (a tie: the last name)."""
    try:
        dirs = [p for p in root.iterdir() if run_job(p.name) and p.is_dir()]
    except OSError:
        return None
    return max(dirs, key=lambda p: (p.stat().st_mtime, p.name), default=None)


# ---------------------------------------------------------------- events

QUORUM = "quorum"  # a quorum (Lighthouse `Quorum!` or the manager's `got lighthouse quorum`)
LIGHTHOUSE_START = "lighthouse_start"  # `Lighthouse listening on: ...`
COMMIT = "commit"  # `should_commit=True|False` (Python manager, per rank)
ERROR = "error"  # `got exception ...`, `should_commit failed N times ...`
PEERS_RECOVER = "peers_recover"  # sender: `peers need recovery from us [1]` (quorum ranks)
HEAL_REQUIRED = "heal_required"  # receiver: healing required ... max_step=N
HEAL_FETCH = "heal_fetch"  # receiver: `fetching checkpoint from recover_src_replica_rank=0`
HEALED = "healed"  # receiver: `Loaded state dict.` at step N
RECONFIGURE = "reconfigure"  # `reconfiguring for quorum_id=N`
MANAGER_START = "manager_start"  # Rust `[Replica X] Manager listening on ...`: a new process
LAUNCH = "launch"  # launcher: `launching replica 1 (attempt 1) on worker-0`
TITAN_STEP = "titan_step"  # torchtitan `step: N  loss: L` (ANSI colours stripped)
INJECTED = "injected"  # one line of the simulate-failure event log (see event_log.py)
# the failures simulate-failure injects (failure_plan.py), as its event log names them
FAILURE_MODES = failure_modes.NAMES
FINISHED = "finished"  # torchtitan `Training completed`: the replica ended normally


@dataclass(frozen=True, slots=True)
class Member:
    """One QuorumMember: full replica id, its step, its commit_failures counter."""

    replica_id: str
    step: int
    commit_failures: int = 0


@dataclass(slots=True)
class Event:
    """Something that happened, as one log line says it.

    `time` is seconds since 1970 reading the log's wall clock as if it were UTC (the logs carry
    local time without a zone; see `timeline.clock_offset` for zone-aware inputs), or None when
    no line of the file had a time yet. `replica` is the id as logged: `prefix_<i>:<uuid>` from
    Python lines and quorums, `prefix_<i>` from the Rust manager. LAUNCH: `replica` is the
    index, `rank` the attempt.
    """

    kind: str
    time: float | None
    replica: str | None = None
    step: int | None = None
    rank: int | None = None
    quorum_id: int | None = None
    members: tuple[Member, ...] = ()
    ranks: tuple[int, ...] = ()
    ok: bool | None = None
    detail: str = ""
    source: str = ""
    seq: int = 0
    prev_round_time: float | None = None  # QUORUM: time of the previous round (last seen alive)
    node: str = ""  # LAUNCH / INJECTED: the node
    restart: int = 0  # LAUNCH: the restart in place within the attempt (0: Slurm started it)
    job: str = ""  # INJECTED: the Slurm job id


_RID = re.compile(r"^(.*)_(\d{1,18})(?::(.*))?$")


@lru_cache(maxsize=4096)  # the timeline asks for the same few ids thousands of times
def split_replica_id(rid: str) -> tuple[str, int | None, str | None]:
    """`torchtitan_ft_1:5ea8...` -> ('torchtitan_ft', 1, '5ea8...'); any `<prefix>_<i>`."""
    m = _RID.match(rid)
    if not m:
        return rid, None, None
    return m.group(1), int(m.group(2)), m.group(3)


# ---------------------------------------------------------------- time

_TS = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
# C++ (glog) lines of torch: `W1123 10:12:54.001000 11604 file.py:1028] ...` (no year)
_GLOG = re.compile(rb"\[?[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d(?:\.\d{1,9})?)\s")
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_day_cache: dict[bytes, int] = {}


def has_time(line: bytes) -> bool:
    """The line starts like a timestamped one (Rust, titan or banner): a cheap test before
    `parse_time`, for scanners that look for the nearest timed line."""
    c = line[:1]
    return (c == b"2" and line[4:5] == b"-") or (
        c == b"[" and (line[5:6] == b"-" or line[:8] == b"[titan] ")
    )


def _day_seconds(y: bytes, mo: bytes, d: bytes) -> int:
    key = y + mo + d
    v = _day_cache.get(key)
    if v is None:
        v = (date(int(y), int(mo), int(d)).toordinal() - _EPOCH_ORD) * 86400
        if len(_day_cache) < 4096:
            _day_cache[key] = v
    return v


def parse_time(line: bytes, utc_offset: float = 0.0) -> float | None:
    """Time at the start of a line (Rust, titan or banner shape), else None.

    A zone-aware time (`Z`, `+02:00`) is moved onto the logs' local clock with `utc_offset`
    (seconds local minus UTC); naive times are kept as they are.
    """
    if line[:8] == b"[titan] ":
        pos = 8
    elif line[:1] == b"[":
        pos = 1
    else:
        pos = 0
    m = _TS.match(line, pos)
    if not m:
        return None
    y, mo, d, h, mi, s, frac, zone = m.groups()
    try:
        t = _day_seconds(y, mo, d) + int(h) * 3600 + int(mi) * 60 + int(s)
    except ValueError:
        return None
    if frac:
        t += int(frac) / 10 ** len(frac)
    if zone:
        if zone != b"Z":
            sign = -1 if zone[:1] == b"-" else 1
            hh, mm = int(zone[1:3]), int(zone[-2:])
            t -= sign * (hh * 3600 + mm * 60)
        t += utc_offset
    return t


def line_time(line: str, year: int | None = None) -> float | None:
    """`parse_time` of a text line, or the time of a torch C++ (glog) line, which has no year:
    `year` (default: this year) is assumed. Only for ordering lines (`ftslurm logs`)."""
    raw = line.encode(errors="replace")
    t = parse_time(raw)
    if t is None and (g := _GLOG.match(raw)):
        y = b"%04d" % (year or datetime.now().year)
        t = parse_time(b"%b-%b-%b %b" % (y, g.group(1), g.group(2), g.group(3)))
    return t


# ---------------------------------------------------------------- banner, steps, colours

BANNER = b"launching replica "  # what readers look for; one per attempt
# group 3: the restart in place within the attempt (job.py), when there was one; groups 5-7
# when the run has warm spares (FT_SPARES): the array task that holds the slot (the
# replica) now, the claim's fencing epoch, and the task it was taken from
_BANNER = re.compile(
    rb"launching replica (\d{1,18}) \(attempt (\d{1,18})(?:, restart (\d{1,18}))?\)(?: on (\S+))?"
    rb"(?: as task (\d{1,18}) \(slot epoch (\d{1,18})(?:, taken from task (\d{1,18}))?\))?"
)
# a warm spare's start (no slot yet): `launching spare (attempt 0) on node-2 as task 2`
SPARE_BANNER = b"launching spare "
STEP = re.compile(rb"step:\s*(\d{1,18})\s+loss:\s*([-+0-9.eEnaifNI]+)")  # after strip_ansi
# colour codes and any other CSI / OSC / two-byte escape: none may change what a line says,
# and none spans a line end (an OSC left open at one line's end closed by the next line's BEL
# would join the two lines)
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


# the same shapes for callers that search a log's decoded text (tests that read a whole log)
STEP_TEXT = re.compile(STEP.pattern.decode())
ANSI_TEXT = re.compile(_ANSI.pattern.decode())


def strip_ansi_text(text: str) -> str:
    """`text` without its ANSI colour codes (`strip_ansi` of decoded text)."""
    return ANSI_TEXT.sub("", text)


def _attempt(attempt: int, restart: int) -> str:
    return f"attempt {attempt}" + (f", restart {restart}" if restart else "")


class Launched(Protocol):
    """What a banner says of an attempt: the fields of `replica.plan.Plan` it reads (a
    protocol, so the vocabulary does not import the launcher)."""

    @property
    def kind(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def replica_id(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def task(self) -> int | None: ...
    @property
    def spare(self) -> bool: ...
    @property
    def slot_epoch(self) -> int | None: ...


def banner(time_text: str, plan: Launched, hostname: str, restart: int = 0) -> str:
    """The first line of every attempt, in the cookbook's shape (two spaces after `]`):
    `[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on worker-0`; a restart in place
    within Slurm's attempt (job.py) adds its number: `(attempt 1, restart 2)`."""
    if plan.kind == "classic":
        return f"[{time_text}]  launching classic job {plan.run_id} on {hostname}"
    if plan.spare:
        return (f"[{time_text}]  launching spare ({_attempt(plan.attempt, restart)}) on "
                f"{hostname} as task {plan.task}")
    if plan.task is not None and plan.slot_epoch is not None:
        return slot_banner(time_text, plan.replica_id, plan.attempt, hostname, plan.task,
                           plan.slot_epoch, restart=restart)  # fmt: skip
    return (f"[{time_text}]  launching replica {plan.replica_id} "
            f"({_attempt(plan.attempt, restart)}) on {hostname}")


def slot_banner(time_text: str, slot: int, attempt: int, hostname: str, task: int, epoch: int,
                taken_from: int | None = None, restart: int = 0) -> str:  # fmt: skip
    """The banner of a replica in a run with spares: the slot is the replica, `task` the array
    task holding it; a spare that claims a slot writes one too (`taken from task U`), so the
    report starts a new attempt of that replica in the spare's log."""
    taken = ""
    if taken_from is not None and taken_from != task:
        taken = f", taken from task {taken_from}"
    return (
        f"[{time_text}]  launching replica {slot} ({_attempt(attempt, restart)}) on {hostname} "
        f"as task {task} (slot epoch {epoch}{taken})"
    )


def restart_line(node: str, state: str, why: str, restart: int, cap: int, attempt: int) -> str:
    """The launcher's line when it restarts the training in place (job.py), before the next
    banner: `restarting in place on worker-1 (mixed): ... (restart 1 of 3, attempt 0)`."""
    return (f"restarting in place on {node} ({state}): {why} (restart {restart} of "
            f"FT_MAX_RESTARTS={cap}, attempt {attempt})")


def last_banner(data: bytes) -> re.Match[bytes] | None:
    """The last banner in `data`: group 1 the replica, 2 the attempt, 4 the node."""
    found = list(_BANNER.finditer(data))
    return found[-1] if found else None


def count_banners(path: Path) -> int:
    """How many attempts the log has begun (banner lines, a warm spare's too; read in blocks,
    not at once)."""
    n = 0
    try:
        with open(path, "rb") as fh:
            carry = b""
            while chunk := fh.read(1 << 20):
                data = carry + chunk
                n += data.count(BANNER) + data.count(SPARE_BANNER)
                carry = data[-32:]
                n -= carry.count(BANNER) + carry.count(SPARE_BANNER)
            n += carry.count(BANNER) + carry.count(SPARE_BANNER)
    except OSError:
        return 0
    return n


def strip_ansi(data: bytes) -> bytes:
    """`data` without its ANSI colour codes (torchtitan colours its step lines)."""
    return _ANSI.sub(b"", data)


# ---------------------------------------------------------------- torchft lines

_QID = re.compile(rb"quorum_id: (\d{1,18})(?!\d)")
_MEMBER = re.compile(
    rb'replica_id: "([^"]*)".*?[ ,{]step: (-?\d+)(?:.*?commit_failures: (\d+))?'
)
_SRC_ADDRESS = re.compile(rb"recover_src_manager_address='?([^'\s]+)")
_CREATED = re.compile(rb"created: Some\(Timestamp \{ seconds: (\d{1,18}), nanos: (\d{1,18})(?!\d)")
_MGR = re.compile(rb"\[([^\s\[\]/]+)/(\d{1,18}) - step (-?\d{1,18})\] ([^\r\n]*)")
_RUST_REPLICA = re.compile(rb"\[Replica ([^\]\s]+)\] ([^\r\n]*)")
_INTS = re.compile(rb"(?<!\d)-?\d{1,18}(?!\d)")
_KV_INT = {
    k: re.compile(rb"(?<![a-z_])" + k.encode() + rb"=(-?\d{1,18})(?!\d)")
    for k in ("max_step", "recover_src_replica_rank", "step", "quorum_id")
}


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _kv(name: str, msg: bytes) -> int | None:
    m = _KV_INT[name].search(msg)
    return int(m.group(1)) if m else None


def parse_quorum(line: bytes, t: float | None) -> Event | None:
    """A `Quorum { quorum_id: N, participants: [...] }` line (Lighthouse or manager side).

    None when truncated: a quorum with a partial participant list would be a lie.
    """
    m = _QID.search(line)
    if not m:
        return None
    body = line[m.end():]
    end = body.find(b"created:")
    if end < 0 or body.rfind(b"]", 0, end) < 0:
        return None
    found = _MEMBER.findall(body, 0, end)
    if any(len(step.lstrip(b"-")) > MAX_DIGITS or len(cf) > MAX_DIGITS for _, step, cf in found):
        return None  # a member's step past any real one: junk, not a quorum
    members = tuple(Member(_dec(rid), int(step), int(cf) if cf else 0) for rid, step, cf in found)
    return Event(QUORUM, t, quorum_id=int(m.group(1)), members=members)


def quorum_created(line: bytes) -> float | None:
    """When a quorum line's quorum was made (`created: ... { seconds: S, nanos: N }`, UTC)."""
    m = _CREATED.search(line)
    return int(m.group(1)) + int(m.group(2)) / 1e9 if m else None


def parse_manager(line: bytes, t: float | None) -> Event | None:
    """Python manager line `[<replica_id>/<rank> - step N] message`; None if not one we use."""
    m = _MGR.search(line)
    if not m:
        return None
    rid, rank, step, msg = m.groups()
    replica, rank_i, step_i = _dec(rid), int(rank), int(step)
    if msg.startswith(b"should_commit="):
        ok = msg.startswith(b"should_commit=True")
        err = msg.find(b"errored=")
        detail = _dec(msg[err + 8 : err + 208]) if err >= 0 and not ok else ""
        return Event(COMMIT, t, replica, step_i, rank_i, ok=ok, detail=detail)
    if msg.startswith(b"peers need recovery from us"):
        lb = msg.find(b"[")
        ranks = tuple(int(x) for x in _INTS.findall(msg, lb)) if lb >= 0 else ()
        return Event(PEERS_RECOVER, t, replica, step_i, rank_i, ranks=ranks)
    if msg.startswith(b"healing required"):
        src = _SRC_ADDRESS.search(msg)  # the source by manager address (`Manager listening on`)
        detail = _dec(src.group(1)) if src else ""
        return Event(HEAL_REQUIRED, t, replica, _kv("max_step", msg), rank_i, detail=detail)
    if msg.startswith(b"fetching checkpoint from recover_src_replica_rank="):
        src = _kv("recover_src_replica_rank", msg)
        ranks = (src,) if src is not None else ()
        return Event(HEAL_FETCH, t, replica, step_i, rank_i, ranks=ranks)
    if msg.startswith(b"Loaded state dict"):
        return Event(HEALED, t, replica, step_i, rank_i)
    if msg.startswith(b"reconfiguring for quorum_id="):
        return Event(RECONFIGURE, t, replica, step_i, rank_i, quorum_id=_kv("quorum_id", msg))
    if msg.startswith(b"got exception") or msg.startswith(b"should_commit failed"):
        return Event(ERROR, t, replica, step_i, rank_i, detail=_dec(msg[:200]))
    return None


def parse_rust_replica(line: bytes, t: float | None) -> Event | None:
    """Rust manager `[Replica <prefix_i>] ...`: process start and the healing decision."""
    m = _RUST_REPLICA.search(line)
    if not m:
        return None
    rid, msg = m.groups()
    if msg.startswith(b"Manager listening on"):
        return Event(MANAGER_START, t, _dec(rid), detail=_dec(msg[21:].strip()))
    if msg.startswith(b"healing is required"):
        src = _kv("recover_src_replica_rank", msg)
        return Event(
            HEAL_REQUIRED, t, _dec(rid), _kv("max_step", msg),
            ranks=(src,) if src is not None else (), detail=f"from_step={_kv('step', msg)}",
        )
    return None


TAKEN_FROM = "taken from task"  # in a launch event's detail: a warm spare claimed the slot


def parse_launch(line: bytes, t: float | None) -> Event | None:
    """The launcher's banner (`banner` writes it)."""
    m = _BANNER.search(line)
    if not m:
        return None
    idx, attempt, restart, node, task, epoch, taken = m.groups()
    parts = [f"restart {int(restart)}"] if restart is not None else []
    if task is not None:  # a run with spares: which array task holds the slot, at which epoch
        parts.append(f"task {int(task)} epoch {int(epoch)}"
                     + (f" {TAKEN_FROM} {int(taken)}" if taken is not None else ""))
    detail = ", ".join(parts)
    return Event(
        LAUNCH, t, replica=idx.decode(), rank=int(attempt), node=_dec(node) if node else "",
        detail=detail, restart=int(restart) if restart is not None else 0,
    )


class StepLine(NamedTuple):
    """torchtitan's step line, the fields progress readers use: `loss` as logged (it may say
    nan or inf), memory (GiB, % of the device) and tokens per second when the line has them."""

    step: int
    loss: str
    memory_gib: float | None = None
    memory_pct: float | None = None
    tps: int | None = None


_STEP_MEMORY = re.compile(rb"memory:\s*([-\d.]{1,32})GiB\(([-\d.]{1,32})%\)")
_STEP_TPS = re.compile(rb"tps:\s*([\d,]{1,32})")


def _float(b: bytes) -> float | None:
    try:
        return float(b)
    except ValueError:
        return None


def parse_step_line(line: bytes) -> StepLine | None:
    """The fields of one torchtitan step line (colours stripped here), else None."""
    clean = strip_ansi(line)
    m = STEP.search(clean)
    if not m:
        return None
    mem = _STEP_MEMORY.search(clean, m.end())
    tps = _STEP_TPS.search(clean, m.end())
    return StepLine(
        int(m[1]), _dec(m[2]),
        _float(mem[1]) if mem else None, _float(mem[2]) if mem else None,
        int(tps[1].replace(b",", b"")) if tps and tps[1].strip(b",") else None,
    )  # fmt: skip


# torchft's manager line of a committed step, as each rank of a replica logs its own:
# `[torchtitan_ft_1:<uuid>/<rank> - step <N>] should_commit=True`
_RANK_COMMIT = re.compile(rb"/(\d{1,6}) - step (\d{1,18})\] should_commit=True")
_NPROC = re.compile(rb"--nproc[_-]per[_-]node[= ](\d{1,6})")  # the attempt's torchrun line
_EXITED = re.compile(rb"\]  (?:torchrun|training worker) exited with code ")  # job.py's line
COMMIT_OK = b"should_commit=True"
COMMIT_ANY = b"should_commit="


def rank_commits(data: bytes) -> list[tuple[int, int]]:
    """(rank, step) of every committed step a rank logged in `data` (one line or many)."""
    return [(int(rank), int(step)) for rank, step in _RANK_COMMIT.findall(data)]


def nproc_per_node(data: bytes) -> int | None:
    """The last `--nproc_per_node N` (torchrun's command line, as the launcher logs it)."""
    found = _NPROC.findall(data)
    return int(found[-1]) if found else None


def worker_exited(data: bytes) -> bool:
    """The launcher's `torchrun exited with code` / `training worker exited with code` line."""
    return _EXITED.search(data) is not None


def parse_titan_step(line: bytes, t: float | None) -> Event | None:
    """torchtitan's `step: N  loss: L` line; `detail` is the loss as logged."""
    m = STEP.search(strip_ansi(line))
    if not m:
        return None
    return Event(TITAN_STEP, t, step=int(m.group(1)), detail=_dec(m.group(2)))


# ---------------------------------------------------------------- checkpoints, resume, time limit
# The launcher's lines about model checkpoints (fix 9, ft_checkpoints.py) and Slurm's time limit
# (job.py): what a whole-array restart resumed from, and which data position each replica took.

RESUME_PREFIX = "[ftslurm] resume:"
_RESUME = re.compile(
    rb"\[ftslurm\] resume: replica (\d{1,18}) model checkpoint (step-(\d{1,18})|none), data "
    rb"position (step-(\d{1,18})|from the start)"
)
_DATA_POSITION = re.compile(
    rb"\[ftslurm\] data position: replica (\d{1,18}) step (\d{1,18}) sample_idx (\d{1,18}|unknown)"
)
TIME_LIMIT = "time limit -> checkpoint -> requeue"
FINAL_CHECKPOINT_PREFIX = "[ftslurm] time limit:"
_FINAL = re.compile(rb"\[ftslurm\] time limit: after step (\d{1,18}): ")


def parse_final_checkpoint(line: bytes) -> int | None:
    """The step of a `final_checkpoint_line`, else None."""
    m = _FINAL.search(line)
    return int(m[1]) if m else None



def resume_line(replica: object, model_step: int, data_step: int | None, note: str = "") -> str:
    """What a (re)started replica loads: `[ftslurm] resume: replica 1 model checkpoint step-20,
    data position step-20`; `model checkpoint none` and `data position from the start` when there
    is none (a model step 0 is a seed checkpoint: the model only)."""
    model = f"step-{model_step}" if model_step >= 0 else "none"
    data = f"step-{data_step}" if data_step is not None else "from the start"
    return (f"{RESUME_PREFIX} replica {replica} model checkpoint {model}, data position {data}"
            + (f" ({note})" if note else ""))  # fmt: skip


def parse_resume(line: bytes) -> tuple[int, int, int | None] | None:
    """(replica, model step or -1, data step or None) of a `resume_line`, else None."""
    m = _RESUME.search(line)
    if not m:
        return None
    return (int(m[1]), int(m[3]) if m[3] else -1, int(m[5]) if m[5] else None)


def half_written_line(folder: object) -> str:
    """A model checkpoint folder without `.metadata` (DCP writes it last): never loaded."""
    return (f"{RESUME_PREFIX} skipping half-written checkpoint {folder} (no .metadata: its save "
            "was cut off)")  # fmt: skip


DILOCO_STATE_PREFIX = "[ftslurm] DiLoCo state:"


def diloco_state_line(source: object, fragments: int, momentum: tuple[int, ...], local_step: int,
                      sync_every: int, manager_step: int, next_fragment: int,
                      exact: bool) -> str:  # fmt: skip
    """What a resume restored of DiLoCo (diloco_state.py): the fragments' last-sync weights,
    the outer momentum of those whose outer optimizer had stepped, and the schedule."""
    stepped = ", ".join(str(f) for f in momentum) or "none (no outer step yet)"
    schedule = (f"inner step {local_step} of {sync_every}" if exact else
                f"inner step {local_step} of {sync_every} (a sync was in flight at the save: "
                "its fragment is prepared again)")  # fmt: skip
    return (f"{DILOCO_STATE_PREFIX} restored from {source}: last-sync weights of {fragments} "
            f"fragments, outer momentum of fragments {stepped}, {schedule}, manager step "
            f"{manager_step} (fragment {next_fragment} syncs next)")


def diloco_own_state_line(folder: object, found: bool) -> str:
    """Whether a resumed DiLoCo replica found its own weights and inner optimizer."""
    if found:
        return f"{DILOCO_STATE_PREFIX} this replica's own weights and inner optimizer from {folder}"
    return (f"{DILOCO_STATE_PREFIX} no weights of this replica's in {folder}: it goes on from "
            "the saving replica's, as after a heal")


def diloco_state_missing_line(source: object, why: str = "saved without it") -> str:
    """A checkpoint without a usable DiLoCo state: upstream's resume."""
    return (f"{DILOCO_STATE_PREFIX} none in {source} ({why}): the outer optimizers start "
            "fresh, the loaded weights count as the last sync's, the schedule starts over")


def heal_position_line(replica: object, step: object, target: int | None,
                       kept: int | None) -> str:  # fmt: skip
    """The first quorum healed a restarted replica from a peer whose last step was `step`:
    which data position it takes."""
    if target is not None:
        return (f"{RESUME_PREFIX} replica {replica} healed after step {step} from a peer: data "
                f"position step-{target} (its newest; the peer trained on without it)")
    kept_text = f"step-{kept}" if kept is not None else "from the start"
    return (f"{RESUME_PREFIX} replica {replica} healed after step {step} from a peer: data "
            f"position stays {kept_text}")


def final_checkpoint_line(step: int, saved: str) -> str:
    """The worker's answer to Slurm's time-limit signal, after step `step`: `saved` (this
    replica wrote the model checkpoint), `peer` (another replica writes it; this one its data
    position) or `off` (model checkpoints off)."""
    what = {"saved": f"model checkpoint step-{step} written",
            "peer": f"data position step-{step} written (the model checkpoint is the saving "
                    "replica's)",
            "off": "model checkpoints are off: nothing saved but the data position"}[saved]
    return f"{FINAL_CHECKPOINT_PREFIX} after step {step}: {what}; training ends for a requeue"


def time_limit_line(target: str | None, step: int | None) -> str:
    """The launcher's line for Slurm's time-limit signal: its own kind of event, not a
    failure. `target`: the array task requeued (None: not in a job array, nothing requeued)."""
    at = f" at step {step}" if step is not None else ""
    then = f"requeue {target}" if target else "requeue (not inside a Slurm job array: none)"
    return f"[ftslurm] {TIME_LIMIT}: final checkpoint{at} -> {then}"


def parse_time_limit(line: bytes) -> int | None:
    """The step of a `time_limit_line` (-1 when it names none), else None."""
    if TIME_LIMIT.encode() not in line:
        return None
    m = re.search(rb"final checkpoint at step (\d{1,18})", line)
    return int(m[1]) if m else -1


def data_position_line(replica: object, step: int, sample_idx: int | None) -> str:
    """A replica's data position saved at `step`: how many documents its dataset has read."""
    idx = "unknown" if sample_idx is None else str(sample_idx)
    return f"[ftslurm] data position: replica {replica} step {step} sample_idx {idx}"


def parse_data_position(line: bytes) -> tuple[int, int, int | None] | None:
    """(replica, step, sample_idx or None) of a `data_position_line`, else None."""
    m = _DATA_POSITION.search(line)
    if not m:
        return None
    return (int(m[1]), int(m[2]), None if m[3] == b"unknown" else int(m[3]))


# ---------------------------------------------------------------- one line

def parse_line(line: bytes, t: float | None = None) -> Event | None:
    """Pure: the event one line carries, else None. The one dispatcher: the report's reader
    hands it every line it picked out, `demo` every line it reads.

    `t`: the line's time if the caller knows it (a file reader: the time of the nearest timed
    line, for a line without one); None: read from the line itself.
    """
    if t is None:
        t = parse_time(line)
    if b"quorum_id: " in line:
        return parse_quorum(line, t)
    if b" - step " in line:
        return parse_manager(line, t)
    if b"[Replica " in line:
        return parse_rust_replica(line, t)
    if BANNER in line:
        return parse_launch(line, t)
    if b"loss:" in line:
        return parse_titan_step(line, t)
    if b"Lighthouse listening on" in line:
        return Event(LIGHTHOUSE_START, t)
    if b"Training completed" in line:
        return Event(FINISHED, t)
    return None


# ---------------------------------------------------------------- shapes one reader scans for

# the Lighthouse's first line: `Lighthouse listening on: http://host:29510` (lighthouse/lifecycle
# takes the port it bound from it)
LIGHTHOUSE_LISTENING = re.compile(r"Lighthouse listening on: (\S+)")

# what a run trained on, near a replica log's start: the launcher's `env:` line
# (`FTSLURM_DEVICE=cpu`) or torchtitan's `CUDA capacity:` / `CPU capacity:` (report/sources)
DEVICE_LINE = re.compile(rb"FTSLURM_DEVICE=([A-Za-z]+)|\] - root - INFO - ([A-Z]+) capacity: ")

# The report's bulk scanner (report/reader.py) over whole chunks: every quorum id in a chunk,
# and every manager line with group 1 (the step) only on a well-formed committed step (the other
# manager lines are rare and taken one by one by parse_line); a number longer than MAX_DIGITS
# after ` - step ` is a malformed line, not a step.
QUORUM_IDS = re.compile(rb"Quorum \{ quorum_id: ([^,]{0,23}),")
MANAGER_LINE = re.compile(rb" - step (?:(-?\d{1,18})\] should_commit=True)?")
LONG_NUMBER = re.compile(rb"-?\d{%d}" % (MAX_DIGITS + 1))

# the training worker's parameter checksum after a step (replica/worker/checksum.py writes and
# reads it)
CHECKSUM_PREFIX = "ftslurm-checksum"
CHECKSUM_LINE = re.compile(
    CHECKSUM_PREFIX + r" replica=(?P<replica>\d+) rank=(?P<rank>\d+) step=(?P<step>\d+) "
    r"manager_step=(?P<manager_step>\d+) scope=(?P<scope>\S+) tensors=(?P<tensors>\d+) "
    r"sha256=(?P<sha256>[0-9a-f]{64})"
)

# the learning rate(s) a committed step trained with, logged beside its checksum: every param
# group of every optimizer, in order, each as Python's repr of the float (shortest text that
# round-trips: equal text is equal bits) (replica/worker/checksum.py writes and reads it)
LR_PREFIX = "ftslurm-lr"
_LR = r"-?(?:\d{1,20}(?:\.\d{1,20})?(?:e[-+]\d{1,3})?|inf|nan)"  # what repr(float) writes
LR_LINE = re.compile(
    LR_PREFIX + r" replica=(?P<replica>\d{1,18}) rank=(?P<rank>\d{1,18}) step=(?P<step>\d{1,18}) "
    rf"manager_step=(?P<manager_step>\d{{1,18}}) lr=(?P<lr>{_LR}(?:,{_LR})*)\s*$"
)
