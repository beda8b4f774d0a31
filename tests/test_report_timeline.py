"""The report on the cluster guide's excerpt and on the recorded real CPU run.

Expected values are read off the logs themselves (see tests/fixtures/report/*/ and
/work/shared/data/torchft-ddp-cpu-run1/README.md: kill -> next commit 5.24 s, restart ->
first healed step 7.29 s).
"""

from __future__ import annotations

import gzip
import heapq
import os
import shutil
from pathlib import Path

import pytest

from ftslurm.errors import UserError
from ftslurm.report import build_report, find_run_files

FIX = Path(__file__).parent / "fixtures" / "report"


# reports of recorded runs must not pick up the checkout's own Lighthouse or failure log
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]
GUIDE = FIX / "guide"
RUN1 = FIX / "cpu-run1"


def test_guide_excerpt_story():
    rep = build_report([GUIDE])
    j = rep.to_json()
    assert [q["quorum_id"] for q in j["quorums"]] == [2, 3, 4]
    assert [q["participants"] for q in j["quorums"]] == [["0", "1"], ["0"], ["0", "1"]]
    assert [q["step"] for q in j["quorums"]] == [20, 21, 142]
    assert j["quorums"][2]["participant_ids"][1] == (
        "torchtitan_ft_1:5ea849a1-5cd7-40c6-a1e3-b307716c8088"
    )
    [f] = j["failures"]
    assert (f["replica"], f["step"], f["kind"]) == ("1", 21, "left-quorum")
    # the survivor's failed commit is the earliest sign of the failure
    assert (f["time"], f["time_source"]) == ("2025-07-16T13:49:32.462", "commit-failure")
    assert f["detected_time"] == "2025-07-16T13:49:41.512"
    [d] = j["degraded"]
    assert (d["replicas"], d["group_size"], d["start_step"], d["end_step"]) == (1, 2, 21, 142)
    assert d["start_time"] == "2025-07-16T13:49:41.512"
    assert d["end_time"] == "2025-07-16T13:52:24.923"
    assert d["duration_s"] == pytest.approx(163.411)
    [r] = j["recoveries"]
    assert (r["source_replica"], r["target_replica"], r["step"]) == ("0", "1", 142)
    assert r["time"] == "2025-07-16T13:52:26.769"
    assert r["requeue_time"] == "2025-07-16T13:51:42.000"  # the launcher's attempt line
    assert r["requeue_to_quorum_s"] == pytest.approx(42.923)
    s = j["summary"]
    assert (s["quorum_changes"], s["failures"], s["requeues"], s["recoveries"]) == (2, 1, 1, 1)
    assert (s["commit_failures"], s["steps_attempted"], s["steps_committed"]) == (1, 1, 0)
    text = rep.to_text()
    assert "1/2 replicas from step 21 to 142, 2 m 43 s" in text
    assert "quorum changes    2 (2 -> 3 -> 4)" in text
    assert "recovery: replica 0 -> replica 1 at step 142" in text


def test_real_run_with_event_log():
    j = build_report([RUN1]).to_json()
    assert [(q["quorum_id"], q["time"], q["step"], q["participants"]) for q in j["quorums"]] == [
        (1, "2026-11-23T08:50:55.316", 0, ["0", "1"]),
        (2, "2026-11-23T08:51:07.406", 22, ["0"]),
        (3, "2026-11-23T08:51:19.640", 59, ["0", "1"]),
    ]  # quorum 4 is a foreign torchtitan_ft_0 that joined the same Lighthouse afterwards
    [f] = j["failures"]
    assert (f["replica"], f["kind"], f["time_source"], f["step"]) == ("1", "kill", "injected", 22)
    assert f["time"] == "2026-11-23T08:51:02.461"
    assert f["replica_id"] == "train_ddp_1:536ef6e1-05a8-40a1-8f68-197240c24336"
    assert f["last_seen_time"] == "2026-11-23T08:51:02.247"  # last quorum round with it
    assert (f["survivor"], f["next_commit_step"]) == ("0", 22)
    assert f["to_next_commit_s"] == pytest.approx(5.242)  # README: 5.24 s
    [r] = j["recoveries"]
    assert (r["source_replica"], r["target_replica"], r["step"]) == ("0", "1", 59)
    assert r["target_id"] == "train_ddp_1:5c0a26c2-577c-439f-9d62-4c36d6037a9c"
    assert r["healed_time"] == "2026-11-23T08:51:19.952"
    assert r["requeue_to_healed_s"] == pytest.approx(7.293)  # README: 7.29 s
    [d] = j["degraded"]
    assert (d["start_step"], d["end_step"], d["replicas"], d["open"]) == (22, 59, 1, False)
    assert d["duration_s"] == pytest.approx(12.234)
    s = j["summary"]
    assert s["steps_by_replica"] == {
        "0": {"attempted": 200, "committed": 200, "failed": 0},
        "1": {"attempted": 162, "committed": 162, "failed": 0},
    }
    assert (s["requeues"], s["init_syncs"], s["foreign_quorums"], s["max_step"]) == (1, 1, 1, 199)
    assert [a["uuid"][:8] for a in j["attempts"]] == ["59ccd9f9", "536ef6e1", "5c0a26c2"]
    assert j["parse"]["lines"] == 1144 + 1828 + 1498 + 2
    assert j["parse"]["missing"] == [] and j["parse"]["malformed"] == 0


