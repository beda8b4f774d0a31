"""One line -> one event, on lines copied verbatim from real logs (torchft's, the cluster
guide's excerpt, a torchft DDP run on CPU)."""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import pytest

from ftslurm import event_log as E
from ftslurm import logvocab as L
from ftslurm.report import reader as R

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "report"
GUIDE_LH = (FIX / "guide" / "lighthouse.log").read_bytes().splitlines()


def ts(s: str) -> float:
    return (datetime.fromisoformat(s) - datetime(1970, 1, 1)).total_seconds()


def test_parse_time_all_shapes():
    assert L.parse_time(b"2025-07-16T13:49:41.512 [INFO] [torchft::lighthouse] - x") == ts(
        "2025-07-16T13:49:41.512"
    )
    titan = b"[titan] 2025-07-16 13:49:32,462 - torchft.manager - INFO - x"
    assert L.parse_time(titan) == pytest.approx(ts("2025-07-16T13:49:32.462"))
    launch = b"[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on worker-0"
    assert L.parse_time(launch) == ts("2025-07-16T13:51:42")
    # zone-aware (the recorded trainer's own lines): moved onto the logs' clock by the offset
    z = b"2026-11-23T08:51:02.244Z replica=1 iter=21 step=21 committed=True"
    assert L.parse_time(z, utc_offset=3600) == pytest.approx(ts("2026-11-23T09:51:02.244"))
    assert L.parse_time(b"INFO:torchft.manager:[train_ddp_0:x/0 - step 1] y") is None
    assert L.parse_time(b"[W1123 08:50:55.312468856 reducer.cpp:1529] Warning") is None


def test_split_replica_id_any_prefix():
    assert L.split_replica_id("torchtitan_ft_1:5ea849a1-5cd7-40c6-a1e3-b307716c8088") == (
        "torchtitan_ft", 1, "5ea849a1-5cd7-40c6-a1e3-b307716c8088"
    )
    assert L.split_replica_id("train_ddp_0") == ("train_ddp", 0, None)
    assert L.split_replica_id("nounderscore") == ("nounderscore", None, None)


def test_guide_quorum_lines():
    evs = [L.parse_line(x) for x in GUIDE_LH]
    quorums = [e for e in evs if e is not None and e.kind == L.QUORUM]
    assert [q.quorum_id for q in quorums] == [2, 3, 4]
    q3 = quorums[1]
    assert q3.time == ts("2025-07-16T13:49:41.512")
    assert q3.members == (
        L.Member("torchtitan_ft_0:6cc4c926-56d9-4bb9-96f6-544803cae49c", 21, 1),
    )
    q4 = quorums[2]
    assert [(m.replica_id[:20], m.step) for m in q4.members] == [
        ("torchtitan_ft_0:6cc4", 142), ("torchtitan_ft_1:5ea8", 0)
    ]
    # "Detected quorum change, bumping quorum_id to 3" is not a quorum by itself
    assert evs[1] is None


def test_real_quorum_with_reconfigure_handles():
    with gzip.open(FIX / "cpu-run1" / "lighthouse.log.gz") as fh:
        line = [x for x in fh if b"Quorum! Quorum { quorum_id: 3" in x][0]
    ev = L.parse_line(line)
    assert ev is not None and ev.quorum_id == 3
    assert [(m.replica_id, m.step) for m in ev.members] == [
        ("train_ddp_0:59ccd9f9-4dfa-412b-bc27-2cb6e4b1cf37", 59),
        ("train_ddp_1:5c0a26c2-577c-439f-9d62-4c36d6037a9c", 0),
    ]


def test_truncated_quorum_is_not_a_quorum():
    line = GUIDE_LH[-1]
    assert L.parse_line(line) is not None
    cut = line[: line.index(b"QuorumMember", 200) + 30]  # second member cut off
    assert L.parse_line(cut) is None


