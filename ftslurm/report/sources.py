"""The files of one run, and their events merged into one time-ordered stream.

A run is a directory (`outputs/torchft/tft-<job>/`), explicit files, or the newest run. A
Lighthouse log outlives runs (the managed Lighthouse's is shared by every run, and is often
copied whole into a run's directory): the timeline keeps the quorums whose members the
replica logs know (see timeline.py). The global event log keeps only the run's job
(and lines of no job, which the timeline places by the run's window).
"""

from __future__ import annotations

import heapq
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ftslurm import logvocab
from ftslurm.errors import UserError
from ftslurm.logfile import open_log
from ftslurm.logvocab import Event
from ftslurm.report import reader as R
from ftslurm.report.events import iter_event_log
from ftslurm.report.model import LeftOut
from ftslurm.report.reader import ParseStats
from ftslurm.textsafe import printable

# ---------------------------------------------------------------- files of a run

@dataclass
class ReportFiles:
    replica_logs: list[Path]
    lighthouse_logs: list[Path]
    event_logs: list[Path]
    job: str | None = None
    looked_in: list[str] = field(default_factory=list)
    shared_lighthouse: bool = False  # the managed Lighthouse's log: other runs' lines too
    _known: dict[int, set[Path]] = field(default_factory=dict, repr=False, compare=False)

    def add(self, kind: list[Path], f: Path) -> None:
        """Append `f` to `kind` (one of the lists) unless it is there already; a set per
        list, as a run folder may hold 10,000 logs (a list's `in` would make that quadratic)."""
        known = self._known.get(id(kind))
        if known is None:
            known = self._known[id(kind)] = set(kind)
        if f not in known:
            known.add(f)
            kind.append(f)


def find_run_files(
    paths: Sequence[str | Path] = (),
    *,
    lighthouse: Sequence[str | Path] = (),
    events: Sequence[str | Path] = (),
) -> ReportFiles:
    """The files of one run: a run directory, files, or (nothing, or the runs directory
    itself) the newest tft-* run.

    In a directory: `*lighthouse*` is the Lighthouse log, `*.jsonl` event logs, other
    `*.out|*.log|*.err` replica logs. With a `tft-<job>` directory the global event log
    (`paths.events_log()`) is read too, keeping the events of that job.
    """
    from ftslurm import paths as P

    # named files that are missing stay in the lists: counted in ParseStats.missing
    lighthouse = [_spooled(p) for p in lighthouse]
    events = [_spooled(p) for p in events]
    files = ReportFiles([], list(lighthouse), list(events))
    if not paths and not lighthouse:
        paths = [_newest_run(P.torchft_runs_dir(), files)]
    elif len(paths) == 1 and logvocab.newest_run_dir(Path(paths[0])):
        paths = [_newest_run(Path(paths[0]), files)]  # the runs directory itself
    for p in map(Path, paths):
        if p.is_dir():
            files.looked_in.append(str(p))
            job = logvocab.run_job(p.name)
            if job and job.isdecimal():  # a Slurm job's (a local demo's has no global events)
                files.job = job
            for f in sorted(p.iterdir()):
                if not f.is_file():
                    continue
                _classify(f, files)
        elif p.exists():
            _classify(_spooled(p), files, explicit=True)
        else:
            raise UserError(f"no such file or directory: {p}")
    if files.replica_logs and not files.lighthouse_logs and not _any_file(paths):
        shared = _managed_lighthouse_logs()
        if shared:
            files.lighthouse_logs += shared
            files.shared_lighthouse = True
    if files.job and not events:
        glob_events = P.events_log()
        if glob_events.is_file() and glob_events not in files.event_logs:
            files.event_logs.append(glob_events)
    if not files.replica_logs and not files.lighthouse_logs:
        raise UserError(
            "no logs found in " + ", ".join(files.looked_in or [str(p) for p in paths])
            + " (expected tft-<job>_<i>.out replica logs or a lighthouse log)"
        )
    return files


SPOOL_MAX = 1 << 30  # a pipe longer than this is refused: a file is read in place instead
_SPOOLS: list[BinaryIO] = []  # open for the life of the process: their paths are /proc/self/fd/N
_SHELL_FDS = (Path("/dev/fd"), Path("/proc/self/fd"))


