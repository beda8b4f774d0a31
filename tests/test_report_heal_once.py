"""One heal of one replica at one step is one recovery, however many ranks logged it and in
whatever order the lines of the files come (ftslurm/report/heals.py).

No recorded run shows the double count as it was recorded: every replica log of this torchft
prints `reconfiguring for quorum_id=Q` before its heal lines, and the report reads a source's
ranks in that quorum. Logs without that line (the guide's excerpt has none) make the report
read them in the quorum current by the time of the line, and with clocks apart that can be one
where the rank is the target's earlier attempt. So the inputs here are real recorded lines:
the 2-replica x 2-rank run (tests/fixtures/multirank/slurm-2x2-tft-1) and the restart-in-place
run (tests/fixtures/report/slurm-restart-in-place), copied with whole kinds of lines left out
and one replica's clock moved, or single lines of them given to the timeline in a chosen
order. The text of every line is as recorded; only timestamps move, and one source line lists
two ranks where the recorded one listed one (the shape torchft prints for two targets).
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterable
from pathlib import Path

import pytest

from ftslurm import logvocab as L
from ftslurm.report import build_report
from ftslurm.report.reader import ParseStats
from ftslurm.report.timeline import _Builder
from tests.test_report_skew import _shift_line

FIX = Path(__file__).parent / "fixtures"
MULTI = FIX / "multirank" / "slurm-2x2-tft-1"
IN_PLACE = FIX / "report" / "slurm-restart-in-place"

# reports of recorded runs must not pick up the checkout's own Lighthouse or failure log
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]

KEYS = ("source_replica", "source_id", "target_replica", "target_id", "step")
RECONFIGURE = b"reconfiguring for quorum_id="
# the target's lines that name its source: by manager address, then by quorum rank
NAMES_SOURCE = (b"healing required", b"fetching checkpoint from")

R0_OLD = "torchtitan_ft_0:fedc79b5-6b5a-4fdb-a72b-2148a27d798d"
R1_OLD = "torchtitan_ft_1:94c6d8ff-c994-4b88-8101-5949dcb18f71"
R1_NEW = "torchtitan_ft_1:2997984f-ccfa-4b07-890d-e9f00e354313"
R2 = "torchtitan_ft_2:76f6143c-cdf3-40bd-8a09-ecbcbf66f923"  # slurm-3-replicas-tft-3's


def _copy(src: Path, dst: Path, shifts: dict[int, float] | None = None,
          drop: Iterable[bytes] = (), lighthouse: bool = True) -> Path:
    """The recorded run uncompressed in `dst/<run>`: lines holding any of `drop` left out,
    replica i's clock moved by shifts[i] seconds, the Lighthouse log kept or not."""
    drop = tuple(drop)
    run = dst / src.name
    run.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        name = f.name.removesuffix(".gz")
        if f.suffix == ".md" or (name.startswith("lighthouse") and not lighthouse):
            continue
        data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
        lines = [x for x in data.splitlines(keepends=True) if not any(d in x for d in drop)]
        shift = (shifts or {}).get(int(name[-5])) if name.endswith(".out") else None
        if shift:
            lines = [_shift_line(x, shift) for x in lines]
        (run / name).write_bytes(b"".join(lines))
    return run


def _recoveries(run: Path | list[Path]) -> list[tuple]:
    """The recoveries' sources, targets and steps, by step (they are listed by time: a
    clock moved may move one before another)."""
    rs = build_report(run).to_json()["recoveries"]
    return sorted((tuple(r[k] for k in KEYS) for r in rs), key=lambda r: r[4])


def _recovery_lines(run: Path) -> list[str]:
    """The text's timeline lines of recoveries, without their times."""
    text = build_report(run).to_text()
    return [x.split("  recovery: ", 1)[1] for x in text.splitlines() if "  recovery: " in x]


MULTI_HEALS = [("0", R0_OLD, "1", R1_NEW, 29),
               ("1", R1_NEW, "0", "torchtitan_ft_0:207e2c92-d049-4739-a0bf-7139f80a2d08", 41)]


def test_the_recorded_multirank_run_has_two_heals():
    """As recorded: replica 1 healed from 0 at step 29, replica 0 from 1 at step 41, each
    logged by both ranks of both sides."""
    assert _recoveries(MULTI) == MULTI_HEALS


