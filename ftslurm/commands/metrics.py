"""`ftslurm metrics serve|show`: Prometheus metrics of a run (a thin layer over ftslurm.metrics)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

import click

from ftslurm.commands.params import FiniteFloat, knob_option
from ftslurm.errors import UserError
from ftslurm.metrics.server import DEFAULT_HOST
from ftslurm.metrics.snapshot import MAX_GROUP_SIZE
from ftslurm.textsafe import printable

SCRAPE_WAIT_S = 1.0  # a scrape waits this long for a reading of the logs, then gives the last


def _source_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.argument("run", nargs=-1, type=click.Path(path_type=str)),
        click.option(
            "--lighthouse-url", metavar="URL", default=None,
            help="The Lighthouse to read (http://login-0:29510, what TORCHFT_LIGHTHOUSE "
            "says; its /status page is fetched)  [default: the managed Lighthouse of "
            "--state-dir]",
        ),
        knob_option(
            "--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
            knob="FTSLURM_LIGHTHOUSE_DIR",
            help="State dir of the managed Lighthouse (`ftslurm lighthouse start`)  "
            "[default: outputs/lighthouse; env FTSLURM_LIGHTHOUSE_DIR]",
        ),
        click.option("--lighthouse-log", multiple=True, type=click.Path(path_type=str),
                     help="The Lighthouse log, if not in the run directory (as `ftslurm "
                     "report --lighthouse`)."),
        click.option("--events", multiple=True, type=click.Path(path_type=str),
                     help="A simulate-failure event log, if not found by itself."),
        click.option("--group-size", type=click.IntRange(min=1, max=MAX_GROUP_SIZE),
                     default=None,
                     help="Replicas the run should have  [default: the largest quorum / "
                     "replica count in the logs]"),
        click.option("--status-ttl", type=FiniteFloat(min=0, max=3600), default=2.0,
                     show_default=True,
                     help="Seconds a read of the Lighthouse's /status page is reused."),
        click.option("--report-ttl", type=FiniteFloat(min=0, max=3600), default=10.0,
                     show_default=True,
                     help="Seconds a read of the run's logs (the report) is reused; then "
                     "the logs are read again if one changed (inode, size, mtime)."),
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


def _sources(run: tuple[str, ...], lighthouse_url: str | None, state_dir: Path | None,
             lighthouse_log: tuple[str, ...], events: tuple[str, ...],
             group_size: int | None, status_ttl: float, report_ttl: float) -> Any:
    """Checked options -> MetricsSources; mistakes the user can fix are one-line errors."""
    from ftslurm.metrics import MetricsSources

    if lighthouse_url is not None and not lighthouse_url.startswith(("http://", "https://")):
        raise UserError(f"--lighthouse-url {lighthouse_url!r}: give http://HOST:PORT, as "
                        "TORCHFT_LIGHTHOUSE or `ftslurm lighthouse start` prints it")
    for option, named in (("RUN", run), ("--lighthouse-log", lighthouse_log),
                          ("--events", events)):  # fmt: skip
        for p in map(Path, named):
            if not p.exists():
                raise UserError(f"{option} {p}: no such file or directory")
    return MetricsSources(
        lighthouse_url=lighthouse_url, lighthouse_dir=state_dir, run=run,
        lighthouse_logs=lighthouse_log, events=events, group_size=group_size,
        status_ttl_s=status_ttl, report_ttl_s=report_ttl,
    )  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def metrics() -> None:
    """Prometheus metrics of a fault-tolerant run: quorum, replicas, failures, recoveries.

    \b
    Example:
      ftslurm metrics serve --port 9510                  # http://127.0.0.1:9510/metrics
      ftslurm metrics serve outputs/torchft/tft-12 --lighthouse-url "$TORCHFT_LIGHTHOUSE"
      ftslurm metrics show | promtool check metrics      # one scrape, printed

    Samples come from the Lighthouse's /status page and the run's logs (what `ftslurm
    report` reads), computed when Prometheus scrapes. Dashboard and alert rules:
    docs/grafana/ftslurm-dashboard.json, docs/prometheus/ftslurm-alerts.yml.
    """


@metrics.command()
@_source_options
@click.option("--host", default=DEFAULT_HOST, show_default=True, metavar="HOST",
              help="Address to listen on. The endpoint has no authentication: keep the "
              "loopback default unless the port is firewalled (--host 0.0.0.0 or the login "
              "node's name: every interface / that one).")
@click.option("--port", type=click.IntRange(0, 65535), default=9510, show_default=True,
              help="Port to listen on; 0 = any free port (the real one is printed).")
def serve(host: str, port: int, **options: Any) -> None:
    """Serve /metrics in the Prometheus text format until stopped (Ctrl-C or SIGTERM).

    RUN is a run directory (outputs/torchft/tft-<job>) or log files, as for `ftslurm
    report`; with none, the newest tft-* run, looked up again as new jobs start. Prints the
    URL to scrape on stdout; the rest goes to stderr. Answers /metrics and /healthz only
    (any other path: 404). A scrape answers within about a second: when the run's logs take
    longer to read, it gives the last complete reading while the next one is made.

    \b
    Examples:
      ftslurm lighthouse start --advertise login-0 && ftslurm metrics serve
      ftslurm metrics serve outputs/torchft/tft-12 --lighthouse-url http://login-0:29510 \\
          --group-size 8 --port 9510

    \b
    Where it listens: 127.0.0.1 (this machine only), as there is no authentication.
      Prometheus on the login node: targets: ["127.0.0.1:9510"]
      From elsewhere, without opening a port: an SSH tunnel,
          ssh -N -L 9510:127.0.0.1:9510 login-0   (then scrape localhost:9510)
      Open to the cluster network, only behind its firewall:
          ftslurm metrics serve --host 0.0.0.0    (targets: ["login-0:9510"])
    """
    from ftslurm import metrics as m
    from ftslurm.lighthouse.address import unbracket

    src = _sources(**options)
    src.report_wait_s = SCRAPE_WAIT_S
    server = m.serve(m.registry(src), unbracket(host), port)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        click.echo(server.url)
        click.echo(f"serving Prometheus metrics on {server.url} (Ctrl-C stops)", err=True)
        if server.exposed:
            click.echo(printable(f"note: listening on {host}, not only this machine; /metrics "
                                 "has no authentication: keep the port behind the cluster's "
                                 "firewall"), err=True)  # fmt: skip
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()
    click.echo("stopped", err=True)


@metrics.command()
@_source_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the samples as JSON instead of the Prometheus text format.")
def show(as_json: bool, **options: Any) -> None:
    """Print one scrape of the metrics (what `serve` answers on /metrics) and exit.

    \b
    Examples:
      ftslurm metrics show outputs/torchft/tft-12 | promtool check metrics
      ftslurm metrics show --lighthouse-url http://login-0:29510 --json
    """
    from ftslurm import metrics as m

    src = _sources(**options)
    if as_json:
        snap = m.FtslurmCollector(src).snapshot()
        click.echo(json.dumps(asdict(snap), indent=2))
    else:
        click.echo(m.exposition(src), nl=False)
