"""The report across nodes whose clocks disagree, and over logs whose times or text cannot be
trusted.

The acceptance test (`test_skewed_clocks_tell_the_same_story`) takes the recorded 3-replica
run (tests/fixtures/report/slurm-3-replicas-tft-3: replicas 1 and 2 each lost and healed
from replica 0), moves one replica log's clock by -3 s and another's by +3 s, in every
timestamp shape of a replica log (`[titan] 2026-11-25 04:35:29,376`, the Rust manager's
`2026-11-25T04:35:29.374`, the launcher's `[2026-11-25 04:34:56]`), for each of the six ways
to pick the two replicas. Those put the survivor's `peers need recovery from us` line before
the target's `healing required` line for some heals and after it for others
(`test_the_shifts_swap_the_heal_lines`), and the report must tell the same story as the
unshifted run: see `_story` for what "the same" is, and `_within_skew` for what may move.
It does so twice: with the run's Lighthouse log (quorums and degraded intervals on the
Lighthouse's clock, not shifted), and without it (quorums read from the managers' own `got
lighthouse quorum` lines, each on its replica's shifted clock).
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ftslurm import logvocab as L
from ftslurm.report import build_report
from ftslurm.report.reader import ParseStats
from ftslurm.report.timeline import _Builder

FIX = Path(__file__).parent / "fixtures" / "report"
RUN3 = FIX / "slurm-3-replicas-tft-3"
GUIDE = FIX / "guide"

# reports of recorded runs must not pick up the checkout's own Lighthouse or failure log
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]

SKEW_S = 3.0
# replica index -> clock shift (s): one replica -3 s, another +3 s, the third as recorded
SHIFTS = [{a: -SKEW_S, b: SKEW_S} for a, b in itertools.permutations(range(3), 2)]

_STAMP = re.compile(rb"^(\[titan\] |\[)?(\d{4}-\d\d-\d\d)([T ])(\d\d:\d\d:\d\d)(?:([.,])(\d{3}))?")


def _shift_line(line: bytes, seconds: float) -> bytes:
    """The line with its leading timestamp (titan, Rust or launcher shape) moved."""
    m = _STAMP.match(line)
    if not m:
        return line
    pre, day, sep, hms, dot, ms = (g.decode() if g else "" for g in m.groups())
    t = datetime.fromisoformat(f"{day} {hms}") + timedelta(
        seconds=seconds, milliseconds=int(ms or 0))
    stamp = f"{pre}{t:%Y-%m-%d}{sep}{t:%H:%M:%S}" + (f"{dot}{t.microsecond // 1000:03d}"
                                                    if dot else "")
    return stamp.encode() + line[m.end():]


def _run_copy(dst: Path, shifts: dict[int, float] | None = None, edit=None) -> Path:
    """The recorded run, uncompressed, replica i's clock moved by shifts[i] seconds;
    `edit(name, lines) -> lines` may change any file's lines (as bytes, with their ends)."""
    run = dst / "tft-3"
    run.mkdir(parents=True)
    for f in sorted(RUN3.iterdir()):
        if f.suffix == ".md":
            continue
        data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
        name = f.name.removesuffix(".gz")
        lines = data.splitlines(keepends=True)
        m = re.match(r"tft-3_(\d)\.out$", name)
        if m and shifts and shifts.get(int(m.group(1))):
            lines = [_shift_line(x, shifts[int(m.group(1))]) for x in lines]
        if edit is not None:
            lines = edit(name, lines)
        if lines is not None:  # None: the file is left out
            (run / name).write_bytes(b"".join(lines))
    return run


