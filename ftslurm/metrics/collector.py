"""A prometheus_client Collector that reads the Lighthouse and the run's logs when scraped.

Why a custom Collector and not global gauges: every sample is derived from two sources that
change on their own (the Lighthouse's /status page, the replica logs), so they are read when
Prometheus asks, never pushed into mutable state that could go stale or half-updated. Each
source is cached for a short time (`MetricsSources.status_ttl_s`, `report_ttl_s`): a
dashboard plus an alerting Prometheus scraping every few seconds costs one /status fetch and
one report build per interval, whatever the replica count. A source that cannot be read
shows as `ftslurm_lighthouse_up 0` / `ftslurm_logs_up 0` and its samples are left out.

Why the logs are read in a worker thread, and only when a file changed: a run folder of
10,000 logs takes seconds to read, past Prometheus's scrape timeout. After the TTL the files
the report would read are listed and stat'ed (path, inode, size, mtime); the same list reuses
the last report; after a change a worker reads what the logs appended (report/live.py: each
byte of a log is parsed once, not once per build) while the scrape waits at most
`MetricsSources.report_wait_s` and then answers with the last complete report (none yet:
`ftslurm_logs_up 0`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from ftslurm import lighthouse as lh
from ftslurm.errors import UserError
from ftslurm.lighthouse.status_page import page_deadline, read_page
from ftslurm.metrics.snapshot import STATES, Snapshot, build_snapshot, state_counts
from ftslurm.run.quorum import QuorumPage

_log = logging.getLogger(__name__)

DEFAULT_STATUS_TTL_S = 2.0
DEFAULT_REPORT_TTL_S = 10.0


@dataclass
class MetricsSources:
    """Where the samples come from.

    `lighthouse_url`: the Lighthouse's address (`http://login-0:29510`, what
    TORCHFT_LIGHTHOUSE says; its /status page is read); None = the managed Lighthouse of
    `lighthouse_dir` (`ftslurm lighthouse start`; None = its default state dir). `run`: what
    `ftslurm report` takes (a run dir or log files; empty = the newest tft-* run, looked up
    again on each report build so a new job is followed).
    """

    lighthouse_url: str | None = None
    lighthouse_dir: str | Path | None = None
    run: Sequence[str | Path] = ()
    lighthouse_logs: Sequence[str | Path] = ()
    events: Sequence[str | Path] = ()
    group_size: int | None = None
    status_ttl_s: float = DEFAULT_STATUS_TTL_S
    report_ttl_s: float = DEFAULT_REPORT_TTL_S
    http_timeout_s: float = 2.0
    # how long a scrape waits for a reading of the logs under way; None: until it is done
    report_wait_s: float | None = None
    _live: Any = field(default=None, init=False, repr=False, compare=False)  # a LiveReport

    def status_url(self) -> str | None:
        """The /status URL to fetch, or None: the managed Lighthouse, looked up each time."""
        if not self.lighthouse_url:
            return None
        url = self.lighthouse_url.rstrip("/")
        return url if url.endswith("/status") else url + "/status"

    def read_page(self) -> QuorumPage | None:
        """The parsed /status page, one read of it; None when no Lighthouse page came (no
        answer, or not 200). `http_timeout_s` bounds the connection; the page has its own
        time to come (`status_page.page_deadline`: seconds at 1,024 replicas), and a page
        cut short whose start is the Lighthouse's still says it is up."""
        url = self.status_url()
        if url is None:
            st = lh.status(self.lighthouse_dir, http_timeout=self.http_timeout_s)
            return st.quorum if st.http_ok else None
        return read_page(url, page_deadline(self.http_timeout_s), get=lh.http_get).page

    def report_key(self) -> tuple[tuple[str, int, int, int], ...] | None:
        """(path, inode, size, mtime_ns) of every file the report would read: while it is
        the same, so is the report. None when the files cannot be listed (build to know)."""
        from ftslurm.report import find_run_files

        try:
            files = find_run_files(self.run, lighthouse=self.lighthouse_logs, events=self.events)
        except (UserError, OSError):
            return None
        key = []
        for p in (*files.replica_logs, *files.lighthouse_logs, *files.event_logs):
            try:
                st = os.stat(p)
            except OSError:
                key.append((str(p), -1, -1, -1))
                continue
            key.append((str(p), st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(key)

    def read_report(self) -> dict[str, Any] | None:
        """The report's JSON dict (`ftslurm report --json`); None when there are no logs.
        Built by a live report: each build reads only what the logs appended since the last."""
        from ftslurm.report.live import LiveReport

        if self._live is None:
            self._live = LiveReport(list(self.run), self.lighthouse_logs, self.events,
                                    self.group_size)  # fmt: skip
        try:
            rep = self._live.build()
        except (UserError, OSError):
            return None
        if rep.stats.events == 0:
            return None
        return rep.to_json()


@dataclass
class _Cached:
    """One source's last value and when it was read (monotonic clock)."""

    value: Any = None
    at: float | None = None
    seconds: float = 0.0  # how long the read took

    def fresh(self, ttl: float, now: float) -> bool:
        return self.at is not None and now - self.at < ttl


def run_name(report: dict[str, Any] | None) -> str | None:
    """The run's folder name (`tft-12`) from the files the report read."""
    files = (report or {}).get("files") or []
    return Path(files[0]).parent.name if files else None


@dataclass(eq=False)  # hashable by identity: the registry keys its collectors
class FtslurmCollector(Collector):
    """Computes every `ftslurm_*` sample on scrape from `sources`, each source cached."""

    sources: MetricsSources
    clock: Callable[[], float] = time.monotonic
    _page: _Cached = field(default_factory=_Cached, init=False)
    _report: _Cached = field(default_factory=_Cached, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _report_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _worker: threading.Thread | None = field(default=None, init=False)
    _report_key: Any = field(default=None, init=False)

    def _read(self, cache: _Cached, ttl: float, read: Callable[[], Any]) -> Any:
        now = self.clock()
        if not cache.fresh(ttl, now):
            t0 = time.perf_counter()
            try:
                cache.value = read()
            except Exception as e:  # noqa: BLE001 - one bad read must not take /metrics down
                # the source shows as down (`ftslurm_*_up 0`); the exporter's log says why
                _log.warning("reading %s failed: %s: %s", getattr(read, "__name__", read),
                             type(e).__name__, e)  # fmt: skip
                cache.value = None
            cache.seconds = time.perf_counter() - t0
            cache.at = self.clock()
        return cache.value

    def snapshot(self) -> Snapshot:
        """Both sources (cached), joined; concurrent scrapes share one read."""
        src = self.sources
        t0 = time.monotonic()
        worker = self._report_worker()  # the logs are read while the page is fetched
        with self._lock:
            page = self._read(self._page, src.status_ttl_s, src.read_page)
        if worker is not None:
            wait = src.report_wait_s
            worker.join(None if wait is None else max(0.0, wait - (time.monotonic() - t0)))
        with self._report_lock:
            report = self._report.value
        return build_snapshot(page, report, src.group_size, run=run_name(report))

    def _report_worker(self) -> threading.Thread | None:
        """The worker checking the logs (and reading them again if a file changed), started
        when the report is older than `report_ttl_s`; None when the report is fresh."""
        with self._report_lock:
            if self._worker is None and not self._report.fresh(
                self.sources.report_ttl_s, self.clock()
            ):
                self._worker = threading.Thread(target=self._refresh_report,
                                                name="metrics-report", daemon=True)
                self._worker.start()
            return self._worker

    def _refresh_report(self) -> None:
        src, cache = self.sources, self._report
        t0 = time.perf_counter()
        try:
            key = src.report_key()
            if key is not None and key == self._report_key and cache.at is not None:
                value, seconds = cache.value, cache.seconds  # no file changed: the same report
            else:
                value, seconds = src.read_report(), time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - one bad read must not take /metrics down
            _log.warning("reading %s failed: %s: %s", "read_report", type(e).__name__, e)
            key, value, seconds = None, None, time.perf_counter() - t0
        with self._report_lock:
            cache.value, cache.seconds, cache.at = value, seconds, self.clock()
            self._report_key = key
            self._worker = None

    def describe(self) -> list[Metric]:
        return []  # registering reads nothing: the sources are read on scrape only

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        yield from families(snap, report_build_s=self._report.seconds,
                            page_read_s=self._page.seconds if snap.lighthouse_up else None)


def _gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=value)


def families(snap: Snapshot, report_build_s: float | None = None,
             page_read_s: float | None = None) -> Iterator[Metric]:  # fmt: skip
    """The metric families of one snapshot (names: docs/metrics.md): first whether each
    source answered and the replicas per state (what a person reads at 1,024 replicas),
    then the quorum, then one series per replica."""
    yield GaugeMetricFamily(
        "ftslurm_lighthouse_up", "1 if the Lighthouse's /status page answered this scrape.",
        value=int(snap.lighthouse_up),
    )  # fmt: skip
    yield GaugeMetricFamily(
        "ftslurm_logs_up", "1 if the run's logs were found and parsed (ftslurm report).",
        value=int(snap.logs_up),
    )  # fmt: skip
    if snap.run:
        yield InfoMetricFamily("ftslurm_run", "The run whose logs are read.",
                               value={"run": snap.run})  # fmt: skip
    if snap.lighthouse_up:
        counts = GaugeMetricFamily("ftslurm_replicas", "Replicas (slots) in each state, as "
                                   "ftslurm_replica_state counts them.", labels=["state"])
        for state, n in state_counts(snap).items():
            counts.add_metric([state], n)
        yield counts
    yield from _gauge("ftslurm_lighthouse_read_seconds", "How long the read of the "
                      "Lighthouse's /status page took.", page_read_s)  # fmt: skip
    yield from _gauge("ftslurm_lighthouse_page_age_seconds", "How old the /status page read "
                      "was: its launcher's copy (at most 30 s), 0 when read from the "
                      "Lighthouse.", snap.page_age_s)  # fmt: skip
    yield from _gauge("ftslurm_quorum_id", "Id of the Lighthouse's current quorum "
                      "(restarts from 0 when the Lighthouse restarts).", snap.quorum_id)
    yield from _gauge("ftslurm_quorum_size", "Replicas in the current quorum.", snap.quorum_size)
    yield from _gauge("ftslurm_quorum_age_seconds", "Time since the current quorum was "
                      "issued.", snap.quorum_age_s)  # fmt: skip
    yield from _gauge("ftslurm_group_size", "Replicas the run should have (--group-size, else "
                      "the largest quorum or replica count seen).", snap.group_size)
    if report_build_s is not None and snap.logs_up:
        yield from _gauge("ftslurm_report_build_seconds", "How long the last read of the run's "
                          "logs took.", report_build_s)  # fmt: skip

    lab = ["replica"]
    age = GaugeMetricFamily("ftslurm_replica_heartbeat_age_seconds",
                            "Time since the Lighthouse last heard from the replica.", labels=lab)
    step = GaugeMetricFamily("ftslurm_replica_step", "The replica's torchft step, as of its "
                             "last quorum request.", labels=lab)  # fmt: skip
    state = GaugeMetricFamily("ftslurm_replica_state", "1 for the replica's state: training, "
                              "healing (recovering from a peer), joining (heartbeating, not in "
                              "the quorum) or absent (no live heartbeat).",
                              labels=["replica", "state"])  # fmt: skip
    failures = CounterMetricFamily("ftslurm_replica_failures", "Failures of the replica found "
                                   "in the run's logs.", labels=lab)  # fmt: skip
    recoveries = CounterMetricFamily("ftslurm_replica_recoveries", "Times the replica healed "
                                     "from a peer.", labels=lab)  # fmt: skip
    commits = CounterMetricFamily("ftslurm_replica_commit_failures", "Steps the replica failed "
                                  "to commit.", labels=lab)  # fmt: skip
    committed = CounterMetricFamily("ftslurm_replica_steps_committed", "Steps the replica "
                                    "committed (rate: steps/s).", labels=lab)  # fmt: skip
    to_full = GaugeMetricFamily("ftslurm_replica_last_time_to_full_strength_seconds",
                                "From the replica's last failure to the group's next full "
                                "quorum.", labels=lab)  # fmt: skip
    for r in snap.replicas:
        key = [r.replica]
        if r.heartbeat_age_s is not None:
            age.add_metric(key, r.heartbeat_age_s)
        if r.step is not None:
            step.add_metric(key, r.step)
        if r.state is not None:
            for s in STATES:
                state.add_metric([r.replica, s], int(s == r.state))
        for fam, value in ((failures, r.failures), (recoveries, r.recoveries),
                           (commits, r.commit_failures), (committed, r.steps_committed),
                           (to_full, r.last_time_to_full_strength_s)):  # fmt: skip
            if value is not None:
                fam.add_metric(key, value)
    for fam in (age, step, state, failures, recoveries, commits, committed, to_full):
        if fam.samples:
            yield fam
    yield from _node_families(snap)


def _node_families(snap: Snapshot) -> Iterator[Metric]:
    """The nodes the run's launchers took out (the run folder's failures/nodes.jsonl)."""
    lab = ["node", "how"]
    out = GaugeMetricFamily("ftslurm_node_taken_out", "1 for each node the run's launchers "
                            "took out: how is drain (scontrol DRAIN), avoid (in the requeued "
                            "task's ExcNodeList) or kept (found bad, but the last node the "
                            "array could run on: left in service). A node brought back by "
                            "hand still shows: ftslurm doctor says which are drained now.",
                            labels=lab)  # fmt: skip
    when = GaugeMetricFamily("ftslurm_node_taken_out_timestamp_seconds", "When the launchers "
                             "last took the node out that way (Unix time).",
                             labels=lab)  # fmt: skip
    for n in snap.nodes_taken_out:
        out.add_metric([n.node, n.how], 1)
        if n.time is not None:
            when.add_metric([n.node, n.how], n.time)
    for fam in (out, when):
        if fam.samples:
            yield fam


def registry(sources: MetricsSources) -> CollectorRegistry:
    """A registry holding only the ftslurm collector (no process/platform metrics: the
    exporter's own CPU is not what a training dashboard shows)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FtslurmCollector(sources))
    return reg
