"""`ftslurm report`: what happened during a fault-tolerant run, read from its logs.

Data flow, one pass: the run's files (`sources.py`) -> chunks searched for a few markers
(`reader.py`) -> the lines that hold one -> events (`logvocab.parse_line`, pure; `events.py`
for the failure event log) -> merged by time -> timeline state machine (`timeline.py`) ->
text / JSON / PNG (`render.py`). Nothing holds a whole file in memory.

Python API (also what the tests and the fixtures of later runs use)::

    from ftslurm.report import build_report
    report = build_report(["outputs/torchft/tft-12"])      # a run dir, or files
    print(report.to_text()); data = report.to_json()
"""

from __future__ import annotations

from ftslurm.report.sources import find_run_files
from ftslurm.report.timeline import Report, build_report

__all__ = ["Report", "build_report", "find_run_files"]