def _copy_logs(dst: Path, crlf: bool = False) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("lighthouse", "replica_0", "replica_1"):
        data = gzip.decompress((RUN1 / f"{name}.log.gz").read_bytes())
        if crlf:
            data = data.replace(b"\n", b"\r\n")
        (dst / f"{name}.log").write_bytes(data)
    return dst


def test_real_run_without_event_log_uses_the_logs_only(tmp_path):
    rep = build_report([_copy_logs(tmp_path / "run")])
    assert "last seen in a quorum at 08:51:02.247: at most 5.46 s from the failure" in (
        rep.to_text()
    )
    j = rep.to_json()
    [f] = j["failures"]
    # no injected time: the failure is what the quorum change showed
    assert (f["time"], f["time_source"], f["kind"]) == (
        "2026-11-23T08:51:07.406", "quorum-change", "left-quorum"
    )
    assert f["to_next_commit_s"] == pytest.approx(0.297)
    [r] = j["recoveries"]
    # restart time = the new process's `Manager listening on` line
    assert (r["requeue_source"], r["requeue_time"]) == ("manager-start", "2026-11-23T08:51:18.397")
    assert r["requeue_to_healed_s"] == pytest.approx(1.555)


def test_replica_logs_only(tmp_path):
    """No Lighthouse log: the managers' own `got lighthouse quorum` lines tell the story."""
    run = _copy_logs(tmp_path / "r")
    (run / "lighthouse.log").unlink()
    j = build_report(run).to_json()
    assert [(q["quorum_id"], q["step"], q["participants"]) for q in j["quorums"]] == [
        (1, 0, ["0", "1"]), (2, 22, ["0"]), (3, 59, ["0", "1"])
    ]
    assert [(f["replica"], f["step"]) for f in j["failures"]] == [("1", 22)]
    assert [(r["source_replica"], r["target_replica"], r["step"]) for r in j["recoveries"]] == [
        ("0", "1", 59)
    ]
    kinds = [e["kind"] for e in j["timeline"] if e["time"] == "2026-11-23T08:51:19.641"]
    assert kinds == ["quorum", "recovery"]


def test_crlf_and_explicit_files_give_the_same_report(tmp_path):
    run = _copy_logs(tmp_path / "crlf", crlf=True)
    rep = build_report(
        run / "replica_0.log", run / "replica_1.log", lighthouse=[run / "lighthouse.log"],
        events=[RUN1 / "events.jsonl"],
    )
    a, b = rep.to_json(), build_report([RUN1]).to_json()
    for key in ("quorums", "failures", "recoveries", "degraded"):
        assert a[key] == b[key]
    assert a["parse"]["crlf"] > 0


def test_only_the_lighthouse_log(tmp_path):
    run = _copy_logs(tmp_path / "lh")
    j = build_report([], lighthouse=[run / "lighthouse.log"]).to_json()
    assert [q["quorum_id"] for q in j["quorums"]] == [1, 2, 3]
    assert [f["replica"] for f in j["failures"]] == ["1"]
    assert j["summary"]["requeues"] == 1  # the new uuid of replica 1 in quorum 3