def _story(j: dict, lighthouse: bool = True) -> dict:
    """What must not depend on the nodes' clocks. The same:
    - counts: quorum changes, failures, requeues, recoveries, commit failures, initial syncs,
      degraded intervals and their steps, steps attempted/committed per replica;
    - each failure: replica (index and full id), kind, step, time and its source (injected:
      the event log's clock), the quorum that showed it, the step its survivors committed next;
    - each recovery: source replica (index and full id), target (index and full id), step, and
      the restart it is measured from (the injected resume: the event log's clock);
    - each degraded interval: replicas, group size, first and last step, open or not, and its
      start and end when they are the Lighthouse's (its clock is not shifted here);
    - the quorums: id, step, members, and their time when it is the Lighthouse's.
    Without the Lighthouse's log, quorum times are read off the replicas' clocks: see
    `_within_skew`."""
    s = j["summary"]
    clocked = (lambda t: t) if lighthouse else (lambda t: None)
    return {
        "counts": {k: s[k] for k in (
            "quorum_changes", "failures", "requeues", "recoveries", "commit_failures",
            "init_syncs", "degraded_intervals", "degraded_steps", "steps_attempted",
            "steps_committed", "steps_by_replica", "group_size")},
        "failures": [(f["replica"], f["replica_id"], f["kind"], f["step"], f["time"],
                      f["time_source"], f["quorum_id"], f["next_commit_step"])
                     for f in j["failures"]],
        "recoveries": [(r["source_replica"], r["source_id"], r["target_replica"],
                        r["target_id"], r["step"], r["requeue_source"], r["requeue_time"])
                       for r in j["recoveries"]],
        "degraded": [(d["replicas"], d["group_size"], d["start_step"], d["end_step"], d["open"],
                      clocked(d["start_time"]), clocked(d["end_time"])) for d in j["degraded"]],
        "quorums": [(q["quorum_id"], clocked(q["time"]), q["step"], q["participants"])
                    for q in j["quorums"]],
    }


def _seconds(iso: str | None) -> float | None:
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


def _within_skew(a: dict, b: dict, skew: float) -> None:
    """What may move, by at most the skew: times read off a shifted replica log (a recovery's
    time and healed time, a survivor's next commit; without the Lighthouse's log also the
    quorums' times and the degraded intervals' ends) and the durations measured to them from
    an unshifted clock (requeue -> healed, failure -> next commit). A degraded interval's
    duration may move by twice the skew: its start and end may be read off two clocks
    shifted opposite ways. Which survivor committed first may change: two survivors commit
    the same step at nearly the same moment, and their clocks decide which reads earlier."""
    tol = skew + 0.002
    for ra, rb in zip(a["recoveries"], b["recoveries"], strict=True):
        for k in ("time", "healed_time"):
            assert abs(_seconds(ra[k]) - _seconds(rb[k])) <= tol, k
        for k in ("requeue_to_healed_s", "requeue_to_quorum_s"):
            assert abs(ra[k] - rb[k]) <= tol, k
    for fa, fb in zip(a["failures"], b["failures"], strict=True):
        assert abs(_seconds(fa["next_commit_time"]) - _seconds(fb["next_commit_time"])) <= tol
        assert abs(fa["to_next_commit_s"] - fb["to_next_commit_s"]) <= tol
    for da, db in zip(a["degraded"], b["degraded"], strict=True):
        for k in ("start_time", "end_time"):
            assert abs(_seconds(da[k]) - _seconds(db[k])) <= tol, k
        assert abs(da["duration_s"] - db["duration_s"]) <= 2 * tol
    for qa, qb in zip(a["quorums"], b["quorums"], strict=True):
        assert abs(_seconds(qa["time"]) - _seconds(qb["time"])) <= tol


def _healed_once(text: str) -> list[str]:
    """The targets listed under `requeue -> first healed step`, in order."""
    part = text.split("  requeue -> first healed step\n", 1)[1].split("\n  steps committed", 1)[0]
    return re.findall(r"^    replica (\d+) healed at step", part, re.M)


BASE = build_report(RUN3)


def test_unshifted_copy_is_the_recorded_run(tmp_path):
    """The copy (uncompressed, shifted by 0) gives the figures test_report_timeline checks."""
    j = build_report(_run_copy(tmp_path, {0: 0.0})).to_json()
    assert _story(j) == _story(BASE.to_json())
    assert [(r["source_replica"], r["target_replica"], r["step"]) for r in j["recoveries"]] == [
        ("0", "1", 4), ("0", "2", 9)]


def _without_lighthouse(name: str, lines: list[bytes]) -> list[bytes] | None:
    return None if name.startswith("lighthouse") else lines


@pytest.mark.parametrize("lighthouse", [True, False], ids=["lighthouse", "replica-logs-only"])
@pytest.mark.parametrize("shifts", SHIFTS, ids=lambda s: ",".join(f"r{k}{v:+.0f}s"
                                                                    for k, v in s.items()))
