"""One log line -> one event (or None), and a streaming per-file reader.

Every shape recognised here is copied from real logs (shared/notes/torchft-logs.md, the cluster
guide's excerpt, shared/data/torchft-ddp-cpu-run1); nothing is guessed. Three formats interleave
in a replica log and a fourth is the Lighthouse's:

- Rust env_logger (Lighthouse and the Rust half of the Manager):
  `2026-11-23T08:50:55.316 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 1, ...`
- torchtitan's Python logging: `[titan] 2025-07-16 13:49:32,462 - torchft.manager - INFO - ...`
- bare Python logging (torchft's own examples): `INFO:torchft.manager:[train_ddp_0:<uuid>/0 -
  step 22] ...` with NO timestamp: such a line takes the time of the nearest previous line of
  the same file that had one (or stays unknown).
- the launcher's attempt line: `[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on w-0`.

Lines are bytes: the streaming reader (`reader.py`) finds the few lines that matter in big
binary chunks and hands only those to the parsers here, which decode what they keep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

# Event kinds (Event.kind).
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
INJECTED = "injected"  # one line of the simulate-failure event log (see events.py)
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
    Python lines and quorums, `prefix_<i>` from the Rust manager.
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
    job: str = ""  # INJECTED: the Slurm job id


# ---------------------------------------------------------------- replica ids

_RID = re.compile(r"^(.*)_(\d+)(?::(.*))?$")


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
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_day_cache: dict[bytes, int] = {}


def _day_seconds(y: bytes, mo: bytes, d: bytes) -> int:
    key = y + mo + d
    v = _day_cache.get(key)
    if v is None:
        v = (date(int(y), int(mo), int(d)).toordinal() - _EPOCH_ORD) * 86400
        if len(_day_cache) < 4096:
            _day_cache[key] = v
    return v


def parse_time(line: bytes, utc_offset: float = 0.0) -> float | None:
    """Time at the start of a line (Rust, titan or launcher shape), else None.

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


# ---------------------------------------------------------------- one line

_QID = re.compile(rb"quorum_id: (\d+)")
_MEMBER = re.compile(
    rb'replica_id: "([^"]*)".*?[ ,{]step: (\d+)(?:.*?commit_failures: (\d+))?'
)
_MGR = re.compile(rb"\[([^\s\[\]/]+)/(\d+) - step (-?\d+)\] ([^\r\n]*)")
_RUST_REPLICA = re.compile(rb"\[Replica ([^\]\s]+)\] ([^\r\n]*)")
_LAUNCH = re.compile(rb"launching replica (\d+) \(attempt (\d+)\)(?: on (\S+))?")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")
_STEP = re.compile(rb"step:\s*(\d+)\s+loss:\s*([-+0-9.eEnaifNI]+)")
_INTS = re.compile(rb"-?\d+")
_KV_INT = {
    k: re.compile(rb"(?<![a-z_])" + k.encode() + rb"=(-?\d+)")
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
    members = tuple(
        Member(_dec(rid), int(step), int(cf) if cf else 0)
        for rid, step, cf in _MEMBER.findall(body, 0, end)
    )
    return Event(QUORUM, t, quorum_id=int(m.group(1)), members=members)


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
        return Event(HEAL_REQUIRED, t, replica, _kv("max_step", msg), rank_i)
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


def parse_launch(line: bytes, t: float | None) -> Event | None:
    m = _LAUNCH.search(line)
    if not m:
        return None
    idx, attempt, node = m.groups()
    return Event(
        LAUNCH, t, replica=idx.decode(), rank=int(attempt), node=_dec(node) if node else "",
    )


def parse_titan_step(line: bytes, t: float | None) -> Event | None:
    m = _STEP.search(_ANSI.sub(b"", line))
    if not m:
        return None
    return Event(TITAN_STEP, t, step=int(m.group(1)), detail=_dec(m.group(2)))


def parse_line(line: bytes, t: float | None = None) -> Event | None:
    """Pure: the event one line carries, else None. `t`: the line's time if known."""
    if t is None:
        t = parse_time(line)
    if b"quorum_id: " in line:
        return parse_quorum(line, t)
    if b" - step " in line:
        return parse_manager(line, t)
    if b"[Replica " in line:
        return parse_rust_replica(line, t)
    if b"launching replica " in line:
        return parse_launch(line, t)
    if b"loss:" in line:
        return parse_titan_step(line, t)
    if b"Lighthouse listening on" in line:
        return Event(LIGHTHOUSE_START, t)
    if b"Training completed" in line:
        return Event(FINISHED, t)
    return None


# ---------------------------------------------------------------- a file, streaming