def test_manager_lines_titan_and_bare():
    ev = L.parse_line(
        b"[titan] 2025-07-16 13:49:32,462 - torchft.manager - INFO - [torchtitan_ft_0:"
        b"6cc4c926-56d9-4bb9-96f6-544803cae49c/0 - step 21] should_commit=False "
        b"enough_replicas=True, errored=aborted"
    )
    assert (ev.kind, ev.replica[:18], ev.rank, ev.step, ev.ok, ev.detail) == (
        L.COMMIT, "torchtitan_ft_0:6c", 0, 21, False, "aborted"
    )
    ev = L.parse_line(
        b"[titan] 2025-07-16 13:52:26,769 - torchft.manager - INFO - [torchtitan_ft_0:"
        b"6cc4c926-56d9-4bb9-96f6-544803cae49c/1 - step 142] peers need recovery from us [1]"
    )
    assert (ev.kind, ev.rank, ev.step, ev.ranks) == (L.PEERS_RECOVER, 1, 142, (1,))
    bare = (
        b"INFO:torchft.manager:[train_ddp_1:5c0a26c2-577c-439f-9d62-4c36d6037a9c/0 - step 0] "
        b"fetching checkpoint from recover_src_replica_rank=0 with checkpoint_metadata='<n/a>'"
    )
    ev = L.parse_line(bare)
    assert (ev.kind, ev.time, ev.ranks) == (L.HEAL_FETCH, None, (0,))
    ev = L.parse_line(
        b"INFO:torchft.manager:[train_ddp_1:5c0a26c2-577c-439f-9d62-4c36d6037a9c/0 - step 0] "
        b"healing required, fetching checkpoint metadata from "
        b"recover_src_manager_address='http://vm:45223' max_step=59"
    )
    assert (ev.kind, ev.step) == (L.HEAL_REQUIRED, 59)
    ev = L.parse_line(
        b"INFO:torchft.manager:[train_ddp_1:5c0a26c2-577c-439f-9d62-4c36d6037a9c/0 - step 59] "
        b"Loaded state dict."
    )
    assert (ev.kind, ev.step) == (L.HEALED, 59)


def test_rust_and_launcher_lines():
    ev = L.parse_line(
        b"2026-11-23T08:51:19.641 [INFO] [torchft::manager] - [Replica train_ddp_1] healing is "
        b"required step=0, max_step=59, recover_src_replica_rank=0"
    )
    assert (ev.kind, ev.replica, ev.step, ev.ranks) == (L.HEAL_REQUIRED, "train_ddp_1", 59, (0,))
    ev = L.parse_line(
        b"2026-11-23T08:50:53.956 [INFO] [torchft::manager] - [Replica train_ddp_0] Manager "
        b"listening on http://vm:45223"
    )
    assert (ev.kind, ev.replica, ev.detail) == (L.MANAGER_START, "train_ddp_0", "http://vm:45223")
    ev = L.parse_line(b"[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on worker-0")
    assert (ev.kind, ev.replica, ev.rank, ev.node) == (L.LAUNCH, "1", 1, "worker-0")


def test_titan_step_line_with_ansi():
    line = (
        b"[titan] 2026-11-23 08:54:46,955 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss:  "
        b"8.09969  \x1b[38;2;180;60;0mgrad_norm:  0.3656  \x1b[38;2;54;234;195mmemory: "
        b"-0.00GiB(-0.00%)  \x1b[34mtps: 68  \x1b[36mtflops: 0.00  \x1b[35mmfu: 0.00%\x1b[39m"
    )
    ev = L.parse_line(line)
    assert (ev.kind, ev.step, ev.detail) == (L.TITAN_STEP, 1, "8.09969")


def test_unknown_lines_are_none():
    for line in (
        b"NoneType: None",
        b"INFO:torchft_commits:",
        b"2026-11-23T08:50:55.128 [INFO] [torchft::lighthouse] - Quorum status: New quorum not "
        b"ready, only have 1 participants, need at least half of 2 healthy workers",
        b"\xff\xfe\x00garbage",
        b"",
    ):
        assert L.parse_line(line) is None