def test_skewed_clocks_tell_the_same_story(tmp_path, shifts, lighthouse):
    """Failed before the fix, with the Lighthouse's log: a survivor 3 s behind said `peers
    need recovery from us [1]` before the Lighthouse's new quorum was read, its rank was
    mapped in the old quorum, and a third recovery (`replica 0 -> replica 2 at step 4`)
    appeared, listed twice under `requeue -> first healed step`; a target 3 s behind was
    launched `before` its resume, which then was not its restart time."""
    edit = None if lighthouse else _without_lighthouse
    base_rep = BASE if lighthouse else build_report(_run_copy(tmp_path / "base", edit=edit))
    rep = build_report(_run_copy(tmp_path, shifts, edit=edit))
    j, base = rep.to_json(), base_rep.to_json()
    assert _story(j, lighthouse) == _story(base, lighthouse)
    _within_skew(j, base, SKEW_S)
    assert _healed_once(rep.to_text()) == ["1", "2"]


def _heal_line_times(run: Path) -> dict[int, dict[str, float]]:
    """step -> {"survivor": time of `peers need recovery from us`, "target": time of
    `healing required`}, read off the (shifted) logs."""
    out: dict[int, dict[str, float]] = {}
    for f in sorted(run.glob("tft-3_*.out")):
        for line in f.read_bytes().splitlines():
            m = re.match(rb"\[titan\] (\S+ \S+),(\d{3}) .*- step (\d+)\] (peers need recovery"
                         rb"|healing required.*max_step=(\d+))", line)
            if not m or (m.group(5) or m.group(3)) in (b"0",):
                continue
            t = datetime.fromisoformat(m.group(1).decode()).timestamp() + int(m.group(2)) / 1e3
            side = "survivor" if m.group(4).startswith(b"peers") else "target"
            out.setdefault(int(m.group(5) or m.group(3)), {})[side] = t
    return out


def test_the_shifts_swap_the_heal_lines(tmp_path):
    """Across SHIFTS each heal's two lines come in both orders (recorded: target first)."""
    orders: dict[int, set[str]] = {}
    for i, shifts in enumerate(SHIFTS):
        times = _heal_line_times(_run_copy(tmp_path / str(i), shifts))
        assert sorted(times) == [4, 9]
        for step, t in times.items():
            orders.setdefault(step, set()).add(
                "survivor first" if t["survivor"] < t["target"] else "target first")
    assert orders == {4: {"survivor first", "target first"}, 9: {"survivor first", "target first"}}


def test_a_heal_is_one_recovery_whatever_the_skew(tmp_path):
    """Clocks minutes apart (replica 0 two minutes behind, 1 ahead, 2 behind): one recovery
    per heal, from the right source, each listed once. Failed before the fix (the survivor's
    ranks read in whatever quorum was current when its line came). Attempts are matched to
    launch lines by time, so requeue times are not compared at this skew."""
    rep = build_report(_run_copy(tmp_path, {0: -120.0, 1: 90.0, 2: -45.0}))
    j = rep.to_json()
    keys = ("source_replica", "source_id", "target_replica", "target_id", "step")
    # listed in time order: replica 2's heal (its clock behind) now comes first
    assert sorted(tuple(r[k] for k in keys) for r in j["recoveries"]) == [
        tuple(r[k] for k in keys) for r in BASE.to_json()["recoveries"]]
    assert _healed_once(rep.to_text()) == ["2", "1"]
    assert j["summary"]["requeues"] == 2


def test_the_target_names_its_source_by_manager_address():
    """Only the target's `healing required, fetching checkpoint metadata from
    recover_src_manager_address=...` line, read before the quorum it heals in (its clock
    behind): the source is the replica whose `Manager listening on` gave that address. The
    address is the event's detail (what the log vocabulary is to give; the reader of today
    does not keep it). Failed before the fix: source `?`."""
    a = "torchtitan_ft_0:b5f383f5-07a5-4a1d-b661-e3e6ffc88a8c"
    b = "torchtitan_ft_1:f1f9d324-3158-4345-a643-6d7137bfa6e4"
    events = [
        L.Event(L.MANAGER_START, 10.0, "torchtitan_ft_0", detail="http://worker-0:35471"),
        L.Event(L.MANAGER_START, 11.0, "torchtitan_ft_1", detail="http://worker-1:41055"),
        L.Event(L.HEAL_REQUIRED, 20.0, b, 4, 0, detail="http://worker-0:35471"),
        L.Event(L.QUORUM, 25.0, quorum_id=3, members=(L.Member(b, 0), L.Member(a, 4))),
    ]
    builder = _Builder(None, None)
    for ev in events:
        builder.feed(ev)
    [r] = builder.finish(ParseStats()).recoveries
    assert (r.source_replica, r.source_id, r.target_replica, r.target_id, r.step) == (
        "torchtitan_ft_0", a, "torchtitan_ft_1", b, 4)