def _spooled(path: str | Path) -> Path:
    """A pipe the shell handed over (`report /dev/stdin < log`, `report <(ssh node cat log)`)
    copied to an unnamed temporary file; a file or a folder as it is (read in place); any other
    kind of file refused.

    Why a copy at all: the report reads each file twice (the clock offset, then the events)
    and a pipe can be read only once. Why bounded and unnamed: an unbounded copy of
    `report /dev/zero` would fill /tmp without end, and a named copy would stay behind when
    the report is killed; so a pipe past SPOOL_MAX is refused, and the copy has no name (its
    path is /proc/self/fd/N): it goes with the process however that ends. A named pipe
    elsewhere is refused: opening one with no writer blocks for ever.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError:
        return p  # missing: counted in ParseStats.missing (named files), or said by the caller
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return p
    if not (stat.S_ISFIFO(mode) and (p.parent in _SHELL_FDS or p == Path("/dev/stdin"))):
        raise UserError(
            f"{printable(str(p))}: {_kind(mode)}, not a log file (give a log file, or pipe one in: "
            "ftslurm report /dev/stdin < LOG)"
        )
    import tempfile

    spool = tempfile.TemporaryFile(prefix="ftslurm-report-")  # noqa: SIM115 - kept open
    try:
        with open(p, "rb") as src:
            while chunk := src.read(1 << 20):
                if spool.tell() + len(chunk) > SPOOL_MAX:
                    raise UserError(
                        f"{printable(str(p))}: a pipe of more than {SPOOL_MAX >> 20} MiB: save "
                        "it to a file and give that file (a file is read where it is)"
                    )
                spool.write(chunk)
        spool.flush()
    except OSError as e:
        spool.close()
        raise UserError(f"{printable(str(p))}: cannot read it ({e.strerror})") from None
    except BaseException:
        spool.close()
        raise
    _SPOOLS.append(spool)
    return Path(f"/proc/self/fd/{spool.fileno()}")


def _kind(mode: int) -> str:
    """What a file that is not a log is, in words."""
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _newest_run(root: Path, files: ReportFiles) -> Path:
    files.looked_in.append(str(root))
    run = logvocab.newest_run_dir(root)
    if run is None:
        raise UserError(
            f"no run found: no tft-* directory in {root} "
            "(give a run directory or log files: ftslurm report outputs/torchft/tft-<job>)"
        )
    return run


def _any_file(paths: Sequence[str | Path]) -> bool:
    """Files were named (a pipe or /dev/stdin counts): the managed Lighthouse's log, shared by
    every run, is then not added to them by itself."""
    return any(Path(p).exists() and not Path(p).is_dir() for p in paths)


def _managed_lighthouse_logs() -> list[Path]:
    """The log of `ftslurm lighthouse start` (shared by all runs) and the part it rotated
    out while running (`.1`, older), those that exist."""
    try:
        from ftslurm.lighthouse import log_path

        path = log_path()
    except Exception:  # noqa: BLE001 - another component's state: never fatal here
        return []
    return [p for p in (path.with_name(path.name + ".1"), path) if p.is_file()]


def _classify(f: Path, files: ReportFiles, explicit: bool = False) -> None:
    name = f.name.lower().removesuffix(".gz")
    if name.endswith(".jsonl"):
        files.add(files.event_logs, f)
    elif not explicit and not name.endswith((".out", ".log", ".err")):
        return
    elif "lighthouse" in name:
        files.add(files.lighthouse_logs, f)
    else:
        files.add(files.replica_logs, f)


def clock_offset(lighthouse_logs: Iterable[Path], max_lines: int = 200_000) -> float:
    """Seconds local-minus-UTC of the logs' clock, from the first `Quorum!` line.

    A Quorum carries `created: Timestamp { seconds: S, nanos: N }` (UTC) and its line the local
    wall clock: their difference, rounded to 15 minutes, is the zone offset. Used only to place
    zone-aware times (event log) on the logs' clock; 0 when no quorum is found.
    """
    for path in lighthouse_logs:
        try:
            with open_log(path) as fh:  # lines cut at R.MAX_LINE: a newline-free log is no line
                for i, line in enumerate(R.iter_lines(fh, ParseStats())):
                    if i > max_lines:
                        break
                    if b"Quorum! " not in line:
                        continue
                    created = logvocab.quorum_created(line)
                    t = logvocab.parse_time(line)
                    if created is not None and t is not None:
                        return round((t - created) / 900.0) * 900.0
        except (OSError, EOFError, zlib.error):  # unreadable, or a corrupt gzip
            continue
    return 0.0



def _key(ev: Event) -> float:
    return ev.time if ev.time is not None else 0.0


def iter_run_events(files: ReportFiles, stats: ParseStats, utc_offset: float,
                    left_out: list[LeftOut] | None = None,
                    file_events: Callable[..., Iterator[Event]] = R.iter_file_events,
                    ) -> Iterator[Event]:  # fmt: skip
    """All events of a run, merged by time (each file is time-ordered on its own); event-log
    lines of another job are appended to `left_out`. `file_events(path, stats, utc_offset=,
    lighthouse=, quorums=)`: a log's events (a live report gives those it kept, live.py)."""
    streams: list[Iterator[Event]] = []
    for p in files.lighthouse_logs:
        streams.append(file_events(p, stats, utc_offset=utc_offset, lighthouse=True))
    for p in files.event_logs:
        streams.append(_job_filter(iter_event_log(p, stats, utc_offset=utc_offset), files.job,
                                   left_out if left_out is not None else []))
    have_lighthouse = any(p.exists() for p in files.lighthouse_logs)
    for p in files.replica_logs:
        streams.append(
            file_events(p, stats, utc_offset=utc_offset, quorums=not have_lighthouse)
        )
    return heapq.merge(*streams, key=_key)


def _job_filter(events: Iterator[Event], job: str | None,
                left_out: list[LeftOut]) -> Iterator[Event]:
    """The lines of the run's job, or of none (placed by the timeline: timeline._Builder)."""
    for ev in events:
        if job is None or not ev.job or ev.job == job:
            yield ev
        else:
            left_out.append(LeftOut(ev.time, ev.detail, ev.replica, ev.node, ev.job,
                                    f"job {ev.job}, not the run's job {job}"))


DEVICE_HEAD = 256 << 10  # bytes of a replica log's start searched for its device


def device_of(replica_logs: Sequence[Path], files: int = 4) -> str | None:
    """What the replicas trained on, as their logs' start says: the launcher's
    `FTSLURM_DEVICE=` (its `env:` line) or torchtitan's `CUDA capacity:` / `CPU capacity:`
    line, lower case (`cpu`, `cuda`); None when no log says. Reads the first DEVICE_HEAD bytes
    of a few logs: the replicas of one run share the launcher's settings."""
    for path in list(replica_logs)[:files]:
        try:
            with open_log(path) as fh:
                head = fh.read(DEVICE_HEAD)
        except (OSError, EOFError, zlib.error):
            continue
        m = logvocab.DEVICE_LINE.search(head)
        if m:
            return (m.group(1) or m.group(2)).decode("ascii").lower()
    return None
