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

from ftslurm.report.model import Baseline, Report
from ftslurm.report.render import RenderedReport
from ftslurm.report.sources import find_run_files
from ftslurm.report.timeline import build_model

__all__ = ["RenderedReport", "Report", "build_report", "control_baseline", "find_run_files"]


def build_report(
    *paths: str | Path | Sequence[str | Path],
    lighthouse: Sequence[str | Path] = (),
    events: Sequence[str | Path] = (),
    group_size: int | None = None,
    baseline: str | Path | None = None,
) -> RenderedReport:
    """`timeline.build_model` (same arguments), with `to_text`/`to_json`/`to_plot`/`summary`.

    `baseline`: a failure-free control run (a run directory or log file) of the same settings
    on the same machine; goodput is then measured against its full-strength rate instead of
    the run's own (`control_baseline`)."""
    base = control_baseline(baseline) if baseline is not None else None
    return rendered(build_model(*paths, lighthouse=lighthouse, events=events,
                                group_size=group_size, baseline=base))  # fmt: skip


def rendered(model: Report) -> RenderedReport:
    """The model with its renderings, the nodes its launchers took out and its restarts from
    a checkpoint (read beside the logs): what `build_report` and a live report give."""
    rep = RenderedReport.of(model)
    rep.bad_nodes = bad_nodes(rep.stats.files)
    rep.restarts = [r for f in rep.stats.files for r in rep.stats.restarts.get(f, ())]
    return rep


def bad_nodes(files: Sequence[str | Path]) -> list[dict]:
    """The nodes the launchers of the runs these files belong to drained, avoided or kept
    (`<run dir>/failures/nodes.jsonl`, replica/launcher/preflight.py), oldest first, each with the
    command that brings it back."""
    from dataclasses import asdict

    from ftslurm.replica.launcher import preflight

    out = []
    for folder in sorted({Path(f).parent for f in files}):
        out += [{**asdict(a), "undo": a.undo()} for a in preflight.read_actions(folder)]
    return sorted(out, key=lambda b: b["time"])


def control_baseline(run: str | Path) -> Baseline:
    """The failure-free rate of a control run, measured as a run's own is (goodput.py); a
    UserError when it had a failure or no full-strength stretch to measure."""
    from ftslurm.errors import UserError

    ctrl = build_model(run)
    g = ctrl.goodput
    if ctrl.failures:
        raise UserError(f"--baseline {run}: not a failure-free run ({len(ctrl.failures)} "
                        "failure(s) in its logs); give a run of the same settings without "
                        "failures")
    if g is None or g.baseline is None or g.baseline.rate is None:
        raise UserError(f"--baseline {run}: no full-strength stretch in its logs to measure a "
                        "step rate on")
    b = g.baseline
    return Baseline("control", b.rate, b.seconds, b.stretches, str(run), ctrl.group_size)