def test_interleaved_processes_in_one_file(tmp_path):
    """Both replicas' output in one file, line by line interleaved: same story."""
    run = tmp_path / "mixed"
    run.mkdir()

    def records(name: str) -> list[tuple[bytes, bytes]]:
        """(time, a timestamped line + the untimestamped lines after it)."""
        out: list[tuple[bytes, bytes]] = []
        for line in gzip.decompress((RUN1 / name).read_bytes()).splitlines(keepends=True):
            if line[:2] == b"20" or not out:
                out.append((line[:23], line))
            else:
                out[-1] = (out[-1][0], out[-1][1] + line)
        return out

    merged = heapq.merge(records("replica_0.log.gz"), records("replica_1.log.gz"))
    (run / "both.out").write_bytes(b"".join(block for _, block in merged))
    shutil.copy(RUN1 / "lighthouse.log.gz", run)
    j = build_report([run]).to_json()
    assert [q["quorum_id"] for q in j["quorums"]] == [1, 2, 3]
    assert [(r["source_replica"], r["target_replica"], r["step"]) for r in j["recoveries"]] == [
        ("0", "1", 59)
    ]


def test_find_newest_run_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "events.jsonl"))
    runs = tmp_path / "torchft"
    with pytest.raises(UserError, match=f"no tft-\\* directory in {runs}"):
        find_run_files()
    old, new = runs / "tft-7", runs / "tft-12"
    for d in (old, new):
        d.mkdir(parents=True)
    shutil.copy(GUIDE / "tft-12_0.out", old / "tft-7_0.out")
    shutil.copy(GUIDE / "tft-12_0.out", new / "tft-12_0.out")
    (new / "tft-12_0.err").write_text("")
    (new / "notes.txt").write_text("not a log")
    os.utime(old, (1, 1))
    (tmp_path / "events.jsonl").write_text(
        '{"time": "2025-07-16T13:49:30", "action": "node-down", "replica": 1, "job": "12"}\n'
        '{"time": "2025-07-16T13:49:31", "action": "kill", "replica": 0, "job": "99"}\n'
    )
    files = find_run_files()
    assert files.job == "12"
    assert [p.name for p in files.replica_logs] == ["tft-12_0.err", "tft-12_0.out"]
    assert files.event_logs == [tmp_path / "events.jsonl"]
    j = build_report().to_json()
    # only job 12's event is kept; it never showed as a quorum change here
    assert [(f["replica"], f["kind"], f["time_source"]) for f in j["failures"]] == [
        ("1", "node-down", "injected-only")
    ]
    assert find_run_files([runs]).job == "12"  # the runs directory: its newest run
    (runs / "tft-12" / "tft-12_0.out").unlink()
    (runs / "tft-12" / "tft-12_0.err").unlink()
    with pytest.raises(UserError, match="no logs found in"):
        find_run_files([runs / "tft-12"])
    with pytest.raises(UserError, match="no such file or directory"):
        find_run_files([tmp_path / "nope"])