# ---------------------------------------------------------------- times that cannot be right


def test_implausible_dates_are_malformed_not_durations(tmp_path):
    """A 1970 launcher line, a 1970 commit line and a last line dated 9999: counted as
    malformed and not used for any duration; the run ends with the other logs' last lines
    (04:37:51.008, where replica 0's ignored line said 04:37:51.078). Failed before the fix:
    the run lasted `69890783 h`."""
    def edit(name: str, lines: list[bytes]) -> list[bytes]:
        def redate(pick: bytes, year: bytes) -> None:
            i = next(i for i, x in enumerate(lines) if pick in x)
            lines[i] = re.sub(rb"2026-11-25", year, lines[i], count=1)
        if name == "tft-3_1.out":
            redate(b"launching replica 1 (attempt 0)", b"1970-01-01")
        if name == "tft-3_2.out":
            redate(b"step 2] should_commit=True", b"1970-01-01")
        if name == "tft-3_0.out":
            redate(b"04:37:51,078", b"9999-12-31")
        return lines

    rep = build_report(_run_copy(tmp_path, edit=edit))
    j, base = rep.to_json(), BASE.to_json()
    assert _story(j) == _story(base)
    s = j["summary"]
    assert (s["start_time"], s["end_time"], s["duration_s"]) == (
        "2026-11-25T04:34:56.000", "2026-11-25T04:37:51.008", 175.008)
    assert j["parse"]["malformed"] == base["parse"]["malformed"] + 3
    assert j["parse"]["implausible_times"] == 3
    text = rep.to_text()
    assert "2026-11-25T04:34:56.000 -> 04:37:51.008 (2 m 55 s)" in text
    assert "3 malformed (3 of them implausible times)" in text
    # the 1970 launcher line keeps its place: replica 1's first attempt, then its restart
    assert [(a["replica"], a["attempt"]) for a in j["attempts"]][:3] == [
        ("0", 0), ("1", 0), ("1", 1)]


def test_a_clock_set_back_gives_no_negative_duration(tmp_path):
    """The Lighthouse's clock set back 30 s just before quorum 3: the first degraded interval
    (quorum 2 -> 3) would last -3.60 s. It counts 0 s, and the text says the clock went back.
    Failed before the fix: `26.40 s` became `-3.60 s`. (Replica 2's node-down, injected 21 s
    after the Lighthouse's set-back clock says its quorum change came, is then no longer
    matched to it: both are listed, and a duration that is not known is n/a, not negative.)"""
    def edit(name: str, lines: list[bytes]) -> list[bytes]:
        if not name.startswith("lighthouse"):
            return lines
        cut = next(i for i, x in enumerate(lines) if b"bumping quorum_id to 3" in x)
        return lines[:cut] + [_shift_line(x, -30.0) for x in lines[cut:]]

    rep = build_report(_run_copy(tmp_path, edit=edit))
    j = rep.to_json()
    assert [(d["start_step"], d["end_step"], d["duration_s"]) for d in j["degraded"]] == [
        (2, 4, 0.0), (7, 9, 27.277)]
    durations = [d["duration_s"] for d in j["degraded"]] + [
        f["to_next_commit_s"] for f in j["failures"]] + [
        r[k] for r in j["recoveries"] for k in ("requeue_to_healed_s", "requeue_to_quorum_s")]
    assert all(x >= 0 for x in durations if x is not None), durations
    assert [r["requeue_source"] for r in j["recoveries"]] == ["injected resume"] * 2
    back = [(c["where"], c["time"], c["back_s"], c["in_file"]) for c in j["parse"]["clock_back"]]
    assert ("lighthouse.log", "2026-11-25T04:36:00.811", 3.603, True) in back
    assert ("degraded from step 2", "2026-11-25T04:36:00.811", 3.603, False) in back
    text = rep.to_text()
    assert "2/3 replicas from step 2 to 4, 0.00 s (04:36:00.811 -> 04:35:57.208)" in text
    assert "Clock: lighthouse.log went back 3.60 s after 04:36:00.811" in text
    assert "Clock: degraded from step 2 came out 3.60 s negative" in text
    assert not re.search(r"(?<![\d:T])-\d+(\.\d+)? [smh]\b", text)


