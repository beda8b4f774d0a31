"""`ftslurm report`: a thin click layer over ftslurm.report (all logic lives there)."""

from __future__ import annotations

import json

import click


@click.command("report")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--lighthouse", "lighthouse", multiple=True, type=click.Path(path_type=str),
              help="The Lighthouse log (its stderr), if not in the run directory.")
@click.option("--events", "events", multiple=True, type=click.Path(path_type=str),
              help="A simulate-failure event log (JSON lines), if not found by itself.")
@click.option("--group-size", type=click.IntRange(min=1), default=None,
              help="Replicas in the group (default: the largest quorum / replicas seen).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (docs/report.md).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write a PNG timeline (needs matplotlib).")
def report(
    paths: tuple[str, ...],
    lighthouse: tuple[str, ...],
    events: tuple[str, ...],
    group_size: int | None,
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
    """
    from ftslurm.report import build_report

    rep = build_report(*paths, lighthouse=lighthouse, events=events, group_size=group_size)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=2))
    else:
        click.echo(rep.to_text(), nl=False)
    if plot:
        out = rep.to_plot(plot)
        click.echo(f"wrote {out}", err=True)