def test_a_multirank_heal_without_its_source_in_the_targets_lines_is_one_recovery(tmp_path):
    """The double count: replica 0's clock 20 s behind, no `reconfiguring` line, and the
    target's own lines of the step-29 heal are its two ranks' `Loaded state dict.` (the lines
    that name the source left out). Replica 0's two ranks said `peers need recovery from us
    [1]` 20 s before the Lighthouse's quorum 3 by their clock, rank 1 was read in quorum 1,
    replica 1's first attempt. Before: `recovery: replica ? -> replica 1 at step 29` beside
    `recovery: replica 0 -> replica 1 at step 29`, and 3 recoveries."""
    run = _copy(MULTI, tmp_path, {0: -20.0}, drop=(RECONFIGURE, *NAMES_SOURCE))
    assert _recoveries(run) == MULTI_HEALS
    assert _recovery_lines(run) == ["replica 0 -> replica 1 at step 29",
                                    "replica 1 -> replica 0 at step 41"]


SHIFTS = [{0: -20.0}, {0: 20.0}, {1: -20.0}, {1: 20.0}, {0: -20.0, 1: 20.0}, {0: -8.0}]


@pytest.mark.parametrize("drop", [(RECONFIGURE,), (RECONFIGURE, *NAMES_SOURCE)],
                         ids=["target-names-source", "target-names-none"])
@pytest.mark.parametrize("shifts", SHIFTS, ids=lambda s: ",".join(
    f"r{k}{v:+.0f}s" for k, v in s.items()))
def test_out_of_order_files_give_the_recorded_heals(tmp_path, shifts, drop):
    """Either replica's clock ahead or behind (its heal lines before or after the other's and
    the Lighthouse's quorum), with the target naming its source or not: the recorded two
    heals, each once. Before, replica 0 behind: step 29's heal twice (`0 -> 1` twice, or
    `? -> 1` beside `0 -> 1`)."""
    assert _recoveries(_copy(MULTI, tmp_path, shifts, drop=drop)) == MULTI_HEALS


def test_the_files_given_in_either_order_give_the_same_heals(tmp_path):
    run = _copy(MULTI, tmp_path, {0: -20.0}, drop=(RECONFIGURE, *NAMES_SOURCE))
    files = sorted(run.iterdir())
    assert _recoveries(files) == _recoveries(files[::-1]) == MULTI_HEALS


def test_heals_of_one_replica_at_five_steps_stay_five(tmp_path):
    """The restart-in-place run: replica 1 healed from 0 at steps 4, 7, 11, 19 and 23, one
    process (uuid) each. Without `reconfiguring` lines, the targets' source-naming lines and
    the Lighthouse log, replica 1's clock 5 s behind: the same five heals, each once (before:
    `? -> 1 at step 4` beside `0 -> 1 at step 4`, six recoveries)."""
    want = _recoveries(IN_PLACE)
    assert [r[4] for r in want] == [4, 7, 11, 19, 23] and len({r[3] for r in want}) == 5
    run = _copy(IN_PLACE, tmp_path, {1: -5.0}, drop=(RECONFIGURE, *NAMES_SOURCE),
                lighthouse=False)
    assert _recoveries(run) == want


# ---------------------------------------------------------------- lines in a chosen order


def _line(path: Path, *needles: bytes) -> bytes:
    """The first line of a recorded file holding every needle."""
    data = gzip.decompress(path.read_bytes())
    return next(x for x in data.splitlines() if all(n in x for n in needles))


def _ev(line: bytes, shift: float = 0.0) -> L.Event:
    ev = L.parse_line(_shift_line(line, shift) if shift else line)
    assert ev is not None, line
    return ev


def _quorums() -> list[L.Event]:
    """The Lighthouse's quorums 1 and 3 of the multirank run, as logged."""
    lh = MULTI / "lighthouse.log.gz"
    return [_ev(_line(lh, b"Quorum! ", b"quorum_id: %d," % q)) for q in (1, 3)]


def _finish(events: Iterable[L.Event]) -> list[tuple]:
    b = _Builder(None, None)
    for ev in events:
        b.feed(ev)
    return [(r.source_id, r.target_id, r.step) for r in b.finish(ParseStats()).recoveries]


