"""`ftslurm report`: what happened during a fault-tolerant run, read from its logs.

Data flow, one pass: the run's files (`sources.py`) -> chunks searched for a few markers
(`reader.py`) -> the lines that hold one -> events (`logvocab.parse_line`, pure; `events.py`
for the failure event log) -> merged by time -> timeline state machine (`timeline.py`) -> the
data model (`model.py`) -> text / JSON / PNG (`render.py`). Nothing holds a whole file in
memory. `timeline` and `render` both depend on `model` and never on each other; this package
joins them in `build_report`.

Python API (also what the tests and the fixtures of later runs use)::

    from ftslurm.report import build_report
    report = build_report(["outputs/torchft/tft-12"])      # a run dir, or files
    print(report.to_text()); data = report.to_json()
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ftslurm.report.model import Report
from ftslurm.report.render import RenderedReport
from ftslurm.report.sources import find_run_files
from ftslurm.report.timeline import build_model

__all__ = ["RenderedReport", "Report", "build_report", "find_run_files"]


def build_report(
    *paths: str | Path | Sequence[str | Path],
    lighthouse: Sequence[str | Path] = (),
    events: Sequence[str | Path] = (),
    group_size: int | None = None,
) -> RenderedReport:
    """`timeline.build_model` (same arguments), with `to_text`/`to_json`/`to_plot`/`summary`."""
    return RenderedReport.of(
        build_model(*paths, lighthouse=lighthouse, events=events, group_size=group_size)
    )