def test_file_reader_inherits_time_and_dedupes_ranks(tmp_path):
    log = tmp_path / "r.out"
    log.write_bytes(
        b"2026-11-23T08:51:07.703 [INFO] [torchft::manager] - [Replica train_ddp_0] "
        b"should_commit completed should_commit=true\r\n"
        b"INFO:torchft.manager:[train_ddp_0:aa/0 - step 22] should_commit=True "
        b"enough_replicas=True, errored=None\r\n"
        b"INFO:torchft.manager:[train_ddp_0:aa/1 - step 22] should_commit=True "
        b"enough_replicas=True, errored=None\r\n"
        b"INFO:torchft.manager:[train_ddp_0:aa/0 - step 23] should_commit=False "
        b"enough_replicas=True, errored=aborted\r\n"
    )
    st = R.ParseStats()
    evs = list(R.iter_file_events(log, st))
    assert [(e.kind, e.step, e.ok) for e in evs] == [(L.COMMIT, 22, True), (L.COMMIT, 23, False)]
    assert evs[0].time == ts("2026-11-23T08:51:07.703")  # taken from the Rust line above
    c = st.commits[b"train_ddp_0:aa"]
    assert (c.attempted, c.committed) == (2, 1)
    assert (st.lines, st.crlf) == (4, 2)


def test_missing_file_and_overlong_line(tmp_path):
    st = R.ParseStats()
    assert list(R.iter_file_events(tmp_path / "nope.out", st)) == []
    assert st.missing == [str(tmp_path / "nope.out")]
    big = tmp_path / "junk.out"
    big.write_bytes(b"x" * (R.MAX_LINE + R.CHUNK) + b"\n" + GUIDE_LH[0] + b"\n")
    st = R.ParseStats()
    evs = list(R.iter_file_events(big, st))
    assert st.overlong == 1 and [e.quorum_id for e in evs] == [2]


def test_event_log_schema():
    ev = E.parse_event_line(
        '{"time": "2026-11-23T08:51:02.461+00:00", "action": "kill", "replica": "1", '
        '"node": "vm", "job": 12}'
    )
    assert ev == E.InjectedEvent("2026-11-23T08:51:02.461+00:00", "kill", 1, "vm", "12")
    assert E.parse_event_line(ev.to_json_line()) == ev
    for bad in ("", "[]", "{}", '{"time": "yesterday", "action": "kill"}', "\xff", "nan"):
        assert E.parse_event_line(bad) is None
    base = '{"time": "2026-11-23T08:51:02.461+00:00", "action": "kill", "replica": '
    for odd in ('"' + "9" * 5000 + '"', '"\u00b2"', '"\u0663"', "true"):  # too long, not ASCII
        assert E.parse_event_line(base + odd + "}").replica is None, odd
    assert E.to_seconds("2026-11-23T08:51:02.461Z", 0.0) == ts("2026-11-23T08:51:02.461")
    assert E.to_seconds("2026-11-23T10:51:02+02:00", 0.0) == ts("2026-11-23T08:51:02")
    assert E.to_seconds("2026-11-23T08:51:02", 999.0) == ts("2026-11-23T08:51:02")  # naive


