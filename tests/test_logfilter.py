"""logfilter.py folds the quorum lines torchft repeats every step, and nothing a reader needs
goes with them: the report of every recorded run (tests/fixtures) is the same on the raw logs
and on the logs through the filters, also when the replicas' own quorum lines are all it has.
The 1,024-replica sizes are measured on lines built from a recorded member, copied 1,024 times.
The launcher's copy path (lighthouse/launcher.py, standalone) and the copy of logfilter.py
beside it (lighthouse/command.py) are checked here too; one `process` test runs the launcher.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import re
import shutil
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from ftslurm import knobs, logfilter, logvocab
from ftslurm.errors import UserError
from ftslurm.lighthouse import command, launcher
from ftslurm.logfilter import LighthouseLogFilter, ReplicaLogFilter
from ftslurm.report import build_report
from tests.clirun import executable

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures"
RUNS = sorted(
    [d for d in (FIX / "report").iterdir() if d.is_dir()]
    + [d for d in (FIX / "multirank").iterdir() if d.is_dir()]
)
CPU_RUN = FIX / "report" / "cpu-run1"  # 200 steps, ~1 quorum round each: the most repeats
LOGS = (".log", ".out")


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def _filter_of(name: str) -> type[ReplicaLogFilter] | type[LighthouseLogFilter]:
    return LighthouseLogFilter if "lighthouse" in name else ReplicaLogFilter


def _through(data: bytes, flt: ReplicaLogFilter | LighthouseLogFilter,
             sizes: list[int] | None = None) -> bytes:  # fmt: skip
    """`data` fed to `flt` whole, or in chunks of the given sizes (cycled), then flushed."""
    if not sizes:
        return flt.feed(data) + flt.flush()
    out, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        out.append(flt.feed(data[i : i + n]))
        i, k = i + n, k + 1
    return b"".join(out) + flt.flush()


def _copy_run(src: Path, dst: Path, filtered: bool, lighthouse: bool = True) -> int:
    """The run's logs and event log into `dst` (decompressed), its logs through the filters if
    `filtered`; without the Lighthouse's log if not `lighthouse`. Bytes of logs written."""
    dst.mkdir()
    total = 0
    for f in sorted(src.iterdir()):
        name = f.name.removesuffix(".gz")
        if not name.endswith((*LOGS, ".jsonl")) or (not lighthouse and "lighthouse" in name):
            continue
        data = _raw(f)
        if filtered and name.endswith(LOGS):
            data = _through(data, _filter_of(name)())
        total += len(data) if name.endswith(LOGS) else 0
        (dst / name).write_bytes(data)
    return total


def _answers(run: Path) -> dict:
    """The report's JSON less the files' names and the reading's counts (lines, bytes)."""
    js = build_report(run).to_json()
    parse = js.pop("parse")
    js.pop("files")
    js["parse"] = {k: parse[k] for k in ("events", "malformed", "overlong", "untimed", "crlf")}
    return js


# ---------------------------------------------------------------- what the readers get


@pytest.mark.parametrize("run", RUNS, ids=lambda d: d.name)
@pytest.mark.parametrize("lighthouse", [True, False], ids=["with-lighthouse", "replicas-only"])
def test_the_report_is_the_same_on_filtered_logs(run: Path, lighthouse: bool, tmp_path: Path):
    """Failures, recoveries, quorum changes, degraded intervals, goodput, commit failures,
    the timeline: equal on the raw and the filtered logs. Without the Lighthouse's log the
    report takes the quorums (and each round's time: when the members were last seen) from
    the replicas' short lines."""
    raw_bytes = _copy_run(run, tmp_path / "raw", filtered=False, lighthouse=lighthouse)
    kept = _copy_run(run, tmp_path / "filtered", filtered=True, lighthouse=lighthouse)
    raw = _answers(tmp_path / "raw")
    assert kept <= raw_bytes and (raw["quorums"] or not lighthouse)  # (guide: no replica's)
    assert _answers(tmp_path / "filtered") == raw