def test_plot_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = build_report([RUN1]).to_plot(tmp_path / "t.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_lanes_are_what_happened_to_each_replica():
    """What the PNG draws, from the recorded run: replica 1 trains until the kill, is up again
    from its new process start, recovers from its heal decision to its first healed step."""
    from ftslurm.report.render import hms, lanes

    got = {k: sorted((hms(a), hms(b), st) for a, b, st in v)
           for k, v in lanes(build_report([RUN1])).items()}
    assert got == {
        "0": [("08:50:53.956", "08:50:55.316", "alive"),
              ("08:50:55.316", "08:51:07.406", "training"),
              ("08:51:07.406", "08:51:19.640", "training"),
              ("08:51:19.640", "08:52:09.472", "training")],
        "1": [("08:50:53.988", "08:50:55.316", "alive"),
              ("08:50:55.316", "08:51:02.461", "training"),  # killed at 08:51:02.461
              ("08:51:18.397", "08:51:19.640", "alive"),  # the new process's start
              ("08:51:19.640", "08:52:09.472", "training"),
              ("08:51:19.641", "08:51:19.952", "recovering")],
    }  # fmt: skip


def _member(i: int, uuid: str, step: int) -> str:
    """A QuorumMember in the guide's exact shape (values changed, format not)."""
    return (
        f'QuorumMember {{ replica_id: "torchtitan_ft_{i}:{uuid}", '
        f'address: "http://worker-{i}:41093", '
        f'store_address: "worker-{i}.soperator-worker-svc.soperator.svc.cluster.local:33745", '
        f'step: {step}, world_size: 8, shrink_only: false, commit_failures: 0, data: "" }}'
    )


def _quorum(ts: str, qid: int, members: list[tuple[int, str, int]]) -> str:
    parts = ", ".join(_member(*m) for m in members)
    return (
        f"{ts} [INFO] [torchft::lighthouse] - Quorum! Quorum {{ quorum_id: {qid}, participants: "
        f"[{parts}], created: Some(Timestamp {{ seconds: 1752673709, nanos: 913262125 }}) }}"
    )


@pytest.mark.parametrize("restart_line", [True, False])
def test_three_replicas_two_failures_and_a_lighthouse_restart(tmp_path, restart_line):
    """Without its `listening on` line the restart shows as quorum ids counting again."""
    u = {k: f"{k}0000000-56d9-4bb9-96f6-544803cae49c" for k in ("a", "b", "c", "d", "e", "f")}
    lh = [
        _quorum("2025-07-16T10:00:00.000", 1, [(0, u["a"], 0), (1, u["b"], 0), (2, u["c"], 0)]),
        _quorum("2025-07-16T10:00:10.000", 1, [(0, u["a"], 29), (1, u["b"], 29), (2, u["c"], 29)]),
        "2025-07-16T10:00:15.000 [INFO] [torchft::lighthouse] - Detected quorum change, "
        "bumping quorum_id to 2",
        _quorum("2025-07-16T10:00:15.000", 2, [(0, u["a"], 30), (1, u["b"], 30)]),
        _quorum("2025-07-16T10:00:25.000", 3, [(0, u["a"], 40)]),
        _quorum("2025-07-16T10:00:40.000", 4, [(0, u["a"], 55), (2, u["d"], 0)]),
        "2025-07-16T10:00:41.000 [INFO] [torchft::lighthouse] - Lighthouse listening on: "
        "http://login-0:29510",  # log text only: no port is bound
        _quorum("2025-07-16T10:00:50.000", 1, [(0, u["a"], 70), (1, u["e"], 0), (2, u["d"], 70)]),
        _quorum("2025-07-16T10:01:10.000", 2, [(0, u["f"], 85), (1, u["e"], 85), (2, u["d"], 85)]),
        _quorum("2025-07-16T10:01:20.000", 2, [(0, u["f"], 90), (1, u["e"], 90), (2, u["d"], 90)]),
    ]
    if not restart_line:
        lh = [x for x in lh if "listening on" not in x]
    (tmp_path / "lighthouse.log").write_text("\n".join(lh) + "\n")
    j = build_report([tmp_path]).to_json()
    assert [(q["quorum_id"], q["lighthouse_epoch"]) for q in j["quorums"]] == [
        (1, 0), (2, 0), (3, 0), (4, 0), (1, 1), (2, 1)
    ]
    assert [(f["replica"], f["step"], f["kind"], f["time"]) for f in j["failures"]] == [
        ("2", 30, "left-quorum", "2025-07-16T10:00:15.000"),
        ("1", 40, "left-quorum", "2025-07-16T10:00:25.000"),
        ("0", 85, "restarted", "2025-07-16T10:01:10.000"),
    ]
    assert j["failures"][0]["last_seen_time"] == "2025-07-16T10:00:10.000"
    deg = [(d["replicas"], d["start_step"], d["end_step"], d["duration_s"]) for d in j["degraded"]]
    assert deg == [(2, 30, 40, 10.0), (1, 40, 55, 15.0), (2, 55, 70, 10.0)]
    assert [d["group_size"] for d in j["degraded"]] == [3, 3, 3]
    s = j["summary"]
    assert (s["quorum_changes"], s["failures"], s["requeues"], s["degraded_s"]) == (5, 3, 3, 35.0)


def _managed_log(tmp_path: Path, monkeypatch) -> Path:
    """The managed Lighthouse's log path, under tmp_path (its folder made)."""
    from ftslurm import lighthouse

    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(tmp_path / "lh"))
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "none.jsonl"))
    shared = lighthouse.log_path()
    shared.parent.mkdir(parents=True, exist_ok=True)
    return shared


