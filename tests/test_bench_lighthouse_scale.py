"""bench/lighthouse_scale.py: its pure helpers on recorded data (a real replica log, a real
metrics scrape), and one small real run (a Lighthouse, 4 torchft ManagerServers) whose JSON has
every figure and after which nothing it started runs.

The helpers' tests are `unit`; the run starts processes (`process`, from conftest)."""

from __future__ import annotations

import gzip
import json
import os
import sys
import types
import uuid
from pathlib import Path

import pytest

from ftslurm import procs
from ftslurm.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import lighthouse_scale as bench  # noqa: E402

REPLICA_LOG = ROOT / "tests" / "fixtures" / "failure" / "tft-8" / "tft-8_0.out.gz"
SCRAPE = ROOT / "tests" / "golden" / "metrics-slurm-tft-11.txt"

pytestmark = pytest.mark.timeout(300)
unit = pytest.mark.unit


def _replica_lines() -> list[bytes]:
    return gzip.decompress(REPLICA_LOG.read_bytes()).splitlines(keepends=True)


@unit
def test_spread_is_median_min_max_and_count() -> None:
    assert bench.spread([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    assert bench.spread([0.123456]) == {"median": 0.1235, "min": 0.1235, "max": 0.1235, "n": 1}
    assert bench.spread([]) is None


@unit
def test_replicas_option() -> None:
    assert bench.parse_replicas("64,256, 1024") == [64, 256, 1024]
    for bad in ("1", "64,x", "", "4,0"):
        with pytest.raises(UserError, match="--replicas"):
            bench.parse_replicas(bad)


@unit
@pytest.mark.parametrize("n,k", [(4, 1), (65, 2), (1024, 16), (3, 8), (1000, 7)])
def test_replicas_are_split_into_contiguous_nearly_equal_parts(n: int, k: int) -> None:
    parts = bench.split(n, k)
    assert [i for p in parts for i in p] == list(range(n))
    sizes = [len(p) for p in parts]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert len(parts) == min(k, n)


@unit
def test_one_simulator_process_per_64_replicas_by_default() -> None:
    assert [bench.default_procs(n) for n in (2, 64, 65, 256, 1024)] == [1, 1, 2, 4, 16]


@unit
def test_a_replica_is_told_from_its_id_and_from_its_log_lines() -> None:
    assert bench.index_of("torchtitan_ft_12:0f3c-uuid") == 12
    assert bench.index_of("torchtitan_ft_7") == 7
    assert bench.index_of("other_3:uuid") is None and bench.index_of("torchtitan_ft_x:1") is None
    lines = _replica_lines()
    tagged = [line for line in lines if b"[Replica torchtitan_ft_0]" in line]
    assert len(tagged) > 20  # a real torchft Manager's lines, the quorum ones among them
    assert any(b"got lighthouse quorum" in line for line in tagged)
    assert {bench.replica_of(line) for line in tagged} == {0}
    assert {bench.replica_of(line) for line in lines if b"[Replica " not in line} == {None}


@unit
def test_vm_fields_of_proc_status() -> None:
    status = ("Name:\ttorchft_lighth\nVmPeak:\t  120000 kB\nVmHWM:\t   17200 kB\n"
              "VmRSS:\t   16984 kB\nThreads:\t5\n")  # fmt: skip
    assert bench.vm_kb(status, "VmRSS") == 16984
    assert bench.vm_kb(status, "VmHWM") == 17200
    assert bench.vm_kb(status, "VmSwap") is None and bench.vm_kb("", "VmRSS") is None


@unit
def test_lighthouse_up_reads_the_sample_not_its_help_text() -> None:
    """The recorded scrape's HELP line says `ftslurm_lighthouse_up 1 if ...`; its sample is 0."""
    text = SCRAPE.read_text()
    assert "ftslurm_lighthouse_up 1" in text  # what a substring test would take for up
    assert bench.lighthouse_up(text) is False
    up = text.replace("ftslurm_lighthouse_up 0.0", "ftslurm_lighthouse_up 1.0")
    assert bench.lighthouse_up(up) is True
    assert bench.lighthouse_up("") is False


@unit
def test_lines_come_whole_from_pieces() -> None:
    data = b"".join(_replica_lines())
    pieces = [data[i : i + 777] for i in range(0, len(data), 777)]
    assert list(bench.lines_of(pieces)) == data.splitlines(keepends=True)
    assert list(bench.lines_of([b"a\nb", b"c"])) == [b"a\n", b"bc"]


class _DropRepeats:
    """A stateful filter: a line seen before on this filter is left out."""

    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        self.seen: set[bytes] = set()

    def filter_line(self, line: bytes) -> bytes | None:
        body = line.split(b" - ", 1)[-1]  # without its time
        if body in self.seen:
            return None
        self.seen.add(body)
        return line


@unit
def test_each_replica_gets_its_own_filter() -> None:
    """Two replicas' identical lines, interleaved in one simulator's file: each replica's
    first one stays (one filter shared by both would drop the second replica's)."""
    a = b"t1 [INFO] [torchft::manager] - [Replica torchtitan_ft_0] Start quorum for group_rank 0\n"
    b = a.replace(b"ft_0]", b"ft_1]")
    plain = b"t1 [INFO] - Creating LighthouseClient\n"
    lines = [a, b, a.replace(b"t1", b"t2"), b.replace(b"t1", b"t2"), plain, plain]
    _DropRepeats.made = 0
    kept = bench.filtered_bytes(lines, lambda: _DropRepeats().filter_line)
    assert kept == len(a) + len(b) + len(plain)
    assert _DropRepeats.made == 3  # replica 0, replica 1, the lines of no replica


@unit
def test_the_filter_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    import ftslurm

    monkeypatch.setitem(sys.modules, "ftslurm.logfilter", None)  # not there: ImportError
    monkeypatch.delattr(ftslurm, "logfilter", raising=False)
    assert bench.filter_factory() is None

    fake = types.ModuleType("ftslurm.logfilter")
    fake.ReplicaLogFilter = _DropRepeats  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ftslurm.logfilter", fake)
    monkeypatch.setattr(ftslurm, "logfilter", fake, raising=False)
    make = bench.filter_factory()
    assert make is not None
    line = b"x [Replica torchtitan_ft_3] Finished quorum\n"
    f = make()
    assert f(line) == line and f(line) is None

    class Stream:  # only a stream filter's feed(): fed one whole line at a time
        def feed(self, chunk: bytes) -> bytes:
            return chunk.upper()

    fake.ReplicaLogFilter = Stream  # type: ignore[attr-defined]
    make = bench.filter_factory()
    assert make is not None and make()(b"ab\n") == b"AB\n"


@unit
def test_log_growth_counts_across_one_rotation(tmp_path: Path) -> None:
    log = tmp_path / "lighthouse.log"
    log.write_bytes(b"x" * 100)
    assert bench.log_growth(log, 40) == 60
    log.rename(tmp_path / "lighthouse.log.1")  # the launcher's rotation past its cap
    (tmp_path / "lighthouse.log.1").write_bytes(b"x" * 150)
    log.write_bytes(b"y" * 30)
    assert bench.log_growth(log, 100) == 50 + 30
    assert list(bench.read_window(tmp_path / "lighthouse.log.1", 140, 150)) == [b"x" * 10]


@unit
def test_a_bad_option_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--replicas", "1"], ["--rounds", "0"], ["--heartbeat-timeout-ms", "50"],
                 ["--procs", "0"], ["--step-s", "-1"], ["--tokio-threads", "-1"]):  # fmt: skip
        assert bench.main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("Error: ") and err.count("\n") == 1, (argv, err)


@unit
def test_pooled_figures_of_two_repeats() -> None:
    cli = bench.CliTimes(status_s=[0.3, 0.4], json_s=[0.2, 0.2], metrics_s=[0.5, 0.7],
                         live_json_s=[1.5, 2.5], page_age_s=[0.4, 1.2],
                         page_from=["snapshot", "snapshot"], live_ok=[True, False],
                         json_bytes=2400, text_lines=17, up=[True, True])  # fmt: skip
    run = {"procs": 1, "tokio_threads": 2, "logging_procs": 1,
           "first_quorum_s": 0.02, "round_s": [0.004, 0.006],
           "lighthouse_rss_mb": 16.5, "lighthouse_tree_rss_mb": 31.0,
           "lighthouse_peak_rss_mb": 17.0, "failure_to_quorum_s": 2.05,
           "live_replicas_dropped": 0, "unanswered": 0, "lighthouse_log_bytes_per_round": 2500.0,
           "lighthouse_log_filter": True,
           "replica_log": {"raw": 1500.0, "filtered": 900.0}, "cli": cli, "cli_rounds": 9,
           "load_before": [1.0, 1.0, 1.0], "load_after": [2.0, 1.0, 1.0]}  # fmt: skip
    other = {**run, "first_quorum_s": 0.04, "round_s": [0.008], "unanswered": 1,
             "replica_log": {"raw": 1700.0, "filtered": "n/a"}}  # fmt: skip
    out = bench.pooled(4, [run, other], 2000, 2)
    assert out["round_s"] == {"median": 0.006, "min": 0.004, "max": 0.008, "n": 3}
    assert out["first_quorum_s"]["n"] == 2 and out["unanswered"] == 1
    assert out["replica_log_bytes_per_replica_step"] == {
        "raw": {"median": 1600.0, "min": 1500.0, "max": 1700.0, "n": 2}, "filtered": "n/a"}
    assert out["status_cmd_s"]["n"] == 4 and out["lighthouse_up"] is True
    assert out["status_live_json_s"] == {"median": 2.0, "min": 1.5, "max": 2.5, "n": 4}
    assert out["status_live_ok"] == 2 and out["status_page_from"] == ["snapshot"]
    assert "N = 4" in bench.table({"4": out})


# --------------------------------------------------------------------------------------------
# One real run

FIGURES = ("first_quorum_s", "round_s", "lighthouse_rss_mb", "lighthouse_tree_rss_mb",
           "lighthouse_peak_rss_mb", "failure_to_quorum_s", "lighthouse_log_bytes_per_round",
           "status_cmd_s", "status_json_s", "metrics_show_s")  # fmt: skip


def test_a_small_run_has_every_figure_and_leaves_no_process(tmp_path: Path) -> None:
    pytest.importorskip("torchft")
    from ftslurm import lighthouse, runner

    tag = f"LH_SCALE_TEST_TAG={uuid.uuid4()}"
    env = {**os.environ, tag.split("=")[0]: tag.split("=")[1], "PYTHONPATH": str(ROOT)}
    work = tmp_path / "work"
    state = work / "n4-r0" / "lighthouse"
    try:
        done = runner.run([sys.executable, str(ROOT / "bench" / "lighthouse_scale.py"),
                           "--replicas", "4", "--rounds", "3", "--cli-repeats", "2",
                           "--step-s", "0.2", "--heartbeat-timeout-ms", "1000", "--json",
                           "--work-dir", str(work)], env=env, timeout=280, check=False)  # fmt: skip
        left = procs.pids_with_env(tag)
        running = lighthouse.status(state, probe=False).running
    finally:  # what a broken bench left is not left to the next test
        lighthouse.stop(state, grace=5)
        procs.kill_pids(procs.pids_with_env(tag))
    assert done.returncode == 0, done.stderr[-3000:]
    assert left == [] and not running, "the bench left processes running"
    f = json.loads(done.stdout)["4"]
    for key in FIGURES:
        s = f[key]
        assert s["min"] > 0 and s["min"] <= s["median"] <= s["max"], (key, s)
    assert f["round_s"]["n"] == 3 and f["status_cmd_s"]["n"] == 2 and f["metrics_show_s"]["n"] == 2
    assert f["replicas"] == 4 and f["procs"] == 1 and f["heartbeat_timeout_ms"] == 1000
    assert f["tokio_threads"] == 2 and f["join_timeout_ms"] == 10000
    # no quorum forms without a live replica before its heartbeats are a timeout old
    assert f["failure_to_quorum_s"]["min"] >= 0.85
    assert f["live_replicas_dropped"] == 0 and f["unanswered"] == 0
    logs = f["replica_log_bytes_per_replica_step"]
    assert logs["raw"]["min"] > 0
    assert logs["filtered"] == "n/a" or 0 < logs["filtered"]["median"] <= logs["raw"]["median"]
    assert f["status_json_bytes"] > 0 and f["status_text_lines"] > 0 and f["lighthouse_up"] is True
    # the commands read the launcher's copy once it made one; the control reads the Lighthouse
    assert set(f["status_page_from"]) <= {"snapshot", "live"} and f["status_page_from"]
    assert f["status_live_json_s"]["n"] == 2 and f["status_live_ok"] == 2
    assert f["lighthouse_log_filter"] in (True, False, None)
    assert f["rounds_during_cli"] >= 1 and f["cpus"] >= 1 and f["versions"]["torchft"]
    assert len(f["load_before"]) == 3 and len(f["load_after"]) == 3
    assert "stopping the Lighthouse" in done.stderr  # progress goes to stderr