def test_the_recorded_run_shrinks_where_quorums_repeat():
    lh = _raw(CPU_RUN / "lighthouse.log.gz")
    rep = _raw(CPU_RUN / "replica_0.log.gz")
    lh_out = _through(lh, LighthouseLogFilter())
    rep_out = _through(rep, ReplicaLogFilter())
    assert len(lh_out) < len(lh) // 4, (len(lh_out), len(lh))
    quorum_bytes = sum(len(x) for x in rep.splitlines() if b"got lighthouse quorum" in x)
    kept = sum(len(x) for x in rep_out.splitlines() if b"got lighthouse quorum" in x)
    assert kept < quorum_bytes * 0.6, (kept, quorum_bytes)
    # the quorum changes stay whole: one per quorum id, as parse_line reads them
    whole = [logvocab.parse_line(x) for x in lh_out.splitlines() if b"Quorum! " in x]
    ids = [q.quorum_id for q in whole if q is not None]
    assert ids == [1, 2, 3, 4] and all(len(q.members) >= 1 for q in whole if q is not None)
    # every round is still there, with its time, as one line
    assert lh_out.count(b"Quorum! Quorum { quorum_id: ") == lh.count(b"Quorum! Quorum { ")


def test_a_short_line_is_no_quorum_to_parse_line_but_keeps_what_readers_use():
    lines = [x for x in _raw(CPU_RUN / "lighthouse.log.gz").splitlines() if b"Quorum! " in x]
    flt = LighthouseLogFilter()
    assert flt.filter_line(lines[0]) is lines[0]  # the first: whole, unchanged
    short = flt.filter_line(lines[1])
    assert short is not None and len(short) < 300 < len(lines[1])
    assert short.startswith(lines[1][:80])  # its time and where it comes from
    assert logvocab.parse_line(short) is None  # no member list: nothing to lie with
    assert logvocab.parse_time(short) == logvocab.parse_time(lines[1])
    assert logvocab.quorum_created(short) == logvocab.quorum_created(lines[1])
    assert re.search(rb"Quorum \{ quorum_id: ([^,]{0,23}),", short)[1] == b"1"  # the reader's
    assert b"(2 members, as in the last full line of quorum_id 1; step: 1..1, " \
           b"commit_failures: 0..0)" in short
    assert logfilter.folded_members(short) == 2 and logfilter.folded_members(lines[1]) is None
    assert flt.filter_line(short) == short  # a short line again: as it is


def test_a_quorum_is_whole_again_when_its_id_or_its_members_change():
    line = next(x for x in _raw(CPU_RUN / "replica_0.log.gz").splitlines()
                if b"got lighthouse quorum" in x)  # fmt: skip
    other_id = line.replace(b"quorum_id: 1,", b"quorum_id: 2,")
    other_member = line.replace(b'replica_id: "train_ddp_1:', b'replica_id: "train_ddp_7:')
    assert other_member != line
    flt = ReplicaLogFilter()
    got = [flt.filter_line(x) for x in (line, line, other_id, line, line, other_member)]
    assert got == [line, got[1], other_id, line, got[4], other_member]
    assert all(len(got[i]) < len(line) for i in (1, 4))
    flt.reset()  # a new log file: the next one whole
    assert flt.filter_line(line) == line


def test_lighthouse_request_and_status_lines_are_folded():
    t = "2026-11-23T08:50:{:02d}.000 [INFO] [torchft::lighthouse] - "
    ask = t + "Received quorum request for replica train_{}:uuid"
    status = t + ("Quorum status: New quorum not ready, only have {} participants, need at "
                  "least half of 2 healthy workers [{}/{} participants healthy][2 heartbeating]")
    lines = [ask.format(1, 0), ask.format(1, 1), ask.format(2, 0), ask.format(2, 2),
             status.format(3, 0, 0, 0), status.format(4, 1, 1, 1), status.format(12, 1, 1, 1),
             t.format(13) + "Detected quorum change, bumping quorum_id to 2",
             status.format(14, 1, 1, 1), t.format(15) + "something else", "not a log line"]
    flt = LighthouseLogFilter()
    kept = [x for x in lines if flt.filter_line(x.encode()) is not None]
    # each replica's first request; a status shape once per ten seconds and per quorum
    assert kept == [lines[i] for i in (0, 1, 3, 4, 6, 7, 8, 9, 10)]


