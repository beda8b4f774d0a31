"""Replica slots and who holds them: the claim files that let a warm spare take a failed
replica's place, and the fencing epochs that keep two processes from training as one replica.

Why slots: with `FT_SPARES=S` an array of N+S tasks trains N replicas. A replica's identity
(torchft's replica id, its data shard, the log the report attributes to it) is its *slot*
0..N-1, not the array task that happens to hold it: when the task holding slot r fails, a warm
spare claims r and joins under that id, and the failed task, requeued, finds r taken and waits
as a spare itself.

Why files: the run folder (`outputs/torchft/tft-<job>/`) is on the filesystem every node
shares, and link(2) onto an existing name fails there (also over NFS), so a claim is one
exclusive create (`safefile.write_exclusive`): `slots/slot-<r>/epoch-<E>.json`. Epochs of a
slot only grow, each claim names the next one (current + 1), so of any number of racers for
the same epoch exactly one wins. The holder of epoch E is *fenced* as soon as `epoch-<E+1>`
exists: it checks that one name before every step (one stat) and stops, so an original that
comes back late (a hung node, a slow requeue) never trains beside its replacement.

What the files may hold: anyone who can write the run folder can plant names and claims,
so every read is bounded. A slot is counted only when a valid claim names it (at most
`MAX_SLOTS`; an empty `slot-999999999/` is nothing), a slot's holder is the end of its chain
of epochs from 0 (claims are only ever made at current + 1, so a planted
`epoch-999999999999999999.json` beyond the chain is ignored, never the next claim's name),
and a claim whose fields are not numbers in range (`"task": Infinity`, `"time": 1e300`, a
slot or epoch that is not its file's) is ignored with one warning: as the holder it is an
unknown task (`UNKNOWN_TASK`), so the chain and the next claim's epoch are still right. The
folders claims are written into are never links (`safefile.real_dir`).

Pure decisions (`startup_slot`, `vacant_slot`) are separated from the file
operations so they are tested alone.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ftslurm import knobs, safefile

SLOTS = "slots"
FINISHED = "finished"  # written when a replica finishes its training: spares then exit
_EPOCH = re.compile(r"epoch-([0-9]{1,18})\.json")
_SLOT = re.compile(r"slot-([0-9]{1,9})")
MAX_SLOTS = knobs.MAX_REPLICAS  # a run's replicas (FTSLURM_GROUP_SIZE's maximum)
MAX_EPOCH = 10**18 - 1  # 18 digits: every epoch's name matches _EPOCH
MAX_TASK = knobs.MAX_REPLICAS * 2  # array tasks: the replicas and as many spares
MAX_PID = 1 << 22  # Linux's pid_max limit
MAX_TIME = 253402300799.0  # `9999-12-31`: time.localtime's range
MAX_TEXT = 4096  # host, why
UNKNOWN_TASK = -1  # the holder of a claim that cannot be read
_warned: set[str] = set()


def _warn(what: str) -> None:
    """One line on stderr per distinct problem and process (a spare polls every 0.25 s)."""
    from ftslurm.textsafe import printable

    if what not in _warned:
        _warned.add(what)
        print(printable(f"warning: {what}"), file=sys.stderr, flush=True)


def _bounded_int(value: object, low: int, high: int) -> int:
    """A JSON integer within [low, high]; ValueError otherwise (floats, bools, strings)."""
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{json.dumps(value)[:40]} is not an integer from {low} to {high}")
    return value


@dataclass(frozen=True)
class Claim:
    """One claim of a slot: `task` holds slot `slot` from `time` on, at fencing epoch `epoch`.
    `previous_task`: who held it before (None for a first claim); `why`: for the logs."""

    slot: int
    epoch: int
    task: int
    host: str
    pid: int
    time: float
    previous_task: int | None = None
    why: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def known(self) -> bool:
        """False for the stand-in of a claim file that could not be read."""
        return self.task != UNKNOWN_TASK

    @classmethod
    def parse(cls, text: str) -> Claim:
        """The claim `text` holds; ValueError saying what is wrong. Numbers must be JSON
        integers in range (no Infinity, NaN or 1e300: they break every reader), the time a
        finite Unix time, host and why short strings."""

        def refuse(word: str) -> None:
            raise ValueError(f"{word} is not a number")

        try:
            d = json.loads(text, parse_constant=refuse)
        except RecursionError:
            raise ValueError("nested too deep") from None
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        try:
            t = d["time"]
            if type(t) not in (int, float) or not (math.isfinite(t) and 0 <= t <= MAX_TIME):
                raise ValueError(f"time {json.dumps(t)[:40]} is not a Unix time")
            host, why, prev = d.get("host", ""), d.get("why", ""), d.get("previous_task")
            if not (isinstance(host, str) and isinstance(why, str)):
                raise ValueError("host and why must be strings")
            return cls(
                slot=_bounded_int(d["slot"], 0, MAX_SLOTS - 1),
                epoch=_bounded_int(d["epoch"], 0, MAX_EPOCH),
                task=_bounded_int(d["task"], 0, MAX_TASK),
                host=host[:MAX_TEXT], pid=_bounded_int(d.get("pid", 0), 0, MAX_PID),
                time=float(t),
                previous_task=None if prev is None else _bounded_int(prev, 0, MAX_TASK),
                why=why[:MAX_TEXT],
            )  # fmt: skip
        except KeyError as e:
            raise ValueError(f"no {e.args[0]!r}") from None

    @classmethod
    def from_json(cls, text: str) -> Claim | None:
        """`parse`, None when the text holds no valid claim."""
        try:
            return cls.parse(text)
        except ValueError:
            return None


def slots_dir(run_dir: Path) -> Path:
    """`<run dir>/slots`: the claims of one run."""
    return Path(run_dir) / SLOTS


def _slot_dir(root: Path, slot: int) -> Path:
    return root / f"slot-{slot}"


def claim_path(root: Path, slot: int, epoch: int) -> Path:
    return _slot_dir(root, slot) / f"epoch-{epoch}.json"


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def epochs(root: Path, slot: int) -> list[int]:
    """The claimed epochs of `slot`, ascending: the chain 0, 1, 2, ... as far as it goes.
    Claims are only made at the current epoch + 1, so a name beyond a gap was planted: it is
    ignored (with a warning) rather than taken for the holder."""
    found = {int(m.group(1)) for n in _names(_slot_dir(root, slot)) if (m := _EPOCH.fullmatch(n))}
    chain = 0
    while chain in found:
        chain += 1
    if len(found) > chain:
        _warn(f"ignoring {len(found) - chain} claim file(s) of {_slot_dir(root, slot)} beyond "
              f"its epochs 0..{chain - 1} (claims are made one epoch after another: planted?)")
    return list(range(chain))


def read_claim(root: Path, slot: int, epoch: int) -> Claim | None:
    """The claim of `epoch`, None when its file cannot be read or holds no valid claim of that
    slot and epoch (said once as a warning)."""
    path = claim_path(root, slot, epoch)
    text = safefile.read_text(path, 64 * 1024)
    try:
        if text is None:
            raise ValueError("not a readable regular file of at most 64 KiB")
        claim = Claim.parse(text)
        if (claim.slot, claim.epoch) != (slot, epoch):
            raise ValueError(f"it names slot {claim.slot} epoch {claim.epoch}")
    except ValueError as e:
        _warn(f"ignoring the slot claim {path}: {e}")
        return None
    return claim


def current(root: Path, slot: int) -> Claim | None:
    """The slot's newest claim (its holder), or None when it was never claimed. A newest
    claim that cannot be read is held by an unknown task (`UNKNOWN_TASK`, time 0)."""
    found = epochs(root, slot)
    if not found:
        return None
    return read_claim(root, slot, found[-1]) or _unknown(slot, found[-1])


def _unknown(slot: int, epoch: int) -> Claim:
    return Claim(slot, epoch, UNKNOWN_TASK, "", 0, 0.0, why="unreadable claim")


def _claimed_slots(root: Path) -> list[int]:
    """The slots with a valid first claim, ascending: an empty or planted `slot-<r>` folder
    counts for nothing, and no more than `MAX_SLOTS` are looked at."""
    found = sorted(int(m.group(1)) for n in _names(root) if (m := _SLOT.fullmatch(n)))
    beyond = [r for r in found if r >= MAX_SLOTS]
    if beyond:
        _warn(f"ignoring {len(beyond)} slot folder(s) of {root} beyond a run's {MAX_SLOTS} "
              "replicas")
    out = []
    for r in found[: len(found) - len(beyond)]:
        if (_slot_dir(root, r) / "epoch-0.json").exists() and read_claim(root, r, 0):
            out.append(r)
    return out


def history(root: Path, group_size: int) -> list[Claim]:
    """Every valid claim of slots 0..group_size-1, oldest first: who held what, and each
    takeover. Only the slots that have claim folders are read (a group size from a file that
    lies costs nothing)."""
    out = []
    for slot in _claimed_slots(root):
        if slot >= group_size:
            break
        for e in epochs(root, slot):
            if (c := read_claim(root, slot, e)) is not None:
                out.append(c)
    return sorted(out, key=lambda c: (c.time, c.slot, c.epoch))


def slot_count(root: Path) -> int:
    """How many slots have claims: the group size as the claims show it (the highest slot
    with a valid first claim, + 1; at most `MAX_SLOTS`)."""
    found = _claimed_slots(root)
    return found[-1] + 1 if found else 0


def task_slots(root: Path) -> dict[int, str] | None:
    """array task -> what it is now: its slot (`"1"`) or `"spare"` for the tasks that hold none
    (only tasks that ever claimed are listed); None when the run has no slot claims."""
    n = slot_count(root)
    if n == 0:
        return None
    out = {c.task: "spare" for c in history(root, n)}
    for slot, c in holders(root, n).items():
        if c is not None and c.known:
            out[c.task] = str(slot)
    return out


def claim_lines(claims: list[Claim]) -> list[str]:
    """One line per claim for a person (`ftslurm status`, `ftslurm logs`): who took which
    slot when, and from whom; terminal-safe (the host comes from a file anyone in the run
    folder could write)."""
    import time

    from ftslurm.textsafe import printable

    out = []
    for c in claims:
        when = time.strftime("%H:%M:%S", time.localtime(c.time))
        taken = c.previous_task not in (None, c.task)
        frm = f", taken from task {c.previous_task}" if taken else ""
        who = f"task {c.task}" if c.known else "an unknown task (unreadable claim)"
        out.append(printable(f"claim: slot {c.slot} epoch {c.epoch} by {who} on {c.host} at "
                             f"{when}{frm}"))  # fmt: skip
    return out


def holders(root: Path, group_size: int) -> dict[int, Claim | None]:
    """slot -> its current claim (None: never claimed) for the slots 0..group_size-1."""
    return {slot: current(root, slot) for slot in range(min(group_size, MAX_SLOTS))}


def try_claim(
    root: Path, slot: int, epoch: int, task: int, host: str, pid: int, now: float,
    previous_task: int | None = None, why: str = "",
) -> Claim | None:  # fmt: skip
    """Claim `epoch` of `slot` (the current epoch + 1, or 0 for a first claim); the claim, or
    None when another process claimed that epoch first."""
    claim = Claim(slot, epoch, task, host, pid, now, previous_task, why)
    safefile.real_dir(_slot_dir(safefile.real_dir(root, private=True), slot))
    won = safefile.write_exclusive(claim_path(root, slot, epoch), claim.to_json())
    return claim if won else None


def fenced_by(root: Path, claim: Claim) -> Claim | None:
    """The claim that replaced `claim` (epoch + 1), or None while `claim` still holds the slot.
    One stat while it holds: cheap enough for every training step."""
    nxt = claim_path(root, claim.slot, claim.epoch + 1)
    if not nxt.exists():
        return None
    return read_claim(root, claim.slot, claim.epoch + 1) or _unknown(claim.slot, claim.epoch + 1)


def mark_finished(root: Path, slot: int) -> None:
    """A replica finished its training: spares have nothing left to replace."""
    safefile.write_atomic(safefile.real_dir(root, private=True) / FINISHED, f"{slot}\n")


def finished(root: Path) -> bool:
    return (root / FINISHED).exists()


# ---------------------------------------------------------------- pure decisions


def startup_slot(
    task: int, group_size: int, claims: Mapping[int, Claim | None]
) -> tuple[int | None, str]:
    """Which slot a starting array task claims (None: it starts as a spare), and why.

    1. the slot this task's previous attempt held, if nobody took it since: a requeued replica
       takes its own place back, as without spares;
    2. its home slot (task < group size) when nobody ever claimed it: the first start;
    3. otherwise it is a spare (a task >= group size, or one whose slot a spare took)."""
    for slot in sorted(claims):
        c = claims[slot]
        if c is not None and c.task == task:
            return slot, f"slot {slot} was this task's (epoch {c.epoch}): taking it back"
    if task < group_size:
        c = claims.get(task)
        if c is None:
            return task, f"slot {task} is this task's home slot and unclaimed"
        who = f"task {c.task}" if c.known else "an unknown task (unreadable claim)"
        return None, f"slot {task} is held by {who} (epoch {c.epoch}): starting as a spare"
    return None, f"task {task} is beyond the group size {group_size}: starting as a spare"


def record_member(root: Path, claim_slot: int, epoch: int, member_id: str) -> None:
    """The holder of `epoch` says which torchft replica id it runs as
    (`torchtitan_ft_<slot>:<uuid>`): a spare then judges that process's heartbeat, not an
    earlier holder's that the Lighthouse still lists."""
    folder = safefile.real_dir(_slot_dir(safefile.real_dir(root, private=True), claim_slot))
    safefile.write_atomic(folder / f"epoch-{epoch}.member", member_id)


def member_of(root: Path, claim_slot: int, epoch: int) -> str | None:
    text = safefile.read_text(_slot_dir(root, claim_slot) / f"epoch-{epoch}.member", 4096)
    return text.strip() if text else None


def vacant_slot(
    now: float,
    claims: Mapping[int, Claim | None],
    members: Mapping[int, str | None],
    live: set[str],
    old: set[str],
    grace_s: float,
) -> int | None:
    """The slot a spare should claim now, or None. `members`: slot -> the torchft replica id
    its current holder runs as (None: not started that far yet); `live` / `old`: the
    heartbeat ids the Lighthouse lists as live / old. A slot is vacant when its holder's
    heartbeat is listed as old and not live (it left the quorum), or when its holder never got
    as far as torchft's Manager within `grace_s` of its claim while the Lighthouse lists
    someone (a restarted Lighthouse lists nobody: every replica would look gone). A
    never-claimed slot is its home task's; an earlier holder's old heartbeat says nothing
    about the current one."""
    for slot in sorted(claims):
        c = claims[slot]
        if c is None:
            continue
        member = members.get(slot)
        if member is not None:
            if member in old and member not in live:
                return slot
        elif now - c.time >= grace_s and (live or old):
            return slot
    return None