def _step29_lines(managers: bool) -> tuple[list[L.Event], list[L.Event]]:
    """Step 29's heal as both ranks of both replicas logged it: the source's (replica 0,
    clock 20 s behind) and the target's (replica 1: rank 1 names its source by manager
    address, the `Loaded state dict.` lines of both ranks name none)."""
    r0, r1 = MULTI / "tft-1_0.out.gz", MULTI / "tft-1_1.out.gz"
    source = [_ev(_line(r0, b"/%d - step 29] peers need recovery" % k), -20.0) for k in (0, 1)]
    target = [_ev(_line(r1, b"2997984f", b"/1 - step 0] healing required"))]
    target += [_ev(_line(r1, b"/%d - step 29] Loaded state dict" % k)) for k in (0, 1)]
    if managers:  # the Rust `Manager listening on` lines: the address is replica 0's
        target = [_ev(_line(r, b"Manager listening on")) for r in (r0, r1)] + target
    return source, target


@pytest.mark.parametrize("managers", [False, True], ids=["address-unknown", "address-known"])
@pytest.mark.parametrize("order", ["as-logged", "target-first", "reversed"])
def test_two_ranks_on_each_side_give_one_recovery(managers, order):
    """Both source ranks' lines read in quorum 1 (replica 1's first attempt), the target's
    lines some with a source and some without, in any order: one recovery, of the target's
    own process. Before: two (`? -> 1` or a second `0 -> 1`, the first attempt's)."""
    source, target = _step29_lines(managers)
    lines = {"as-logged": source + target, "target-first": target + source,
             "reversed": (source + target)[::-1]}[order]
    assert _finish(_quorums() + lines) == [(R0_OLD, R1_NEW, 29)]


def test_heals_of_two_replicas_at_one_step_stay_two():
    """Replicas 1 and 2 healed from 0 at step 29 (one source line for both ranks, `[1, 2]`;
    replica 2's own line names no source): two recoveries, one per target."""
    r0, r1 = MULTI / "tft-1_0.out.gz", MULTI / "tft-1_1.out.gz"
    q = _ev(_line(MULTI / "lighthouse.log.gz", b"Quorum! ", b"quorum_id: 3,"))
    q.members += (L.Member(R2, 0),)
    src = _line(r0, b"/0 - step 29] peers need recovery").replace(b"[1]", b"[1, 2]")
    healed = _line(r1, b"/0 - step 29] Loaded state dict")
    lines = [q, _ev(src), _ev(healed), _ev(healed.replace(R1_NEW.encode(), R2.encode()))]
    for order in itertools.permutations(lines[1:]):
        assert sorted(_finish([lines[0], *order])) == [(R0_OLD, R1_NEW, 29), (R0_OLD, R2, 29)]


def test_two_processes_of_one_replica_healed_to_one_step_stay_two():
    """Replica 1's first and second attempts each logged a heal to step 29 (their own lines,
    two uuids), one naming no source: two processes, two heals."""
    r1 = MULTI / "tft-1_1.out.gz"
    healed = _line(r1, b"/0 - step 29] Loaded state dict")
    lines = [_ev(_line(r1, b"2997984f", b"/1 - step 0] healing required")), _ev(healed),
             _ev(healed.replace(R1_NEW.encode(), R1_OLD.encode()))]
    got = _finish(_quorums() + lines)
    assert sorted(r[1] for r in got) == [R1_NEW, R1_OLD] and {r[2] for r in got} == {29}


def test_a_source_line_far_from_the_targets_heal_is_not_merged():
    """A source's line read as a heal to step 29 of replica 1's first attempt, an hour from
    the target's own heal to that step (another run, whose steps count again): not joined."""
    r0, r1 = MULTI / "tft-1_0.out.gz", MULTI / "tft-1_1.out.gz"
    far = _ev(_line(r0, b"/0 - step 29] peers need recovery"), -3600.0)
    healed = _ev(_line(r1, b"/0 - step 29] Loaded state dict"))
    first = _ev(_line(MULTI / "lighthouse.log.gz", b"Quorum! ", b"quorum_id: 1,"), -3600.0)
    got = _finish([first, *_quorums()[1:], far, healed])
    assert sorted(r[1] for r in got) == [R1_NEW, R1_OLD]


def test_copy_keeps_the_recorded_text(tmp_path):
    """The copy without edits is the recorded run (the helpers change nothing else)."""
    run = _copy(MULTI, tmp_path)
    assert _recoveries(run) == MULTI_HEALS
