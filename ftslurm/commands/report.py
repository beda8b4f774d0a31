"""`ftslurm report`: a thin click layer over ftslurm.report (all logic lives there)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click


@click.command("report")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--lighthouse", "lighthouse", multiple=True, type=click.Path(path_type=str),
              help="The Lighthouse log (its stderr), if not in the run directory.")
@click.option("--events", "events", multiple=True, type=click.Path(path_type=str),
              help="A simulate-failure event log (JSON lines), if not found by itself.")
@click.option("--group-size", type=click.IntRange(min=1), default=None,
              help="Replicas in the group (default: the largest quorum / replicas seen).")
@click.option("--baseline", "baseline", type=click.Path(path_type=str), default=None,
              help="A failure-free control run (same settings, same machine): goodput is "
                   "measured against its step rate, not the run's own full-strength one.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (docs/report.md).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write a PNG timeline (needs matplotlib).")
def report(
    paths: tuple[str, ...],
    lighthouse: tuple[str, ...],
    events: tuple[str, ...],
    group_size: int | None,
    baseline: str | None,
    as_json: bool,
    plot: str | None,
) -> None:
    """Timeline of quorum changes, failures, requeues and recoveries of one run.

    PATHS is a run directory (outputs/torchft/tft-<job>/ with tft-<job>_<i>.out; a
    *lighthouse* log and *.jsonl event logs in it are read too) or log files. With no PATHS:
    the newest tft-* run under the outputs directory.

    \b
    Examples:
      ftslurm report outputs/torchft/tft-12 --lighthouse outputs/lighthouse/lighthouse.log
      ftslurm report --json > report.json
      ftslurm report outputs/torchft/tft-12 --plot tft-12.png
      ftslurm report outputs/torchft/tft-14 --baseline outputs/torchft/tft-13
    """
    from ftslurm.errors import UserError
    from ftslurm.report import build_report

    if plot:  # checked before anything is read or printed
        folder = Path(plot).parent
        if not plot.lower().endswith(".png"):
            raise UserError(f"--plot {plot}: the timeline is a PNG; name the file *.png")
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise UserError(f"--plot {plot}: {folder} is not a folder this user can write")
    for option, named in (("--lighthouse", lighthouse), ("--events", events)):
        for f in map(Path, named):
            if not f.exists() or f.is_dir():
                what = "a directory; give the log file" if f.is_dir() else "no such file"
                raise UserError(f"{option} {f}: {what}")
    if baseline is not None and not Path(baseline).exists():
        raise UserError(f"--baseline {baseline}: no such file or directory")
    rep = build_report(*paths, lighthouse=lighthouse, events=events, group_size=group_size,
                       baseline=baseline)
    if rep.stats.events == 0:
        read = [Path(f).name for f in rep.stats.files]
        names = ", ".join(read[:3]) or "no readable file"
        if len(read) > 3:  # a folder of unrelated logs: one line, not a page
            names += f" and {len(read) - 3} more"
        if rep.stats.unreadable:
            f, why = rep.stats.unreadable[0]
            more = len(rep.stats.unreadable) - 1
            names += f" ({Path(f).name}: {why}" + (f", and {more} more" if more else "") + ")"
        raise UserError(
            f"nothing to report: no torchft, torchtitan or ftslurm launcher line in {names} "
            "(the logs of an FT run are outputs/torchft/tft-<job>/ and the Lighthouse's log)"
        )
    if plot:  # before the text: a reader of stdout that stops early must not cost the PNG
        try:
            out = rep.to_plot(plot)
        except OSError as e:
            raise UserError(f"--plot {plot}: cannot write it ({e.strerror})") from None
        click.echo(f"wrote {out}", err=True)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=2))
    else:
        click.echo(rep.to_text(), nl=False)