def test_a_shared_lighthouse_log_of_months_is_not_implausible(tmp_path, monkeypatch):
    """The managed Lighthouse's log, shared by every run, holds 30 earlier runs, 120 to 91
    days before this one (more events than this run's): its times are not this run's and are
    not implausible; this run's figures are those of its own Lighthouse log."""
    run1 = FIX / "cpu-run1"
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(tmp_path / "lh"))
    from ftslurm import lighthouse

    shared = lighthouse.log_path()
    shared.parent.mkdir(parents=True)
    ours = gzip.decompress((run1 / "lighthouse.log.gz").read_bytes())

    def days_before(n: int) -> bytes:
        """Our Lighthouse log as an earlier run's, n days before (other uuids)."""
        day = (datetime(2026, 11, 23) - timedelta(days=n)).strftime("%Y-%m-%d").encode()
        text = re.sub(rb"\b[0-9a-f]{8}-", b"00000000-", ours.replace(b"2026-11-23", day))
        return re.sub(rb"seconds: (\d+)", lambda m: b"seconds: %d" % (int(m[1]) - n * 86400),
                      text)

    shared.write_bytes(b"".join(days_before(n) for n in range(120, 90, -1)) + ours)
    run = tmp_path / "torchft" / "tft-5"
    run.mkdir(parents=True)
    for i in (0, 1):
        (run / f"tft-5_{i}.out").write_bytes(
            gzip.decompress((run1 / f"replica_{i}.log.gz").read_bytes()))
    j = build_report(run).to_json()
    assert [(q["quorum_id"], q["time"]) for q in j["quorums"]] == [
        (1, "2026-11-23T08:50:55.316"), (2, "2026-11-23T08:51:07.406"),
        (3, "2026-11-23T08:51:19.640")]
    assert (j["parse"]["implausible_times"], j["parse"]["malformed"]) == (0, 0)
    assert j["summary"]["start_time"] == "2026-11-23T08:50:53.955"  # replica 0's first line
    assert j["parse"]["clock_back"] == []


# ---------------------------------------------------------------- malformed quorums


def _guide_with_lighthouse_line(tmp_path: Path, line: str) -> Path:
    """The guide's excerpt with one more Lighthouse line after its quorum 3."""
    run = tmp_path / "guide"
    shutil.copytree(GUIDE, run)
    lh = (run / "lighthouse.log").read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lh) if "quorum_id: 3," in x) + 1
    (run / "lighthouse.log").write_text("".join(lh[:at] + [line + "\n"] + lh[at:]))
    return run


def _guide_story(j: dict) -> tuple:
    return ([(q["quorum_id"], q["participants"], q["step"]) for q in j["quorums"]],
            [(f["replica"], f["step"], f["kind"]) for f in j["failures"]],
            [(d["start_step"], d["end_step"], d["duration_s"]) for d in j["degraded"]],
            [(r["source_replica"], r["target_replica"], r["step"]) for r in j["recoveries"]])


def test_a_quorum_without_members_is_counted_as_malformed(tmp_path):
    """Failed before the fix: the quorum was dropped without a trace (0 malformed)."""
    run = _guide_with_lighthouse_line(
        tmp_path, "2025-07-16T13:50:00.000 [INFO] [torchft::lighthouse] - Quorum! Quorum { "
        "quorum_id: 9, participants: [], created: Some(Timestamp { seconds: 1752673800, "
        "nanos: 0 }) }")
    rep = build_report(run)
    j = rep.to_json()
    assert _guide_story(j) == _guide_story(build_report(GUIDE).to_json())
    assert j["parse"]["malformed"] == 1
    assert ", 1 malformed" in rep.to_text().split("Parsed: ", 1)[1]


def test_a_quorum_with_a_negative_step_is_counted_as_malformed(tmp_path):
    """lines.py reads `step: (\\d+)`: a member with `step: -5` takes the next member's step
    and that member is lost, so the quorum looks like a failure. The timeline counts a quorum
    with a negative member step as malformed (timeline.on_quorum) once the parser keeps it."""
    member = ('QuorumMember {{ replica_id: "torchtitan_ft_{i}:{u}", address: '
              '"http://worker-{i}:41093", store_address: "worker-{i}.soperator-worker-svc.'
              'soperator.svc.cluster.local:33745", step: {s}, world_size: 8, shrink_only: false,'
              ' commit_failures: 0, data: "" }}')
    parts = ", ".join([
        member.format(i=0, u="6cc4c926-56d9-4bb9-96f6-544803cae49c", s=-5),
        member.format(i=1, u="5ea849a1-5cd7-40c6-a1e3-b307716c8088", s=30)])
    run = _guide_with_lighthouse_line(
        tmp_path, "2025-07-16T13:50:00.000 [INFO] [torchft::lighthouse] - Quorum! Quorum { "
        f"quorum_id: 9, participants: [{parts}], created: Some(Timestamp {{ seconds: "
        "1752673800, nanos: 0 }) }")
    j = build_report(run).to_json()
    assert _guide_story(j) == _guide_story(build_report(GUIDE).to_json())
    assert j["parse"]["malformed"] == 1