def _replica_logs(run: Path) -> None:
    """The recorded run's two replica logs as `tft-<job>_<i>.out` in the run folder."""
    for i in (0, 1):
        (run / f"{run.name}_{i}.out").write_bytes(
            gzip.decompress((RUN1 / f"replica_{i}.log.gz").read_bytes())
        )


def test_managed_lighthouse_log_with_an_earlier_run_of_the_same_job(tmp_path, monkeypatch):
    """No Lighthouse log in the run dir: the managed Lighthouse's log (shared by every run) is
    read; an earlier run with the same replica names (other uuids) in it is not this run."""
    import re

    shared = _managed_log(tmp_path, monkeypatch)
    ours = gzip.decompress((RUN1 / "lighthouse.log.gz").read_bytes())
    earlier = re.sub(rb"\b[0-9a-f]{8}-", b"00000000-", ours.replace(b"T08:", b"T07:"))
    shared.write_bytes(earlier + ours)
    run = tmp_path / "torchft" / "tft-5"
    run.mkdir(parents=True)
    _replica_logs(run)
    files = find_run_files([run])
    assert files.lighthouse_logs == [shared] and files.shared_lighthouse
    j = build_report(run).to_json()
    assert [(q["quorum_id"], q["time"]) for q in j["quorums"]] == [
        (1, "2026-11-23T08:50:55.316"), (2, "2026-11-23T08:51:07.406"),
        (3, "2026-11-23T08:51:19.640"),
    ]
    # the earlier run's quorums 1-3 and both torchtitan_ft_0 quorums are not ours
    assert j["summary"]["foreign_quorums"] == 5
    assert [(f["replica"], f["time"]) for f in j["failures"]] == [
        ("1", "2026-11-23T08:51:07.406")
    ]
    assert j["summary"]["requeues"] == 1
    assert not [e for e in j["timeline"] if e["time"] < "2026-11-23T08:49"]


def test_managed_lighthouse_log_rotated_while_running(tmp_path, monkeypatch):
    """The managed Lighthouse renamed its log to .1 in the middle of the run (a line end):
    the report reads both, older first, and sees every quorum."""
    shared = _managed_log(tmp_path, monkeypatch)
    ours = gzip.decompress((RUN1 / "lighthouse.log.gz").read_bytes())
    cut = ours.index(b"\n", ours.index(b"quorum_id: 2,")) + 1  # after quorum 2's first line
    older = shared.with_name(shared.name + ".1")
    older.write_bytes(ours[:cut])
    shared.write_bytes(ours[cut:])
    run = tmp_path / "torchft" / "tft-6"
    run.mkdir(parents=True)
    _replica_logs(run)
    files = find_run_files([run])
    assert files.lighthouse_logs == [older, shared] and files.shared_lighthouse
    j = build_report(run).to_json()
    assert [q["quorum_id"] for q in j["quorums"]] == [1, 2, 3]
    assert [(f["replica"], f["time"]) for f in j["failures"]] == [
        ("1", "2026-11-23T08:51:07.406")
    ]


def test_logs_ending_while_degraded(tmp_path):
    """The recorded run cut at 08:51:15, before replica 1 came back: an open interval."""
    run = tmp_path / "cut"
    run.mkdir()
    for name in ("lighthouse", "replica_0", "replica_1"):
        out = []
        for line in gzip.decompress((RUN1 / f"{name}.log.gz").read_bytes()).splitlines(True):
            if line[:2] == b"20" and line[:19] >= b"2026-11-23T08:51:15":
                break
            out.append(line)
        (run / f"{name}.log").write_bytes(b"".join(out))
    j = build_report(run).to_json()
    [d] = j["degraded"]
    assert (d["start_step"], d["end_step"], d["open"]) == (22, 44, True)
    assert d["start_time"] == "2026-11-23T08:51:07.406"
    assert d["end_time"] == "2026-11-23T08:51:14.993"  # the last timestamped line of the logs
    assert j["recoveries"] == [] and j["summary"]["requeues"] == 0
    assert "1/2 replicas from step 22 to 44 (end of logs), 7.59 s" in build_report(run).to_text()


