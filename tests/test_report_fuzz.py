"""Mutated real logs never make the report raise, and the line dispatcher fuzzed here is the
one the report's reader uses (hypothesis)."""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ftslurm import event_log as E
from ftslurm import logvocab as L
from ftslurm.report import build_report
from ftslurm.report import reader as R

FIX = Path(__file__).parent / "fixtures" / "report"


# reports of recorded runs must not pick up the checkout's own Lighthouse or failure log
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def _sample() -> list[bytes]:
    """Real lines of every shape: the guide excerpt and the recorded run around its failure."""
    out = (FIX / "guide" / "lighthouse.log").read_bytes().splitlines()
    out += (FIX / "guide" / "tft-12_0.out").read_bytes().splitlines()
    out += (FIX / "guide" / "tft-12_1.out").read_bytes().splitlines()
    for name, lo, hi in (("lighthouse", 130, 300), ("replica_0", 0, 60), ("replica_1", 195, 240)):
        lines = gzip.decompress((FIX / "cpu-run1" / f"{name}.log.gz").read_bytes()).splitlines()
        out += lines[lo:hi]
    out += (FIX / "cpu-run1" / "events.jsonl").read_bytes().splitlines()
    tft8 = gzip.decompress((FIX / "slurm-tft-8" / "tft-8_0.out.gz").read_bytes()).splitlines()
    out += tft8[:5] + tft8[60:110] + tft8[195:]  # launcher, titan steps, Training completed
    return out


SAMPLE = _sample()

mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 2000)),
    st.tuples(st.just("insert"), st.integers(0, 2000), st.binary(max_size=12)),
    st.tuples(st.just("flip"), st.integers(0, 2000), st.integers(0, 255)),
    st.tuples(st.just("crlf")),
    st.tuples(st.just("digits"), st.sampled_from([b"99999999999999999999999", b"-1", b"", b"x"])),
    st.tuples(st.just("junk"), st.binary(min_size=1, max_size=200)),
)


def _mutate(line: bytes, m: tuple) -> bytes:
    kind = m[0]
    if kind == "truncate":
        return line[: m[1]]
    if kind == "insert":
        return line[: m[1]] + m[2] + line[m[1] :]
    if kind == "flip":
        if not line:
            return line
        i = m[1] % len(line)
        return line[:i] + bytes([m[2]]) + line[i + 1 :]
    if kind == "crlf":
        return line + b"\r"
    if kind == "digits":
        return re.sub(rb"\d+", m[1], line, count=2)
    return m[1]


log_lines = st.lists(
    st.tuples(st.integers(0, len(SAMPLE) - 1), st.lists(mutation, max_size=2)),
    min_size=0, max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.lists(log_lines, min_size=1, max_size=4), missing=st.booleans())
# an OSC escape (ESC ]) left open at a line's end, a BEL at the next line's start: the escape
# stripper joined the two lines
@example(files=[[(0, [("flip", 50, 27)]), (0, [("insert", 0, b"\x07")])]], missing=False)
def test_mutated_logs_never_raise(files, missing):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "tft-3"
        run.mkdir()
        names = ["lighthouse.log", "tft-3_0.out", "tft-3_1.out", "events.jsonl"]
        for name, picks in zip(names, files, strict=False):
            body = []
            for idx, muts in picks:
                line = SAMPLE[idx]
                for m in muts:
                    line = _mutate(line, m)
                body.append(line)
            (run / name).write_bytes(b"\n".join(body))
        gone = [run / "gone-lighthouse.log"] if missing else []
        rep = build_report([run], lighthouse=gone)
        data = json.loads(json.dumps(rep.to_json()))
        text = rep.to_text()
        # every line written was read, once, and the text says what the JSON says
        # a file that opens as a broken gzip archive (it starts with \x1f\x8b) is unreadable:
        # counted in `unreadable` with the reason (not `missing`: it is there), its lines not read
        read = [n for n in names[: len(files)] if str(run / n) in rep.stats.files]
        unread = [str(run / n) for n in names[: len(files)] if n not in read]
        assert all(u in dict(rep.stats.unreadable) and (Path(u).read_bytes()[:2] == b"\x1f\x8b")
                   for u in unread if not u.endswith("events.jsonl"))
        written = [(run / n).read_bytes() for n in read]
        lines = sum(b.count(b"\n") + (not b.endswith(b"\n")) for b in written if b)
        assert rep.stats.lines == lines
        s = rep.stats
        assert f"Parsed: {lines} lines, {s.events} events, {s.skipped} skipped" in text
        assert text.startswith(f"Run: {len(s.files)} file")
        assert f"\n  failures          {len(data['failures'])}\n" in text
        # the recoveries after a failure; start-up syncs are counted apart
        after = sum(r["after_failure"] for r in data["recoveries"])
        assert data["summary"]["recoveries"] == after
        assert f"\n  recoveries        {after}\n" in text
        assert (f"Missing: {run / 'gone-lighthouse.log'}" in text) == missing
        if missing:
            assert rep.stats.missing == [str(run / "gone-lighthouse.log")]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parse_line_on_arbitrary_bytes(data):
    ev = L.parse_line(data)
    assert ev is None or ev.kind in _KINDS
    t = L.parse_time(data)
    assert t is None or re.match(rb"(\[titan\] |\[)?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d", data)
    inj = E.parse_event_line(data)
    assert inj is None or (inj.action and E.to_seconds(inj.time, 0.0) is not None)


_KINDS = {L.QUORUM, L.LIGHTHOUSE_START, L.COMMIT, L.ERROR, L.PEERS_RECOVER, L.HEAL_REQUIRED,
          L.HEAL_FETCH, L.HEALED, L.RECONFIGURE, L.MANAGER_START, L.LAUNCH, L.TITAN_STEP,
          L.FINISHED}  # fmt: skip


def _fields(ev: L.Event) -> tuple:
    return (ev.kind, ev.replica, ev.step, ev.rank, ev.quorum_id, ev.members, ev.ranks, ev.ok,
            ev.detail, ev.node)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(idx=st.integers(0, len(SAMPLE) - 1), muts=st.lists(mutation, max_size=3))
def test_reader_events_are_the_dispatchers(idx, muts):
    """Each event the streaming reader finds in a mutated real line (a mutation may make it
    several) is what `parse_line` makes of that line: the reader has no parser of its own."""
    line = SAMPLE[idx]
    for m in muts:
        line = _mutate(line, m)
    parsed = [_fields(ev) for ev in map(L.parse_line, line.split(b"\n")) if ev is not None]
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in (("tft-3_0.out", {}), ("lighthouse.log", {"lighthouse": True})):
            path = Path(tmp) / name
            path.write_bytes(line + b"\n")
            for ev in R.iter_file_events(path, R.ParseStats(), **kw):
                assert _fields(ev) in parsed


@settings(max_examples=200, deadline=None)
@given(idx=st.integers(0, len(SAMPLE) - 1), muts=st.lists(mutation, max_size=3))
def test_parse_line_on_mutated_real_lines(idx, muts):
    line = SAMPLE[idx]
    for m in muts:
        line = _mutate(line, m)
    ev = L.parse_line(line)
    assert ev is None or isinstance(ev, L.Event)
