"""Warm spares, warm next runs and fencing inside the training worker (installed by train.py,
like fixes.py).

Where a spare waits: torchtitan 0.2.2's FTTrainer.__init__ first uses the replica id in
`init_distributed` (only to name flight-recorder ranks), then in `FTManager.__init__` (torchft's
Manager gets `torchtitan_ft_<id>` and starts heartbeating to the Lighthouse), then in
`get_dp_info` (the data shard) before the dataloader and the model are built. So the wait is at
the start of `FTManager.__init__`: torch, torchft, torchtitan and their imports, torchrun, the
config and torch.distributed are all done, and nothing has told the Lighthouse or the data
loader who we are. Local rank 0 watches the Lighthouse, claims a vacant slot (slots.py) and
tells the node's other ranks through FTSLURM_SLOT_FILE; every rank then sets
`fault_tolerance.replica_id` to the slot, and torchtitan goes on as for a replica that was
started with it (a spare joins late: it heals from a peer at its first quorum).

Fencing: every worker of a slot-holding replica checks, before each training step, that no
newer claim of its slot exists; a fenced worker writes FTSLURM_FENCED_FILE for the launcher
and exits before that step (the launcher then waits as a spare).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ftslurm import knobs, safefile
from ftslurm.replica import exits, handoff, patches, slots

POLL_S = 0.25
SECOND_LOOK_S = 1.0  # a slot found vacant is claimed only when found so again this much later
FENCED_EXIT = exits.FENCED


def _say(line: str) -> None:
    print(line, flush=True)


def _now_text() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _heartbeats(lighthouse: str) -> tuple[list[str], list[str]] | None:
    """(live, old) heartbeat ids at the Lighthouse, or None when it does not answer."""
    from ftslurm.lighthouse import status_page

    page = status_page.fetch(lighthouse)
    if page is None:
        return None
    beats = page.heartbeats
    return [h.replica_id for h in beats if not h.old], [h.replica_id for h in beats if h.old]


class Watcher:
    """A spare's view of the slots: which holder's heartbeat the Lighthouse lists as old."""

    def __init__(self, root: Path, group_size: int, grace_s: float,
                 heartbeats: Callable[[], tuple[list[str], list[str]] | None]) -> None:  # fmt: skip
        self.root, self.group_size, self.grace_s = root, group_size, grace_s
        self.heartbeats = heartbeats
        self._seen: tuple[int, int, float] | None = None  # (slot, epoch, when) found vacant

    def poll(self, now: float) -> tuple[int, slots.Claim] | None:
        """A vacant slot and its current claim, or None (also while the Lighthouse is away).
        A slot is vacant when two reads at least SECOND_LOOK_S apart find it so: a Lighthouse
        that was paused lists every heartbeat old until the next ones arrive (within
        torchft's 100 ms heartbeat), and a holder taken over on that would be fenced."""
        beats = self.heartbeats()
        if beats is None:
            return None
        claims = slots.holders(self.root, self.group_size)
        members = {s: slots.member_of(self.root, s, c.epoch) for s, c in claims.items() if c}
        slot = slots.vacant_slot(now, claims, members, set(beats[0]), set(beats[1]),
                                 self.grace_s)  # fmt: skip
        if slot is None:
            self._seen = None
            return None
        held = claims[slot]
        assert held is not None
        seen = self._seen
        if seen is None or seen[:2] != (slot, held.epoch):
            self._seen = (slot, held.epoch, now)
            return None
        if now - seen[2] < SECOND_LOOK_S:
            return None
        self._seen = None
        return slot, held


def wait_for_slot(
    env: Mapping[str, str],
    say: Callable[[str], None] = _say,
    clock: Callable[[], float] = time.time,
    heartbeats: Callable[[], tuple[list[str], list[str]] | None] | None = None,
) -> slots.Claim | None:
    """Local rank 0 of a spare: wait until a slot is vacant and claim it. None when the run
    finished first (nothing left to replace)."""
    s = knobs.load(env)
    root = Path(s.FTSLURM_SLOTS_DIR)
    task, group, lighthouse = s.FTSLURM_TASK, s.FTSLURM_GROUP_SIZE, s.TORCHFT_LIGHTHOUSE
    w = Watcher(root, group, s.FTSLURM_SPARE_GRACE_S,
                heartbeats or (lambda: _heartbeats(lighthouse)))  # fmt: skip
    say(f"[ftslurm] spare (task {task}): warm, watching the Lighthouse {lighthouse} for a "
        f"replica of slots 0..{group - 1} to leave")  # fmt: skip
    while True:
        if slots.finished(root):
            return None
        now = clock()
        found = w.poll(now)
        if found is not None:
            slot, held = found
            claim = slots.try_claim(
                root, slot, held.epoch + 1, task, socket.gethostname(), os.getpid(), clock(),
                previous_task=held.task, why=f"spare: task {held.task}'s heartbeat is gone",
            )
            if claim is not None:
                return claim
            say(f"[ftslurm] spare (task {task}): another process claimed slot {slot} first")
        time.sleep(POLL_S)


def _publish(path: Path, claim: slots.Claim | None) -> None:
    safefile.write_atomic(path, claim.to_json() if claim else json.dumps({"finished": True}))


def _await_published(path: Path) -> slots.Claim | None:
    """Ranks other than local rank 0: the slot rank 0 claimed (None: the run finished)."""
    while True:
        text = safefile.read_text(path)
        if text:
            if json.loads(text).get("finished"):
                return None
            return slots.Claim.from_json(text)
        time.sleep(POLL_S)


def claim_banner(claim: slots.Claim, attempt: int, host: str, restart: int = 0) -> str:
    from ftslurm import logvocab

    return logvocab.slot_banner(_now_text(), claim.slot, attempt, host, claim.task, claim.epoch,
                                claim.previous_task, restart)  # fmt: skip


def ft_config_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The FT config torchtitan builds its FT manager with: positional in 0.2
    (`FTManager(ft_config)`), `config=` in 0.3 (`TorchFTManager(config=replace(cfg))`, a
    copy: the slot a spare takes reaches the manager, whose replica_id the checkpointer and
    the fence read, not the trainer's config, whose replica_id names only 0.3's metrics
    folder)."""
    return args[0] if args else kwargs["config"]


def _become(claim: slots.Claim, job_config_ft: Any, env: dict[str, str]) -> None:
    job_config_ft.replica_id = claim.slot
    env["FTSLURM_REPLICA_ID"] = str(claim.slot)
    env["FTSLURM_SLOT_EPOCH"] = str(claim.epoch)


def _record_member(ft_manager: Any, root: Path, env: Mapping[str, str]) -> None:
    """Group rank 0: note the torchft replica id (with its uuid) this slot's holder runs as."""
    s = knobs.load(env)
    epoch = s.FTSLURM_SLOT_EPOCH
    manager = getattr(ft_manager, "_manager", None)
    if epoch is None or manager is None or getattr(manager, "_group_rank", 0) != 0:
        return
    member = getattr(getattr(manager, "_logger", None), "_replica_id", None)
    if member:
        slots.record_member(root, int(s.FTSLURM_REPLICA_ID), epoch, member)


def wait_for_go(go: Path, poll_s: float = 0.05) -> bool:
    """A warm next run (warm_restart.py), in every rank: wait until the launcher writes `go`
    (True: train) or `stop` (False). The lifeline (train.check_lifeline) ends a rank whose
    launcher dies meanwhile."""
    while True:
        text = safefile.read_text(go)
        if text in (handoff.GO, handoff.STOP):
            return text == handoff.GO
        time.sleep(poll_s)


def _exit_finished() -> NoReturn:
    """End this worker with 0 at once, without torchtitan closing a trainer being built."""
    sys.stdout.flush()
    os._exit(0)


def _install_warm_restart(go: Path) -> str:
    """Stop this worker at the start of FTManager.__init__ (where a spare waits) until its
    launcher needs it; a `stop` ends it without training."""

    def wrap(upstream_init: Callable[..., None]) -> Callable[..., None]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched
            if ft_config_of(args, kwargs).enable and not wait_for_go(go):
                # not SystemExit: torchtitan's main would close a trainer still being built
                # (no checkpointer yet) and print that traceback into the replica's log
                _exit_finished()
            upstream_init(self, *args, **kwargs)

        return __init__

    if not patches.install("warm_restart.init", wrap):
        return f"[ftslurm] warm restart: SKIPPED ({patches.SKIPPED})"
    return ("[ftslurm] warm restart: imports done; waiting before torchft's Manager until "
            "this replica's training fails and the launcher restarts it in place")  # fmt: skip


def install(env: dict[str, str] | None = None) -> str | None:
    """Patch torchtitan when this worker belongs to a run with slots, or is a warm next run
    (warm_restart.py); the line to log."""
    env = os.environ if env is None else env  # type: ignore[assignment]

    def settings() -> knobs.Settings:
        """Read at each use: claiming a slot changes FTSLURM_REPLICA_ID / FTSLURM_SLOT_EPOCH
        in this process's environment (`_become`); parsed again only when it changed."""
        return knobs.environ() if env is os.environ else knobs.load(env)

    first = settings()
    if not first.FTSLURM_SLOTS_DIR:
        go = first.FTSLURM_WARM_GO_FILE
        return _install_warm_restart(Path(go)) if go else None
    names = ("slots.init", "slots.train_step", "slots.start_quorum")
    if patches.installed("slots.init"):
        return None
    if not patches.ready(*names):
        return f"[ftslurm] spares and slot fencing: SKIPPED ({patches.SKIPPED})"
    root = Path(first.FTSLURM_SLOTS_DIR)
    spare = first.FTSLURM_SPARE

    def init(upstream_init: Callable[..., None]) -> Callable[..., None]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - patched
            ft_config = ft_config_of(args, kwargs)
            s = settings()
            if s.FTSLURM_SPARE and ft_config.enable:
                path = Path(s.FTSLURM_SLOT_FILE)
                if int(env.get("LOCAL_RANK", "0")) == 0:
                    claim = wait_for_slot(env)
                    _publish(path, claim)
                    if claim is not None:
                        _say(claim_banner(claim, s.FTSLURM_ATTEMPT, socket.gethostname(),
                                          s.FTSLURM_RESTART))  # fmt: skip
                else:
                    claim = _await_published(path)
                if claim is None:
                    _say("[ftslurm] spare: the run finished; nothing to replace")
                    # not SystemExit: torch's @record on FTTrainer.__init__ swallows it and
                    # torchtitan then trains a trainer never built (exit 1, a crash loop)
                    _exit_finished()
                _become(claim, ft_config, env)
            upstream_init(self, *args, **kwargs)
            _record_member(self, root, env)

        return __init__

    def fence(slot: int, before: str) -> None:
        """Exit (FENCED_EXIT) when a newer claim of this worker's slot exists."""
        s = settings()
        epoch = s.FTSLURM_SLOT_EPOCH
        if epoch is None:
            return
        mine = slots.Claim(slot, epoch, -1, "", 0, 0.0)
        if (newer := slots.fenced_by(root, mine)) is not None:
            _say(f"[ftslurm] fenced: slot {slot} epoch {epoch} was claimed by task "
                 f"{newer.task} (epoch {newer.epoch}); stopping before {before}")  # fmt: skip
            if note := s.FTSLURM_FENCED_FILE:
                safefile.write_atomic(note, newer.to_json())
            os._exit(FENCED_EXIT)

    def train_step(upstream_step: Callable[..., Any]) -> Callable[..., Any]:
        def fenced_step(self: Any, *args: Any, **kwargs: Any) -> Any:
            fence(settings().FTSLURM_REPLICA_ID, f"step {self.step}")  # _become sets it
            return upstream_step(self, *args, **kwargs)

        return fenced_step

    def start_quorum(upstream_quorum: Callable[..., Any]) -> Callable[..., Any]:
        def fenced_quorum(self: Any, *args: Any, **kwargs: Any) -> Any:
            # a worker that stood still (a frozen node) while a spare took its slot resumes in
            # the middle of a step: in DiLoCo the quorum comes before the next step's check
            fence(settings().FTSLURM_REPLICA_ID, "its next quorum")  # a waiting spare: no epoch
            return upstream_quorum(self, *args, **kwargs)

        return fenced_quorum

    for name, make in zip(names, (init, train_step, start_quorum), strict=True):
        patches.install(name, make)
    if spare:
        return ("[ftslurm] spare: imports done; waiting warm before torchft's Manager for a "
                "slot to take (fenced at every step once it trains)")  # fmt: skip
    return (f"[ftslurm] slot {first.raw('FTSLURM_REPLICA_ID') or None} epoch "
            f"{first.raw('FTSLURM_SLOT_EPOCH') or None}: fenced at every step")
