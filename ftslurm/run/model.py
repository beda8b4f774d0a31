"""A run of the FT script: its job, its folder and its replica logs, and their progress.

Why one type: the folder is `logvocab.run_dir` (under `paths.torchft_runs_dir`), a replica's
log `logvocab.replica_log`; every reader of progress finds them here instead of joining the
names again, and keeps one incremental reader per log (`reader`), so polling the same run
again reads only what its logs appended.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import logvocab
from ftslurm.run.progress import TAIL_BYTES, LogSummary, ProgressReader, StepReader, read_summary


@dataclass
class Run:
    """One run: `job` (the Slurm array job, or the name a local run uses) and `folder`, where
    its `tft-<job>_<i>.out` logs are (`Run.of`: the FT script's folder under the outputs)."""

    job: str
    folder: Path
    _progress: dict[int, ProgressReader] = field(default_factory=dict, repr=False)
    _steps: dict[int, StepReader] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, job: object, outputs: Path | None = None, folder: Path | None = None) -> Run:
        """The run of `job`: its logs in `folder`, default the FT script's folder for it
        under `outputs` (default: the configured outputs)."""
        return cls(str(job), logvocab.run_dir(job, outputs) if folder is None else folder)

    def log(self, replica: int) -> Path:
        """Replica (array task) `replica`'s log, `tft-<job>_<replica>.out`."""
        return logvocab.replica_log(self.job, replica, self.folder)

    def summary(self, replica: int, tail_bytes: int = TAIL_BYTES) -> LogSummary:
        """One read of the replica's log tail (a command that answers once: `status`)."""
        return read_summary(self.log(replica), tail_bytes)

    def summaries(self, replicas: list[int] | set[int] | dict[int, object],
                  tail_bytes: int = TAIL_BYTES) -> dict[int, LogSummary]:  # fmt: skip
        """`summary` of each replica."""
        return {i: self.summary(i, tail_bytes) for i in replicas}

    def reader(self, replica: int, tail_bytes: int | None = None) -> ProgressReader:
        """The replica's incremental progress reader, one per log (a poller reads only what
        was appended since its previous read)."""
        if replica not in self._progress:
            self._progress[replica] = ProgressReader(self.log(replica), tail_bytes)
        return self._progress[replica]

    def steps(self, replica: int) -> StepReader:
        """The replica's incremental reader of step lines, one per log."""
        if replica not in self._steps:
            self._steps[replica] = StepReader(self.log(replica))
        return self._steps[replica]


# ---------------------------------------------------------------- the runs in a folder (no Slurm)


def job_logs(folder: Path) -> dict[str, dict[int, Path]]:
    """job id -> {replica: `tft-<job>_<i>.out`} of the logs in `folder`; in a `tft-<job>`
    folder only that job's. An archived `tft-<job>_<i>.out.gz` counts when there is no
    `.out`. Works from the login node: the folder is listed, Slurm is not asked."""
    only = logvocab.run_job(folder.resolve().name)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    jobs: dict[str, dict[int, Path]] = {}
    for name in names:
        log = logvocab.parse_log_name(name)
        if log and (only is None or log.job == only):
            logs = jobs.setdefault(log.job, {})
            if log.replica not in logs or not log.archived:  # the live log before its archive
                logs[log.replica] = folder / name
    return jobs


def newest_job(jobs: dict[str, dict[int, Path]]) -> str | None:
    """The job whose logs changed last (a folder holding several jobs' logs: `.`, a copy)."""

    def mtime(job: str) -> float:
        return max((_mtime(p) for p in jobs[job].values()), default=0.0)

    return max(jobs, key=mtime, default=None)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def replica_logs(
    folder: Path, replicas: set[int] | None = None, job: str | None = None
) -> dict[str, Path]:
    """`r<i>` -> `tft-<job>_<i>.out` in `folder`, only the selected replicas if given. In a
    `tft-<job>` folder only that job's logs; in another (`.`, a copy, a renamed folder) the
    `tft-*_<i>.out` there of `job`, else of the newest job (two replica 0s cannot share one
    prefix)."""
    jobs = job_logs(folder)
    job = job if job is not None else newest_job(jobs)
    if job is None or job not in jobs:
        return {}
    return {f"r{i}": p for i, p in sorted(jobs[job].items()) if replicas is None or i in replicas}
