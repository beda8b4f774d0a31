"""A report kept up to date by reading only what the logs appended (`ftslurm metrics`).

Why: `ftslurm metrics serve` answers every scrape from the run's report, and a live run's logs
grow at every step; building the report again from the first byte of every log made a scrape
cost the whole run so far (1,024 replicas' logs of a day's run are gigabytes). Here each log
keeps its scan's state between builds (`reader.GrowingLog`) and is read from where the last
build stopped; the events kept are merged and folded by the same timeline as `build_report`,
so a build gives the report one read of the same whole lines would give (a test compares them
as the files grow).

What is read again at each build: the run's folder listing, the clock offset (the first
`Quorum!` line), the event logs (small, and filtered by job), and the nodes the run's launchers
took out (`failures/nodes.jsonl`). A log that was replaced, truncated or is no longer listed
(the newest run followed is another one), a clock offset that moved, or a Lighthouse log that
appeared starts every log again from its start.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ftslurm.logvocab import Event
from ftslurm.report import rendered
from ftslurm.report.model import LeftOut
from ftslurm.report.reader import GrowingLog, ParseStats
from ftslurm.report.render import RenderedReport
from ftslurm.report.sources import clock_offset, find_run_files, iter_run_events
from ftslurm.report.timeline import model_of


@dataclass
class LiveReport:
    """`build_report(*paths, lighthouse=..., events=..., group_size=...)`, built again by
    `build()` from what the logs appended since the last build."""

    paths: Sequence[str | Path] = ()
    lighthouse: Sequence[str | Path] = ()
    events: Sequence[str | Path] = ()
    group_size: int | None = None
    reads: int = 0  # builds that read from the start of every log (the first, and each restart)
    _logs: dict[Path, GrowingLog] = field(default_factory=dict, repr=False)
    _stats: ParseStats = field(default_factory=ParseStats, repr=False)
    _basis: tuple[float, bool] | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        """Bytes of the logs parsed since the last start from the start: each once."""
        return self._stats.bytes

    def build(self) -> RenderedReport:
        """The report now (a UserError when the run has no logs, as `build_report`)."""
        files = find_run_files(list(self.paths), lighthouse=self.lighthouse, events=self.events)
        offset = clock_offset(files.lighthouse_logs + files.replica_logs)
        have_lighthouse = any(p.exists() for p in files.lighthouse_logs)
        listed = {*files.lighthouse_logs, *files.replica_logs}
        if ((offset, have_lighthouse) != self._basis or not listed.issuperset(self._logs)
                or not self._read(files, offset, have_lighthouse)):  # fmt: skip
            # another run (the newest one followed), a log gone, rotated or truncated
            self._restart((offset, have_lighthouse))
            self._read(files, offset, have_lighthouse)
        stats = _for_one_build(self._stats)

        def events_of(left_out: list[LeftOut]) -> Iterator[Event]:
            return iter_run_events(files, stats, offset, left_out, self._replay)

        return rendered(model_of(files, stats, events_of, self.group_size))

    def _restart(self, basis: tuple[float, bool]) -> None:
        self._logs, self._stats, self._basis = {}, ParseStats(), basis
        self.reads += 1

    def _read(self, files, offset: float, have_lighthouse: bool) -> bool:
        """Read what each log appended; False when one must be read from its start again."""
        for p in files.lighthouse_logs:
            if not self._log(p, offset, lighthouse=True, quorums=True).read():
                return False
        for p in files.replica_logs:
            if not self._log(p, offset, lighthouse=False, quorums=not have_lighthouse).read():
                return False
        return True

    def _log(self, path: Path, offset: float, *, lighthouse: bool, quorums: bool) -> GrowingLog:
        log = self._logs.get(path)
        if log is None:
            log = self._logs[path] = GrowingLog(path, self._stats, offset, lighthouse, quorums)
        return log

    def _replay(self, path: Path, stats: ParseStats, **_read_as: object) -> Iterator[Event]:
        """The log's events so far, as copies (the timeline sets times it finds implausible),
        its stats added to the build's when the merge first asks it for one, as one read of
        it would (`_read_as`: how iter_run_events would read it, as this log was read)."""
        log = self._logs[path]
        if log.account(stats):
            yield from map(copy.copy, log.events)


def _for_one_build(stats: ParseStats) -> ParseStats:
    """The counters so far, with fresh lists and maps for what a build adds (files, spans,
    restarts, the files it could not open); the commit counts are shared: a build reads them."""
    return replace(stats, files=[], missing=[], unreadable=[], spans={}, restarts={})
