"""The log vocabulary: the banner written then parsed back, and every other shape on lines of
recorded real logs (tests/fixtures); `report`, `status`, `demo` and `failure` read the same
recorded log the same way."""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import pytest

from ftslurm import logvocab as V
from ftslurm.replica import plan as planlib

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
# slurm-tft-11, replica 1: three attempts (requeued twice), healed at steps 5 and 11, last step 39
TFT11_1 = FIX / "report" / "slurm-tft-11" / "tft-11_1.out.gz"


def ts(s: str) -> float:
    return (datetime.fromisoformat(s) - datetime(1970, 1, 1)).total_seconds()


def _plan(**env: str) -> planlib.Plan:
    base = {"DEVICE": "cpu", "SLURM_ARRAY_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "1",
            "SLURM_ARRAY_TASK_COUNT": "2"}  # fmt: skip
    return planlib.build_ft_plan({**base, **env}, ROOT, ["torchrun"])


@pytest.mark.parametrize("attempt", ["0", "3"])
def test_banner_written_then_parsed(attempt):
    line = V.banner("2025-07-16 13:51:42", _plan(SLURM_RESTART_COUNT=attempt), "worker-0")
    assert line == f"[2025-07-16 13:51:42]  launching replica 1 (attempt {attempt}) on worker-0"
    ev = V.parse_line(line.encode())
    assert (ev.kind, ev.replica, ev.rank, ev.node, ev.time) == (
        V.LAUNCH, "1", int(attempt), "worker-0", ts("2025-07-16T13:51:42")
    )
    m = V.last_banner(b"step: 3  loss: 1.0\n" + line.encode() + b"\nstep: 4  loss: 2.0\n")
    assert m is not None and m.group(2) == attempt.encode()
    assert V.line_time(line) == ts("2025-07-16T13:51:42")


def test_classic_banner_is_not_an_attempt():
    env = {"DEVICE": "cpu", "SLURM_NNODES": "2", "SLURM_JOB_ID": "7"}
    plan = planlib.build_classic_plan(env, ROOT, "worker-0", ["torchrun"])
    line = V.banner("2025-07-16 13:51:42", plan, "worker-0")
    assert line == "[2025-07-16 13:51:42]  launching classic job 7 on worker-0"
    assert V.parse_line(line.encode()) is None and V.last_banner(line.encode()) is None


def test_recorded_log_read_alike_by_every_reader(tmp_path):
    """The same recorded log: the report's reader, status, demo and failure agree."""
    from ftslurm import status
    from ftslurm.demo import ReplicaLog
    from ftslurm.report import reader

    log = tmp_path / "tft-11_1.out"
    log.write_bytes(gzip.decompress(TFT11_1.read_bytes()))
    launches = [(e.replica, e.rank, e.node) for e in reader.iter_file_events(
        log, reader.ParseStats()) if e.kind == V.LAUNCH]  # fmt: skip
    assert launches == [("1", 0, "worker-1"), ("1", 1, "worker-1"), ("1", 2, "worker-1")]
    assert V.count_banners(log) == 3
    s = status.read_summary(log)
    assert (s.attempt, s.last_step, s.last_loss) == (2, 39, 6.37609)
    demo = ReplicaLog(log)
    demo.poll()
    assert (demo.attempt, demo.last_step, demo.healed_step) == (2, 39, {1: 5, 2: 11})
    assert V.count_banners(tmp_path / "missing.out") == 0


def test_step_line_recorded_and_coloured():
    data = gzip.decompress(TFT11_1.read_bytes())
    plain = next(x for x in data.splitlines() if b"step: 39" in x)
    ev = V.parse_line(plain)
    assert (ev.kind, ev.step, ev.detail, ev.time) == (
        V.TITAN_STEP, 39, "6.37609", pytest.approx(ts("2026-11-23T10:12:53.579"))
    )
    # torchtitan colours the same line on a terminal
    coloured = plain.replace(b"step:", b"\x1b[31mstep:").replace(b"loss:", b"\x1b[32mloss:")
    assert V.strip_ansi(coloured + b"\x1b[39m") == plain
    assert V.parse_line(coloured).detail == "6.37609"
    assert V.STEP.findall(b"step: 7  loss: nan") == [(b"7", b"nan")]  # a diverged run


def test_heal_and_quorum_lines_recorded():
    lh = (FIX / "report" / "guide" / "lighthouse.log").read_bytes().splitlines()
    q = V.parse_line(lh[-1])
    assert (q.kind, q.quorum_id, [m.step for m in q.members]) == (V.QUORUM, 4, [142, 0])
    assert V.quorum_created(lh[-1]) == pytest.approx(1752673944.923882447)
    data = gzip.decompress(TFT11_1.read_bytes()).splitlines()
    healed = [V.parse_line(x) for x in data if b"Loaded state dict" in x]
    assert [(e.kind, e.step) for e in healed] == [(V.HEALED, 0), (V.HEALED, 5), (V.HEALED, 11)]


def test_time_formats():
    t = V.line_time("[titan] 2026-11-23 10:10:51,647 - root - INFO - step:  3")
    assert t == V.line_time("2026-11-23T10:10:51.647 [INFO] [torchft::manager] - x")
    banner = V.line_time("[2026-11-23 10:10:51]  launching replica 1 (attempt 1) on w")
    assert banner is not None and t - banner == pytest.approx(0.647)
    glog = V.line_time("W1123 10:10:52.001000 11604 site-packages/x.py:1] y", year=2026)
    assert glog - t == pytest.approx(0.354)
    for untimed in (
        "Traceback (most recent call last):",
        "NoneType: None",
        "",
        "  }",
        "INFO:torchft.manager:[x/0 - step 3] ok",
        "[2026-13-45 99:00:00] bad",
    ):
        assert V.line_time(untimed) is None, untimed  # fmt: skip
        assert not V.has_time(untimed.encode()) or V.parse_time(untimed.encode()) is None


def test_log_paths_built_and_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    log = V.replica_log(12, 1)
    assert log == tmp_path / "torchft" / "tft-12" / "tft-12_1.out"
    assert log.parent == V.run_dir(12) and V.run_job(log.parent.name) == "12"
    assert V.parse_log_name(log.name) == ("12", 1, False)
    assert V.parse_log_name("tft-local-2026_3.out.gz") == V.LogName("local-2026", 3, True)
    assert V.run_dir("7", tmp_path / "elsewhere") == tmp_path / "elsewhere" / "torchft" / "tft-7"
    assert V.replica_log(7, 0, tmp_path) == tmp_path / "tft-7_0.out"
    for other in ("slurm-12_1.out", "tft-12_1.err", "tft-12.out", "tft-_1.out"):
        assert V.parse_log_name(other) is None, other
    assert [V.run_job(n) for n in ("tft-12", "tft-", "run-12")] == ["12", None, None]
