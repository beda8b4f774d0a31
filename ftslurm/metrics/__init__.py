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
The names are loaded when first used: the CLI reads this package's limits and defaults for
its options without importing prometheus_client on every `ftslurm` command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftslurm.metrics.collector import FtslurmCollector, MetricsSources, families, registry
    from ftslurm.metrics.server import MetricsServer, serve
    from ftslurm.metrics.snapshot import STATES, ReplicaSample, Snapshot, build_snapshot

_HOME = {
    "FtslurmCollector": "collector", "MetricsSources": "collector", "families": "collector",
    "registry": "collector", "MetricsServer": "server", "serve": "server",
    "STATES": "snapshot", "ReplicaSample": "snapshot", "Snapshot": "snapshot",
    "build_snapshot": "snapshot",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def exposition(sources: MetricsSources) -> str:
    """One scrape's text (Prometheus text format 0.0.4), as `/metrics` would answer."""
    from prometheus_client import generate_latest

    from ftslurm.metrics.collector import registry

    return generate_latest(registry(sources)).decode()


__all__ = [
    "STATES", "FtslurmCollector", "MetricsServer", "MetricsSources", "ReplicaSample",
    "Snapshot", "build_snapshot", "exposition", "families", "registry", "serve",
]  # fmt: skip