# ---------------------------------------------------------------- ANSI codes


def _with_ansi(where: str):
    """An edit putting colour codes into every line of every log: before its timestamp, at
    the start of its message (after `- INFO - ` or `] - `), or around its level
    (`\\x1b[32mINFO\\x1b[0m`, as a coloured logging formatter writes it)."""
    def edit(name: str, lines: list[bytes]) -> list[bytes]:
        if name.endswith(".jsonl"):
            return lines
        if where == "start":
            return [b"\x1b[32m" + x for x in lines]
        if where == "message":
            return [re.sub(rb"^(.*?(?:INFO -|\] -) )", lambda m: m[1] + b"\x1b[1m", x, count=1)
                    for x in lines]
        level = re.compile(rb"(- |\[)(INFO|WARN|WARNING|ERROR)(\]| -)")
        return [level.sub(lambda m: m[1] + b"\x1b[32m" + m[2] + b"\x1b[0m" + m[3], x)
                for x in lines]
    return edit


def test_ansi_codes_before_the_timestamp_change_no_count(tmp_path):
    """The reader finds no time on such a line (it looks for `[titan] `, `[` or a digit at
    the start): 2 failures became 4, the recoveries lost their times and sources."""
    j = build_report(_run_copy(tmp_path, edit=_with_ansi("start"))).to_json()
    assert _story(j) == _story(BASE.to_json())


@pytest.mark.parametrize("where", ["message", "level"])
def test_ansi_codes_after_the_timestamp_change_no_count(tmp_path, where):
    """Codes after the timestamp (at the message's start, around the level) hide no marker
    (these passed before the fix too: a guard for the log vocabulary's rewrite)."""
    j = build_report(_run_copy(tmp_path, edit=_with_ansi(where))).to_json()
    assert _story(j) == _story(BASE.to_json())
    assert j["parse"]["untimed"] == 0


# ---------------------------------------------------------------- the text


def test_a_failure_without_a_step_says_no_step(tmp_path):
    """An injected failure and no quorum at all: no step is known. Failed before the fix:
    `replica 1 at step None (node-down)`."""
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(GUIDE / "tft-12_0.out", run)
    (run / "events.jsonl").write_text(
        '{"time": "2025-07-16T13:49:30", "action": "node-down", "replica": 1}\n')
    text = build_report(run).to_text()
    assert "step None" not in text
    assert "    replica 1 (node-down) at 13:49:30.000\n" in text


def test_terminal_escapes_from_logs_are_shown_not_sent(tmp_path):
    """Control characters from every place the text quotes: a launcher line's node name
    (BEL, backspace), an error text (an 8-bit CSI, U+009B), an event-log node (ESC clear
    screen), a file name (ESC bold). Written as `\\x07`, `\\x9b`, `\\x1b`... in the text,
    never raw. Failed before the fix: they went out raw. (ESC sequences inside log lines are
    to be removed where the lines are read: see the ANSI tests.)"""
    run = tmp_path / "guide"
    shutil.copytree(GUIDE, run)
    launch = run / "tft-12_1.out"
    launch.write_bytes(launch.read_bytes().replace(b"on worker-0", b"on worker-0\x07\x08x"))
    commit = run / "tft-12_0.out"
    commit.write_bytes(commit.read_bytes().replace(b"errored=aborted",
                                                   b"errored=aborted\xc2\x9b2J"))
    commit.rename(run / "tft-12_0\x1b[1m.out")
    (run / "events.jsonl").write_text(json.dumps(
        {"time": "2025-07-16T13:49:30", "action": "node-down", "replica": 1,
         "node": "worker-1\x1b[2J"}) + "\n")
    text = build_report(run).to_text()
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", text)
    assert "replica 1 attempt 1 launched on worker-0\\x07\\x08x" in text
    assert "(errored=aborted\\x9b2J)" in text
    assert "injected node-down: replica 1 on worker-1\\x1b[2J" in text
    assert "tft-12_0\\x1b[1m.out" in text
