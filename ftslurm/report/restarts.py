"""Restarts of every replica from a model checkpoint, and the steps each lost, from the
launcher's lines (logvocab: `resume_line`, `final_checkpoint_line`, `time_limit_line`), read
in the report's one pass (a `Tracker` per replica log, fed by reader.py).

A replica that resumes from a model checkpoint (its first step is the checkpoint's step + 1)
lost the steps it had trained past that checkpoint: 0 after a final checkpoint at Slurm's time
limit, at most the checkpoint interval after a failure of every replica. A replica that healed
from a live peer instead (its first step is a peer's) lost nothing and is not listed here.
"""

from __future__ import annotations

from typing import Any

from ftslurm import logvocab

_RESUME = logvocab.RESUME_PREFIX.encode()
_FINAL = logvocab.FINAL_CHECKPOINT_PREFIX.encode()
_LOSS = b"loss:"


class Tracker:
    """One replica log's restarts from a checkpoint, fed the log's chunks in order by the
    report's one pass (reader.py): one row per restart, in log order: replica, kind (`time
    limit` or `restart`), last step before, the checkpoint step resumed from, and the steps
    lost (trained past the checkpoint, so trained again).

    How it stays cheap: a chunk without a resume or final-checkpoint line, while no resume
    waits for its first step, only moves the last step trained (the chunk's last step line,
    found from its end); the rare chunks are read line by line."""

    __slots__ = ("replica", "rows", "last", "final", "pending")

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self.rows: list[dict[str, Any]] = []
        self.last = 0  # the last step this replica trained, over all attempts so far
        self.final: int | None = None  # a final checkpoint (time limit) after `last`
        self.pending: dict[str, Any] | None = None  # a resume line waiting for its first step

    def chunk(self, buf: bytes | bytearray, end: int) -> None:
        """`buf[:end]`: whole lines of the log, after those of the chunks before."""
        rare = buf.find(_RESUME, 0, end) >= 0 or buf.find(_FINAL, 0, end) >= 0
        if self.pending is None and not rare:
            step = _last_step(buf, end)
            if step is not None:
                self.last = step
            return
        for line in bytes(memoryview(buf)[:end]).split(b"\n"):
            self.line(line)

    def line(self, line: bytes) -> None:
        if (got := logvocab.parse_final_checkpoint(line)) is not None:
            self.final = got
        elif (res := logvocab.parse_resume(line)) is not None:
            model = max(res[1], 0)
            kind = "time limit" if self.final is not None else "restart"
            self.pending = {"replica": self.replica, "kind": kind, "last_step": self.last,
                            "resumed_from": model, "lost_steps": max(0, self.last - model)}
        elif (step := _step(line)) is not None:
            pending = self.pending
            if pending is not None:
                if step == pending["resumed_from"] + 1 and pending["last_step"] > 0:
                    self.rows.append(pending)
                self.pending, self.final = None, None
            self.last = step


def _step(line: bytes | bytearray) -> int | None:
    """The step of torchtitan's step line, else None."""
    if _LOSS not in line:
        return None
    m = logvocab.STEP.search(logvocab.strip_ansi(bytes(line)))
    return int(m.group(1)) if m else None


def _last_step(buf: bytes | bytearray, end: int) -> int | None:
    """The step of the last step line in `buf[:end]`, else None."""
    p = buf.rfind(_LOSS, 0, end)
    while p >= 0:
        ls = buf.rfind(b"\n", 0, p) + 1
        le = buf.find(b"\n", p, end)
        step = _step(buf[ls : le if le >= 0 else end])
        if step is not None:
            return step
        p = buf.rfind(_LOSS, 0, ls) if ls else -1
    return None


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The report's text for `restarts` rows."""
    if not rows:
        return []
    out = ["", "Restarts from a model checkpoint (every replica stopped: a failure of all, or "
           "Slurm's time limit):"]  # fmt: skip
    for r in rows:
        why = ("time limit -> checkpoint -> requeue" if r["kind"] == "time limit"
               else "restart")  # fmt: skip
        out.append(f"  replica {r['replica']}: {why}, resumed at step {r['resumed_from'] + 1} "
                   f"from checkpoint step-{r['resumed_from']}; last step before "
                   f"{r['last_step']}; steps lost {r['lost_steps']}")  # fmt: skip
    return out