def test_corrupt_gzip_is_counted_not_raised(tmp_path):
    good = (FIX / "cpu-run1" / "replica_0.log.gz").read_bytes()
    bad = tmp_path / "replica_0.log.gz"
    bad.write_bytes(good[: len(good) // 2])  # truncated archive
    st = R.ParseStats()
    evs = list(R.iter_file_events(bad, st))
    assert st.read_errors == 1 and st.missing == []
    assert evs and evs[0].kind == L.MANAGER_START  # what was readable is kept
    junk = tmp_path / "junk.log.gz"
    junk.write_bytes(b"not gzip at all")
    st = R.ParseStats()
    assert list(R.iter_file_events(junk, st)) == []
    # there, but not readable as what its name says: unreadable with the reason, not missing
    assert st.missing == [] and [f for f, _ in st.unreadable] == [str(junk)]
    assert "gzip" in st.unreadable[0][1].lower()
    # gzip's magic and nothing more (found by the fuzz test): EOFError inside the header
    cut = tmp_path / "tft-3_0.out"
    cut.write_bytes(b"\x1f\x8b\n")
    st = R.ParseStats()
    assert list(R.iter_file_events(cut, st)) == [] and [f for f, _ in st.unreadable] == [str(cut)]


def test_torchtitan_heal_excerpt(tmp_path):
    """A restarted torchtitan replica's log (CPU run), verbatim."""
    log = tmp_path / "tft-1_1.out"
    log.write_text(
        "[titan] 2026-11-23 08:43:04,231 - root - INFO - Loading the FT checkpoint at step 13.\n"
        "2026-11-23T08:43:06.127 [INFO] [torchft::manager] - [Replica torchtitan_ft_1] healing "
        "is required step=0, max_step=26, recover_src_replica_rank=0\n"
        "[titan] 2026-11-23 08:43:06,163 - torchft.manager - INFO - [torchtitan_ft_1:dc2d02b2-"
        ".../0 - step 0] healing required, fetching checkpoint metadata from "
        "recover_src_manager_address='http://vm:29700' max_step=26\n"
        "[titan] 2026-11-23 08:43:06,320 - torchft.checkpointing.http_transport - INFO - "
        "fetching checkpoint from http://vm:33399/checkpoint/26/full took 0.15440351000006558s\n"
        "[titan] 2026-11-23 08:43:06,487 - torchft.manager - INFO - [torchtitan_ft_1:dc2d02b2-"
        ".../0 - step 26] Loaded state dict.\n"
        "[titan] 2026-11-23 08:43:06,488 - torchft.manager - INFO - [torchtitan_ft_1:dc2d02b2-"
        ".../0 - step 26] should_commit=True enough_replicas=True, errored=None\n"
    )
    st = R.ParseStats()
    evs = [(e.kind, e.step, e.time) for e in R.iter_file_events(log, st)]
    assert evs == [
        (L.HEAL_REQUIRED, 26, ts("2026-11-23T08:43:06.163")),
        (L.HEALED, 26, ts("2026-11-23T08:43:06.487")),
        (L.COMMIT, 26, ts("2026-11-23T08:43:06.488")),
    ]
    assert (st.lines, st.skipped) == (6, 3)


def test_append_event_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("FTSLURM_EVENTS", str(tmp_path / "sub" / "events.jsonl"))
    first = E.InjectedEvent(E.now_iso(), "node-down", 1, "worker-0", "12", "scontrol DOWN")
    path = E.append_event(first)
    E.append_event(E.InjectedEvent(E.now_iso(), "resume", 1, "worker-0", "12"))
    assert path == tmp_path / "sub" / "events.jsonl"
    got = [E.parse_event_line(x) for x in path.read_text().splitlines()]
    assert got[0] == first and [g.action for g in got] == ["node-down", "resume"]
    assert "+" in first.time or "-" in first.time[10:]  # zone-aware


def _scan_all(path: Path, **kw) -> tuple[list[tuple], dict]:
    st = R.ParseStats()
    evs = [
        (e.kind, e.time, e.replica, e.step, e.rank, e.quorum_id, e.members, e.ranks, e.ok,
         e.detail, e.seq, e.prev_round_time, e.node)
        for e in R.iter_file_events(path, st, **kw)
    ]
    counts = {
        k.decode(): (c.attempted, c.committed, c.max_step, sorted(c.recent.items()))
        for k, c in st.commits.items()
    }
    return evs, {
        "commits": counts, "lines": st.lines, "matched": st.matched, "skipped": st.skipped,
        "malformed": st.malformed, "crlf": st.crlf, "untimed": st.untimed, "bytes": st.bytes,
        "spans": st.spans,
    }


def _messy_log(tmp_path: Path) -> Path:
    """Two real replica logs interleaved line by line into one file (as two processes writing
    one file would), with a second rank's copy of some commits, CRLF endings, cut lines and
    a final line without its newline; repeated so the file spans several chunks."""
    a = gzip.decompress((FIX / "cpu-run1" / "replica_0.log.gz").read_bytes()).splitlines(True)
    b = gzip.decompress((FIX / "cpu-run1" / "replica_1.log.gz").read_bytes()).splitlines(True)
    out: list[bytes] = []
    for i in range(max(len(a), len(b))):
        for src in (a, b) if i % 3 else (b, a):
            if i < len(src):
                line = src[i]
                if b"should_commit=True" in line and i % 2:
                    out.append(line.replace(b"/0 - step", b"/1 - step"))
                if i % 17 == 0:
                    line = line.rstrip(b"\n") + b"\r\n"
                if i % 101 == 0:
                    line = line[: len(line) // 2] + b"\n"
                out.append(line)
    body = b"".join(out)
    path = tmp_path / "tft-9_0.out"
    path.write_bytes(body * (3 * R.CHUNK // len(body) + 1) + b"[x - step 5] should_commit=True")
    return path


@pytest.mark.parametrize(
    "name", ["cpu-run1/replica_0.log.gz", "cpu-run1/lighthouse.log.gz",
             "slurm-tft-11/tft-11_0.out.gz", "slurm-tft-8/tft-8_1.out.gz", "messy"],
)
def test_bulk_counting_equals_line_by_line(name, tmp_path, monkeypatch):
    """The fast path (runs of committed steps counted from one regex, repeated quorum rounds
    from one findall) gives exactly what reading every marker line by line gives."""
    path = _messy_log(tmp_path) if name == "messy" else FIX / name
    for kw in ({}, {"quorums": False}, {"lighthouse": True}):
        fast = _scan_all(path, **kw)
        monkeypatch.setattr(R, "_BULK", False)
        slow = _scan_all(path, **kw)
        monkeypatch.setattr(R, "_BULK", True)
        assert fast == slow
    evs, stats = _scan_all(path, lighthouse=name.endswith("lighthouse.log.gz"))
    assert evs and stats["matched"] > len(evs)  # markers counted in bulk, not only events


def test_gzip_is_known_by_its_bytes_not_only_its_name(tmp_path):
    """`gzip tft-12_0.out` renamed back, or an archive without .gz: still read; the Lighthouse
    log's clock offset is found in a gzipped log too."""
    from ftslurm.report.sources import clock_offset

    gz = FIX / "cpu-run1" / "replica_0.log.gz"
    plain = tmp_path / "replica_0.log"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    renamed = tmp_path / "replica_0.out"
    renamed.write_bytes(gz.read_bytes())
    want = [(e.kind, e.time) for e in R.iter_file_events(plain, R.ParseStats())]
    st = R.ParseStats()
    assert [(e.kind, e.time) for e in R.iter_file_events(renamed, st)] == want and want
    assert st.read_errors == 0 and st.missing == []
    # the recorded Lighthouse log with its clock an hour ahead of UTC (as on a UTC+1 host)
    text = gzip.decompress((FIX / "cpu-run1" / "lighthouse.log.gz").read_bytes()).decode()
    ahead = "\n".join("2026-11-23T09" + ln[13:] if ln.startswith("2026-11-23T08") else ln
                      for ln in text.splitlines())  # fmt: skip
    lh_plain, lh_gz = tmp_path / "lighthouse.log", tmp_path / "lighthouse-archived"
    lh_plain.write_text(ahead)
    lh_gz.write_bytes(gzip.compress(ahead.encode()))
    assert clock_offset([lh_plain]) == clock_offset([lh_gz]) == 3600.0