def test_project_slurm_run_tft_8():
    """A real job of this project's local Slurm cluster (torchtitan logs only, launcher lines
    before any replica id, a replica finishing while the other restarts)."""
    j = build_report(FIX / "slurm-tft-8").to_json()
    assert [(q["quorum_id"], q["time"], q["step"], q["participants"]) for q in j["quorums"]] == [
        (1, "2026-11-23T09:54:19.258", 0, ["0", "1"]),
        (2, "2026-11-23T09:54:58.759", 7, ["0"]),
        (3, "2026-11-23T09:55:14.960", 0, ["1"]),
    ]
    # replica 0 leaving quorum 3 is the end of its training, not a failure
    failures = [(f["replica"], f["step"], f["kind"]) for f in j["failures"]]
    assert failures == [("1", 7, "left-quorum")]
    atts = [(a["replica"], a["attempt"], a["source"], a["start_time"], a["uuid"][:8])
            for a in j["attempts"]]
    assert sorted(atts) == [
        ("0", 0, "launch", "2026-11-23T09:53:57.000", "3d01e2d6"),
        ("1", 0, "launch", "2026-11-23T09:53:57.000", "f7261ba2"),
        ("1", 1, "launch", "2026-11-23T09:55:00.000", "7822f48b"),
    ]
    s = j["summary"]
    assert (s["requeues"], s["recoveries"]) == (1, 0)
    assert s["steps_by_replica"] == {
        "0": {"attempted": 10, "committed": 10, "failed": 0},
        "1": {"attempted": 13, "committed": 13, "failed": 0},
    }
    texts = [e["text"] for e in j["timeline"]]
    assert "replica 0 finished training" in texts
    assert any("step back from 7" in t for t in texts)


def test_project_slurm_run_tft_11_two_node_downs():
    j = build_report(FIX / "slurm-tft-11").to_json()
    assert [(q["quorum_id"], q["time"], q["step"], q["participants"], q["lighthouse_epoch"])
            for q in j["quorums"]] == [
        (1, "2026-11-23T10:10:50.580", 0, ["0", "1"], 1),
        (2, "2026-11-23T10:11:04.571", 1, ["0"], 1),
        (3, "2026-11-23T10:11:37.828", 5, ["0", "1"], 1),
        (4, "2026-11-23T10:11:58.871", 7, ["0"], 1),
        (5, "2026-11-23T10:12:42.201", 11, ["0", "1"], 1),
    ]  # the earlier local run's quorums 1-3 (epoch 0) are in the log but not this run's
    assert j["summary"]["foreign_quorums"] == 3
    assert [(f["replica"], f["kind"], f["time"], f["step"], f["to_next_commit_s"])
            for f in j["failures"]] == [
        ("1", "node-down", "2026-11-23T10:10:59.612", 1, 4.988),
        ("1", "node-down", "2026-11-23T10:11:53.795", 7, 5.17),
    ]
    assert [(r["source_replica"], r["target_replica"], r["step"], r["requeue_source"],
             r["requeue_to_healed_s"]) for r in j["recoveries"]] == [
        ("0", "1", 5, "injected resume", 31.622),
        ("0", "1", 11, "injected resume", 40.088),
    ]
    assert [(d["start_step"], d["end_step"], d["duration_s"]) for d in j["degraded"]] == [
        (1, 5, 33.257), (7, 11, 43.33)
    ]
    assert [(a["replica"], a["attempt"], a["node"]) for a in j["attempts"]] == [
        ("0", 0, "worker-0"), ("1", 0, "worker-1"), ("1", 1, "worker-1"), ("1", 2, "worker-1")
    ]
    s = j["summary"]
    assert (s["requeues"], s["init_syncs"], s["steps_attempted"]) == (2, 1, 18)


