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

Pure decisions (`startup_slot`, `vacant_slot`) are separated from the file
operations so they are tested alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ftslurm import safefile

SLOTS = "slots"
FINISHED = "finished"  # written when a replica finishes its training: spares then exit
_EPOCH = re.compile(r"^epoch-(\d{1,18})\.json$")


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

    @classmethod
    def from_json(cls, text: str) -> Claim | None:
        try:
            d = json.loads(text)
            return cls(
                slot=int(d["slot"]), epoch=int(d["epoch"]), task=int(d["task"]),
                host=str(d.get("host", "")), pid=int(d.get("pid", 0)), time=float(d["time"]),
                previous_task=None if d.get("previous_task") is None else int(d["previous_task"]),
                why=str(d.get("why", "")),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None


def slots_dir(run_dir: Path) -> Path:
    """`<run dir>/slots`: the claims of one run."""
    return Path(run_dir) / SLOTS


def _slot_dir(root: Path, slot: int) -> Path:
    return root / f"slot-{slot}"


def claim_path(root: Path, slot: int, epoch: int) -> Path:
    return _slot_dir(root, slot) / f"epoch-{epoch}.json"


def epochs(root: Path, slot: int) -> list[int]:
    """The claimed epochs of `slot`, ascending."""
    try:
        names = [p.name for p in _slot_dir(root, slot).iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _EPOCH.match(n)))


def read_claim(root: Path, slot: int, epoch: int) -> Claim | None:
    text = safefile.read_text(claim_path(root, slot, epoch))
    return Claim.from_json(text) if text is not None else None


def current(root: Path, slot: int) -> Claim | None:
    """The slot's newest claim (its holder), or None when it was never claimed."""
    found = epochs(root, slot)
    return read_claim(root, slot, found[-1]) if found else None


def history(root: Path, group_size: int) -> list[Claim]:
    """Every claim of slots 0..group_size-1, oldest first: who held what, and each takeover."""
    out = []
    for slot in range(group_size):
        for e in epochs(root, slot):
            if (c := read_claim(root, slot, e)) is not None:
                out.append(c)
    return sorted(out, key=lambda c: (c.time, c.slot, c.epoch))


def slot_count(root: Path) -> int:
    """How many slots have claims (`slot-<r>` folders): the group size as the claims show it."""
    try:
        found = [int(p.name[5:]) for p in root.iterdir() if re.fullmatch(r"slot-\d{1,9}", p.name)]
    except OSError:
        return 0
    return max(found) + 1 if found else 0


def task_slots(root: Path) -> dict[int, str] | None:
    """array task -> what it is now: its slot (`"1"`) or `"spare"` for the tasks that hold none
    (only tasks that ever claimed are listed); None when the run has no slot claims."""
    n = slot_count(root)
    if n == 0:
        return None
    out = {c.task: "spare" for c in history(root, n)}
    for slot, c in holders(root, n).items():
        if c is not None:
            out[c.task] = str(slot)
    return out


def claim_lines(claims: list[Claim]) -> list[str]:
    """One line per claim for a person (`ftslurm status`, `ftslurm logs`): who took which
    slot when, and from whom."""
    import time

    out = []
    for c in claims:
        when = time.strftime("%H:%M:%S", time.localtime(c.time))
        taken = c.previous_task not in (None, c.task)
        frm = f", taken from task {c.previous_task}" if taken else ""
        out.append(f"claim: slot {c.slot} epoch {c.epoch} by task {c.task} on {c.host} at "
                   f"{when}{frm}")  # fmt: skip
    return out


def holders(root: Path, group_size: int) -> dict[int, Claim | None]:
    """slot -> its current claim (None: never claimed)."""
    return {slot: current(root, slot) for slot in range(group_size)}


def try_claim(
    root: Path, slot: int, epoch: int, task: int, host: str, pid: int, now: float,
    previous_task: int | None = None, why: str = "",
) -> Claim | None:  # fmt: skip
    """Claim `epoch` of `slot` (the current epoch + 1, or 0 for a first claim); the claim, or
    None when another process claimed that epoch first."""
    claim = Claim(slot, epoch, task, host, pid, now, previous_task, why)
    safefile.private_dir(root)
    _slot_dir(root, slot).mkdir(exist_ok=True)
    won = safefile.write_exclusive(claim_path(root, slot, epoch), claim.to_json())
    return claim if won else None


def fenced_by(root: Path, claim: Claim) -> Claim | None:
    """The claim that replaced `claim` (epoch + 1), or None while `claim` still holds the slot.
    One stat while it holds: cheap enough for every training step."""
    nxt = claim_path(root, claim.slot, claim.epoch + 1)
    if not nxt.exists():
        return None
    return read_claim(root, claim.slot, claim.epoch + 1) or Claim(
        claim.slot, claim.epoch + 1, -1, "", 0, 0.0, why="unreadable claim"
    )


def mark_finished(root: Path, slot: int) -> None:
    """A replica finished its training: spares have nothing left to replace."""
    safefile.private_dir(root)
    safefile.write_atomic(root / FINISHED, f"{slot}\n")


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
        return None, f"slot {task} is held by task {c.task} (epoch {c.epoch}): starting as a spare"
    return None, f"task {task} is beyond the group size {group_size}: starting as a spare"


def record_member(root: Path, claim_slot: int, epoch: int, member_id: str) -> None:
    """The holder of `epoch` says which torchft replica id it runs as
    (`torchtitan_ft_<slot>:<uuid>`): a spare then judges that process's heartbeat, not an
    earlier holder's that the Lighthouse still lists."""
    safefile.write_atomic(_slot_dir(root, claim_slot) / f"epoch-{epoch}.member", member_id)


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
