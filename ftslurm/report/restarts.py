"""Restarts of every replica from a model checkpoint, and the steps each lost, from the
launcher's lines (logvocab: `resume_line`, `final_checkpoint_line`, `time_limit_line`).

A replica that resumes from a model checkpoint (its first step is the checkpoint's step + 1)
lost the steps it had trained past that checkpoint: 0 after a final checkpoint at Slurm's time
limit, at most the checkpoint interval after a failure of every replica. A replica that healed
from a live peer instead (its first step is a peer's) lost nothing and is not listed here.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ftslurm import logvocab
from ftslurm.logfile import open_log
from ftslurm.report import reader as R


def restarts(files: Sequence[str | Path], resumes: Mapping[str, int]) -> list[dict[str, Any]]:
    """One row per replica restart from a checkpoint, in log order per file: replica, kind
    (`time limit` or `restart`), last step before, the checkpoint step resumed from, and the
    steps lost (trained past the checkpoint, so trained again). `resumes`: the report's one
    pass counted each log's resume lines (ParseStats.resumes); a row needs an attempt after
    the first, so only a log with two is read again, line by line."""
    out: list[dict[str, Any]] = []
    for path in files:
        name = logvocab.parse_log_name(Path(path).name)
        if name is None or resumes.get(str(path), 0) < 2:
            continue
        try:
            with open_log(Path(path)) as fh:
                out += _scan(R.iter_lines(fh, R.ParseStats()), name.replica)
        except (OSError, EOFError, zlib.error):
            continue
    return out


def _scan(lines: Any, replica: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    last = 0  # the last step this replica trained, over all attempts so far
    final: int | None = None  # a final checkpoint (time limit) after `last`
    pending: dict[str, Any] | None = None  # a resume line waiting for its first step
    for line in lines:
        if (got := logvocab.parse_final_checkpoint(line)) is not None:
            final = got
        elif (res := logvocab.parse_resume(line)) is not None:
            model = max(res[1], 0)
            pending = {"replica": replica, "kind": "time limit" if final is not None
                       else "restart", "last_step": last, "resumed_from": model,
                       "lost_steps": max(0, last - model)}  # fmt: skip
        elif b"loss:" in line and (m := logvocab.STEP.search(logvocab.strip_ansi(line))):
            step = int(m.group(1))
            if pending is not None:
                if step == pending["resumed_from"] + 1 and pending["last_step"] > 0:
                    rows.append(pending)
                pending, final = None, None
            last = step
    return rows


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
