"""Prometheus metrics of a fault-tolerant run: `ftslurm metrics serve` exposes `/metrics`.

The samples come from the Lighthouse's /status page and the run's logs (the report), read
when Prometheus scrapes (cached a few seconds), by a custom prometheus_client Collector.

Python API::

    from ftslurm import metrics
    src = metrics.MetricsSources(lighthouse_url="http://login-0:29510")
    server = metrics.serve(metrics.registry(src), "127.0.0.1", 9510)   # .url, .close()
    print(metrics.exposition(src))                                      # the text once

Modules, one job each: `snapshot` (the samples from a parsed page and a report dict, pure),
`collector` (the sources, their cache, the metric families), `server` (the HTTP endpoint).
"""

from __future__ import annotations

from prometheus_client import generate_latest

from ftslurm.metrics.collector import FtslurmCollector, MetricsSources, families, registry
from ftslurm.metrics.server import MetricsServer, serve
from ftslurm.metrics.snapshot import STATES, ReplicaSample, Snapshot, build_snapshot


def exposition(sources: MetricsSources) -> str:
    """One scrape's text (Prometheus text format 0.0.4), as `/metrics` would answer."""
    return generate_latest(registry(sources)).decode()


__all__ = [
    "STATES", "FtslurmCollector", "MetricsServer", "MetricsSources", "ReplicaSample",
    "Snapshot", "build_snapshot", "exposition", "families", "registry", "serve",
]  # fmt: skip