def test_project_slurm_run_three_replicas_two_nodes_down():
    """A real 3-replica run: two different replicas lost in turn, each healed from replica 0
    while the other survivor trained on (figures read off the logs: fixture README)."""
    j = build_report(FIX / "slurm-3-replicas-tft-3").to_json()
    assert [(q["quorum_id"], q["time"], q["step"], q["participants"]) for q in j["quorums"]] == [
        (1, "2026-11-25T04:35:29.372", 0, ["0", "1", "2"]),
        (2, "2026-11-25T04:36:00.811", 2, ["0", "2"]),
        (3, "2026-11-25T04:36:27.208", 4, ["0", "1", "2"]),
        (4, "2026-11-25T04:37:08.463", 7, ["0", "1"]),
        (5, "2026-11-25T04:37:35.740", 9, ["0", "1", "2"]),
    ]
    # node DOWN (events.jsonl) -> replica 0's next should_commit=True: 04:36:00.894, 04:37:08.560
    assert [(f["replica"], f["kind"], f["time"], f["to_next_commit_s"]) for f in j["failures"]] == [
        ("1", "node-down", "2026-11-25T04:35:55.789", 5.105),
        ("2", "node-down", "2026-11-25T04:36:59.790", 8.77),
    ]
    # RESUME -> the healed replica's first commit: 04:36:27.754 (replica 1), 04:37:36.289 (2)
    assert [(r["source_replica"], r["target_replica"], r["step"], r["requeue_source"],
             r["requeue_to_healed_s"]) for r in j["recoveries"]] == [
        ("0", "1", 4, "injected resume", 26.959),
        ("0", "2", 9, "injected resume", 31.493),
    ]
    assert [(d["replicas"], d["group_size"], d["start_step"], d["end_step"], d["duration_s"])
            for d in j["degraded"]] == [(2, 3, 2, 4, 26.397), (2, 3, 7, 9, 27.277)]
    assert [(a["replica"], a["attempt"], a["node"]) for a in j["attempts"]] == [
        ("0", 0, "worker-0"), ("1", 0, "worker-1"), ("1", 1, "worker-1"),
        ("2", 0, "worker-2"), ("2", 1, "worker-2"),
    ]
    s = j["summary"]
    assert (s["group_size"], s["requeues"], s["init_syncs"], s["foreign_quorums"]) == (3, 2, 1, 0)
    assert s["steps_by_replica"] == {
        "0": {"attempted": 11, "committed": 11, "failed": 0},
        "1": {"attempted": 9, "committed": 9, "failed": 0},
        "2": {"attempted": 9, "committed": 9, "failed": 0},
    }



def test_three_replicas_without_any_quorum_line(tmp_path):
    """The 3-replica run without its Lighthouse log and with the Rust manager's INFO lines
    left out (RUST_LOG above info: no `got lighthouse quorum`, no `Manager listening on`): no
    quorum rank can be mapped, so each heal's source is the one replica that said `peers need
    recovery from us` at the step the target healed to. Before: `replica ? -> replica 1`."""
    run = tmp_path / "tft-3"
    run.mkdir()
    src = FIX / "slurm-3-replicas-tft-3"
    for f in sorted(src.glob("tft-3_*.out.gz")):
        lines = gzip.decompress(f.read_bytes()).splitlines(keepends=True)
        (run / f.name.removesuffix(".gz")).write_bytes(b"".join(
            x for x in lines if b" [INFO] [torchft::" not in x))
    shutil.copy(src / "events.jsonl", run)
    j = build_report(run).to_json()
    assert j["quorums"] == []
    assert [(r["source_replica"], r["source_id"][:24], r["target_replica"], r["step"],
             r["requeue_source"]) for r in j["recoveries"]] == [
        ("0", "torchtitan_ft_0:b5f383f5", "1", 4, "injected resume"),
        ("0", "torchtitan_ft_0:b5f383f5", "2", 9, "injected resume")]
    assert [(f["replica"], f["kind"], f["time_source"]) for f in j["failures"]] == [
        ("1", "node-down", "injected-only"), ("2", "node-down", "injected-only")]


@pytest.mark.unit
@pytest.mark.parametrize("run", ["slurm-spares-tft-3", "slurm-spares-demo-tft-1"])
def test_a_spares_heal_is_timed_from_its_claim_of_the_slot(run: str):
    """A warm spare's attempt starts at its claim, on another node: the resume of the failed
    node (injected after the claim) is no start of it. Timed from that resume, every heal came
    out negative, counted as 0 s with a clock warning each (10 on the 5-failure run)."""
    rep = build_report(FIX / run)
    healed = [r for r in rep.recoveries if r.after_failure]
    assert healed and all(r.requeue_source == "claim" for r in healed), healed
    assert all(r.requeue_to_healed_s is not None and r.requeue_to_healed_s > 0.3
               for r in healed), [r.requeue_to_healed_s for r in healed]  # fmt: skip
    assert not any("requeue" in c.where for c in rep.clock_back), rep.clock_back
