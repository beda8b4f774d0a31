"""The failure event log read as report events; its schema, writer and parser are
`ftslurm.event_log` (the launcher reads it too, and must not import the report)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ftslurm.event_log import parse_event_line, to_seconds
from ftslurm.logfile import open_log
from ftslurm.logvocab import INJECTED, Event
from ftslurm.report.reader import ParseStats, iter_lines


def iter_event_log(path: Path, stats: ParseStats, *, utc_offset: float = 0.0) -> Iterator[Event]:
    """Events of the log in file order, as `INJECTED` events (detail = action)."""
    try:
        fh = open_log(path)
    except OSError as e:
        stats.cannot_open(path, e)
        return
    stats.files.append(str(path))
    with fh:
        for seq, raw in enumerate(iter_lines(fh, stats)):
            stats.lines += 1
            if not raw.strip():
                continue
            ev = parse_event_line(raw)
            if ev is None:
                stats.bad_events += 1
                continue
            # `rank`: the one rank of the replica a kill hit (None: the whole replica)
            yield Event(
                INJECTED, to_seconds(ev.time, utc_offset),
                replica=str(ev.replica) if ev.replica is not None else None,
                rank=ev.rank, detail=ev.action, source=path.name, seq=seq, node=ev.node or "",
                job=ev.job or "",
            )