# ---------------------------------------------------------------- 1,024 replicas


def _member_line(line: bytes, n: int, step: int) -> bytes:
    """`line` (a recorded quorum line) with its members replaced by `n` copies of its first
    one, replica i at `step`: the shape and size torchft writes for n replicas."""
    start = line.index(b"[QuorumMember {") + 1
    end = line.index(b"}, QuorumMember {", start) + 1
    member = line[start:end]
    rid = re.search(rb'replica_id: "(train_ddp_0):', member)
    members = [member.replace(rid.group(1), b"train_ddp_%d" % i)
                     .replace(b"step: 0,", b"step: %d," % step) for i in range(n)]  # fmt: skip
    return line[:start] + b", ".join(members) + line[line.index(b"], created: "):]


def test_a_1024_replica_run_logs_little_per_step():
    """The goal: at most 2 KB of quorum line a replica a step and 20 KB of Lighthouse log a
    round (raw: ~277 KB and ~660 KB)."""
    rep = next(x for x in _raw(CPU_RUN / "replica_0.log.gz").splitlines()
               if b"got lighthouse quorum" in x and b"step: 0," in x)  # fmt: skip
    lh = next(x for x in _raw(CPU_RUN / "lighthouse.log.gz").splitlines() if b"Quorum! " in x)
    n, rounds = 1024, 20
    flt, lflt = ReplicaLogFilter(), LighthouseLogFilter()
    per_step, per_round = [], []
    for r in range(rounds):
        line = _member_line(rep, n, r)
        assert len(line) > 250_000
        per_step.append(len(flt.feed(line + b"\n")))
        ts = b"2026-11-23T09:%02d:%02d.000 [INFO] [torchft::lighthouse] - " % (r * 2 // 60,
                                                                             r * 2 % 60)
        out = [lflt.feed(ts + b"Received quorum request for replica train_ddp_%d:uuid\n" % i)
               for i in range(n)]  # fmt: skip
        out += [lflt.feed(ts + b"Quorum status: New quorum not ready, only have %d "
                          b"participants, need at least half of %d healthy workers [%d/%d "
                          b"participants healthy][%d heartbeating]\n" % (i, n, i, i, n))
                for i in range(n)]  # fmt: skip
        out.append(lflt.feed(ts + b"Quorum status: Fast quorum found! [1024/1024]\n"))
        out.append(lflt.feed(ts + _member_line(lh, n, r)[24:] + b"\n"))
        per_round.append(sum(map(len, out)))
    assert per_step[0] > 250_000 and max(per_step[1:]) <= 2048, per_step
    assert per_round[0] > 250_000 and max(per_round[1:]) <= 20 * 1024, per_round


# ---------------------------------------------------------------- streams, long lines, junk


@pytest.mark.parametrize("name", ["lighthouse.log.gz", "replica_1.log.gz"])
def test_lines_cut_anywhere_are_joined_first(name: str):
    data = _raw(CPU_RUN / name)
    whole = _through(data, _filter_of(name)())
    rnd = random.Random(7)
    for sizes in ([1], [2, 3], [rnd.randrange(1, 5000) for _ in range(97)], [len(data) - 1]):
        part = data if sizes[0] > 3 else data[:40_000]
        expect = whole if part is data else _through(part, _filter_of(name)())
        assert _through(part, _filter_of(name)(), sizes) == expect, sizes[:3]


def test_a_line_without_its_newline_comes_at_flush():
    line = next(x for x in _raw(CPU_RUN / "lighthouse.log.gz").splitlines() if b"Quorum! " in x)
    flt = LighthouseLogFilter()
    assert flt.feed(line + b"\n") == line + b"\n"
    assert flt.feed(line[:100]) == b"" and flt.feed(line[100:]) == b""
    short = flt.flush()
    assert short and not short.endswith(b"\n") and len(short) < len(line)
    assert flt.flush() == b""


