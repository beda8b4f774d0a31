"""The live report (ftslurm/report/live.py, what `ftslurm metrics` reads): built again as the
logs grow, it reads only what they appended and gives the report one read of the same whole
lines gives, on every recorded run."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from ftslurm.report import build_report
from ftslurm.report.live import LiveReport

pytestmark = [pytest.mark.unit, pytest.mark.timeout(300)]

RUNS = Path(__file__).parent / "fixtures" / "report"
ROUNDS = 4


def _lines(path: Path) -> list[bytes]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.splitlines(keepends=True)


def _logs(run: Path) -> dict[str, list[bytes]]:
    """Each log of a recorded run (decompressed, named as a live run's), as lines."""
    out = {}
    for p in sorted(run.iterdir()):
        name = p.name.removesuffix(".gz")
        if name.endswith((".out", ".log")):
            out[name] = _lines(p)
    return out


def _report(folder: Path, live: LiveReport | None = None) -> dict:
    rep = live.build() if live is not None else build_report(folder)
    return json.loads(json.dumps(rep.to_json(), default=str))


def _grow(folder: Path, logs: dict[str, list[bytes]], upto: float) -> None:
    """Each log holds its first `upto` share of lines (appended: the file stays the same)."""
    for name, lines in logs.items():
        target = folder / name
        have = target.stat().st_size if target.exists() else 0
        data = b"".join(lines[: int(len(lines) * upto)])
        with open(target, "ab") as fh:
            fh.write(data[have:])


@pytest.mark.parametrize("run", sorted(p.name for p in RUNS.iterdir() if p.is_dir()))
def test_the_live_report_equals_one_read_of_the_logs_as_they_grow(run: str, tmp_path: Path):
    logs = _logs(RUNS / run)
    for extra in ("events.jsonl",):
        if (RUNS / run / extra).exists():
            shutil.copy(RUNS / run / extra, tmp_path / extra)
    live = LiveReport([tmp_path])
    total = 0
    for i in range(1, ROUNDS + 1):
        _grow(tmp_path, logs, i / ROUNDS)
        if not any(p.stat().st_size for p in tmp_path.iterdir() if p.suffix in (".out", ".log")):
            continue
        assert _report(tmp_path, live) == _report(tmp_path), f"round {i} of {ROUNDS}"
        total = sum(p.stat().st_size for p in tmp_path.iterdir() if p.suffix in (".out", ".log"))
    # every byte of the logs was parsed once, not once per build
    assert live.bytes_read == total
    assert live.reads == 1


def test_a_line_without_its_newline_waits_for_the_next_build(tmp_path: Path):
    logs = _logs(RUNS / "slurm-tft-11")
    _grow(tmp_path, logs, 0.5)
    live = LiveReport([tmp_path])
    before = _report(tmp_path, live)
    name = next(n for n in logs if n.endswith("_0.out"))
    rest = b"".join(logs[name][len(_lines_in(tmp_path / name)):])
    line_end = rest.index(b"\n") + 1
    with open(tmp_path / name, "ab") as fh:  # half a line: its writer is still writing it
        fh.write(rest[: line_end // 2])
    assert live.build().stats.bytes == before["parse"]["bytes"]
    with open(tmp_path / name, "ab") as fh:
        fh.write(rest[line_end // 2 : line_end])
    assert _report(tmp_path, live) == _report(tmp_path)


def _lines_in(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_a_replaced_or_truncated_log_is_read_again_from_its_start(tmp_path: Path):
    logs = _logs(RUNS / "slurm-tft-11")
    _grow(tmp_path, logs, 0.5)
    live = LiveReport([tmp_path])
    live.build()
    name = next(n for n in logs if n.endswith("_1.out"))
    log = tmp_path / name
    fresh = tmp_path / "new"
    fresh.write_bytes(b"".join(logs[name][:10]))
    os.replace(fresh, log)  # rotated: another file under the name
    assert _report(tmp_path, live) == _report(tmp_path)
    assert live.reads == 2
    log.write_bytes(b"".join(logs[name][:5]))  # truncated in place
    assert _report(tmp_path, live) == _report(tmp_path)
    assert live.reads == 3


def test_a_log_that_appears_later_joins_the_live_report(tmp_path: Path):
    logs = _logs(RUNS / "slurm-3-replicas-tft-3")
    late = next(n for n in logs if n.endswith("_2.out"))
    _grow(tmp_path, {n: v for n, v in logs.items() if n != late}, 0.5)
    live = LiveReport([tmp_path])
    live.build()
    _grow(tmp_path, logs, 1.0)
    assert _report(tmp_path, live) == _report(tmp_path)


def test_following_the_newest_run_starts_again_on_the_new_one(tmp_path: Path):
    """`ftslurm metrics` without a run follows the newest tft-* folder: a new job's logs are
    another run, not more of the last one."""
    first, second = tmp_path / "tft-11", tmp_path / "tft-3"
    first.mkdir()
    _grow(first, _logs(RUNS / "slurm-tft-11"), 1.0)
    live = LiveReport([tmp_path])  # the runs folder itself: its newest run
    assert _report(tmp_path, live) == _report(tmp_path)
    second.mkdir()
    _grow(second, _logs(RUNS / "slurm-3-replicas-tft-3"), 1.0)
    os.utime(second, (os.stat(first).st_mtime + 10,) * 2)
    assert _report(tmp_path, live) == _report(tmp_path)
    assert live.reads == 2
