"""A run of the FT script: its job, its folder and its replica logs, and their progress.

Why one type: the folder is `logvocab.run_dir` (under `paths.torchft_runs_dir`), a replica's
log `logvocab.replica_log`; every reader of progress finds them here instead of joining the
names again, and keeps one incremental reader per log (`reader`), so polling the same run
again reads only what its logs appended.
"""

from __future__ import annotations

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