def test_long_lines_take_linear_time():
    """A 32 MB line fed in 4 KiB pieces (joined once, not at each piece) and a quorum of 10,000
    members (2.7 MB): each is over in well under a second; a quadratic join would take minutes."""
    flt = ReplicaLogFilter()
    piece = b"x" * 4096
    t0 = time.perf_counter()
    for _ in range(8192):
        assert flt.feed(piece) == b""
    assert len(flt.feed(b"\n")) == 8192 * 4096 + 1
    rep = next(x for x in _raw(CPU_RUN / "replica_0.log.gz").splitlines()
               if b"got lighthouse quorum" in x and b"step: 0," in x)  # fmt: skip
    big = _member_line(rep, 10_000, 0)
    assert len(big) > 2_500_000
    assert flt.filter_line(big) is big and len(flt.filter_line(big)) < 400
    assert time.perf_counter() - t0 < 5


def test_an_overlong_partial_line_is_passed_on_not_held(monkeypatch):
    monkeypatch.setattr(logfilter, "MAX_PENDING", 1000)
    flt = LighthouseLogFilter()
    junk = b"Quorum! Quorum { quorum_id: 1, participants: [" + b"y" * 600
    assert flt.feed(junk) == b""
    out = flt.feed(junk) + flt.feed(b"z" * 10) + flt.feed(b"end\nnext") + flt.flush()
    assert out == junk + junk + b"z" * 10 + b"end\nnext"


def test_junk_and_unknown_lines_pass_unchanged():
    rnd = random.Random(3)
    noise = bytes(rnd.randrange(256) for _ in range(200_000))
    quorum = next(x for x in _raw(CPU_RUN / "lighthouse.log.gz").splitlines() if b"Quorum! " in x)
    odd = [
        quorum[: len(quorum) // 2],  # cut inside the member list
        quorum.replace(b"quorum_id: 1,", b"quorum_id: " + b"9" * 30 + b","),
        quorum.replace(b"], created: ", b"] created: "),
        b"Quorum! Quorum { quorum_id: 1, participants: [], created: \xff\xfe }",
        b"Received quorum request for replica ",
        b"\x1b[31mgot lighthouse quorum Quorum { quorum_id: 5, participants: [\xff\x00",
        b"Quorum status: \xff", b"", b"\r", b"\x00" * 50,
    ]
    for cls in (ReplicaLogFilter, LighthouseLogFilter):
        assert _through(noise, cls(), [977]) == noise
        for line in odd[:3] + odd[5:6]:
            flt = cls()
            assert [flt.filter_line(line), flt.filter_line(line)] == [line, line]
        for line in odd:
            assert cls().filter_line(line) == line


def test_crlf_lines_keep_their_ends_and_filter_line_its_newline():
    line = next(x for x in _raw(CPU_RUN / "lighthouse.log.gz").splitlines() if b"Quorum! " in x)
    flt = LighthouseLogFilter()
    assert flt.filter_line(line + b"\r\n") == line + b"\r\n"
    short = flt.filter_line(line + b"\r\n")
    assert short.endswith(b" }\r\n") and len(short) < len(line)
    out = _through((line + b"\r\n") * 3, LighthouseLogFilter())
    assert out.count(b"\r\n") == 3 and out.startswith(line + b"\r\n")


# ---------------------------------------------------------------- the Lighthouse's launcher


def test_the_switch_and_a_filter_that_fails_never_stop_the_copy():
    assert launcher.log_filter("0") is None and launcher.log_filter(" Off ") is None
    on = launcher.log_filter("1")
    assert isinstance(on, launcher.GuardedFilter)
    assert isinstance(on.filt, LighthouseLogFilter)

    class Broken:
        def feed(self, data: bytes) -> bytes:
            raise ValueError("a bug")

    guarded = launcher.GuardedFilter(Broken())
    assert guarded.feed(b"a\nb") == b"a\nb" and guarded.filt is None
    assert guarded.feed(b"c") == b"c" and guarded.flush() == b""
    guarded.reset()


def test_the_launcher_in_the_state_dir_takes_the_filter_beside_it(tmp_path: Path):
    """Standalone, as `ftslurm lighthouse start` runs it: logfilter.py from its own folder (the
    copy that matches it), ftslurm's own only when there is none."""
    shutil.copy(launcher.__file__, tmp_path / "torchft_lighthouse")
    copy = tmp_path / "logfilter.py"
    shutil.copy(logfilter.__file__, copy)
    # no .py suffix: its loader named, as `python <state dir>/torchft_lighthouse` reads it
    loader = SourceFileLoader("standalone_launcher", str(tmp_path / "torchft_lighthouse"))
    spec = importlib.util.spec_from_loader("standalone_launcher", loader)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert Path(mod._logfilter_module().__file__) == copy
    copy.write_text("raise SyntaxError('damaged')\n")  # a damaged copy: ftslurm's
    assert mod._logfilter_module() is logfilter
    copy.unlink()
    assert mod._logfilter_module() is logfilter


def test_lighthouse_start_copies_the_filter_and_passes_the_switch(tmp_path: Path, monkeypatch):
    binary = shutil.which("true")
    assert binary
    cmd, env = command.lighthouse_command(tmp_path, binary)
    assert cmd[1] == str(tmp_path / command.MARKER)
    assert (tmp_path / command.FILTER).read_bytes() == Path(logfilter.__file__).read_bytes()
    assert env["FTSLURM_LOG_FILTER"] == "1"
    monkeypatch.setenv("FTSLURM_LOG_FILTER", "off")
    assert command.lighthouse_command(tmp_path, binary)[1]["FTSLURM_LOG_FILTER"] == "0"
    monkeypatch.setenv("FTSLURM_LOG_FILTER", "maybe")
    with pytest.raises(UserError, match="FTSLURM_LOG_FILTER='maybe' is not a boolean"):
        command.lighthouse_command(tmp_path, binary)
    assert knobs.KNOBS["FTSLURM_LOG_FILTER"].default is True


@pytest.mark.process
@pytest.mark.parametrize("switch", ["1", "0"])
def test_the_launcher_writes_the_filtered_log(tmp_path: Path, switch: str, monkeypatch):
    """The real launcher, from a state dir, running a stand-in Lighthouse that prints a
    recorded Lighthouse log: its log is that log through LighthouseLogFilter (FTSLURM_LOG_FILTER
    =0: as it was); with a small cap each file begins with a whole quorum."""
    raw = _raw(CPU_RUN / "lighthouse.log.gz")
    (tmp_path / "recorded.log").write_bytes(raw)
    fake = executable(tmp_path / "bin" / "fake-lighthouse",
                      f"#!/bin/sh\ncat {tmp_path / 'recorded.log'}\n")  # fmt: skip
    monkeypatch.setenv("FTSLURM_LOG_FILTER", switch)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    # unfiltered, a small cap rotates many times: only the filtered log is checked with one
    caps = [(1 << 30, "big")] + ([(40_000, "small")] if switch == "1" else [])
    for cap, name in caps:
        log = state / f"{name}.log"
        cmd, env = command.lighthouse_command(state, str(fake))
        env.update(FTSLURM_LIGHTHOUSE_LOG=str(log), FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES=str(cap))
        with open(log, "ab") as out:
            subprocess.run(cmd, env={"PATH": "/usr/bin:/bin", **env}, stdout=out,
                           stderr=subprocess.STDOUT, timeout=60, check=True)  # fmt: skip
        if cap > len(raw):
            expect = raw if switch == "0" else _through(raw, LighthouseLogFilter())
            assert log.read_bytes() == expect
            continue
        rotated = log.with_name(log.name + ".1")
        assert rotated.exists()
        for f in (rotated, log):  # each file alone tells its quorum
            first = next(x for x in f.read_bytes().splitlines() if b"Quorum! " in x)
            assert logvocab.parse_line(first) is not None, f


def test_the_filter_runs_on_the_standard_library_alone():
    """logfilter.py imports nothing but the standard library (it runs beside the launcher)."""
    tree = Path(logfilter.__file__).read_text()
    imports = re.findall(r"^(?:from|import) (\S+)", tree, flags=re.M)
    assert set(imports) <= {"__future__", "re"}, imports
    assert sys.modules["ftslurm.logfilter"] is logfilter
