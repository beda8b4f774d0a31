"""Numbers in log lines too long for a step, an attempt, a replica or a quorum id (5,000 digits,
or more than 18): the line is no event, `report` counts it as
malformed and keeps the good lines, `status` skips it; 18 digits still parse."""

from __future__ import annotations

import pytest

from ftslurm import logvocab
from ftslurm import status as st
from ftslurm.report import build_report

# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]

STEP_LINE = "[titan] 2026-11-23 10:00:0{i},000 - root - INFO - step: {i}  loss:  2.5"


BIG = "9" * 5000


@pytest.mark.parametrize("line", [
    f"[titan] 2026-11-23 10:00:00,000 - torchft.manager - INFO - [ft_0:u/0 - step {BIG}] "
    "healing required",
    f"[titan] 2026-11-23 10:00:00,000 - root - INFO - step: {BIG}  loss:  5.9",
    f"[2026-11-23 10:00:00]  launching replica 1 (attempt {BIG}) on worker-0",
    f"[2026-11-23 10:00:00]  launching replica {BIG} (attempt 1) on worker-0",
    '2026-11-23T10:00:00.000 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 1, '
    f'participants: [QuorumMember {{ replica_id: "a_0:x", address: "", step: {BIG}, '
    'world_size: 1, shrink_only: false, commit_failures: 0 }], created: Some(Timestamp { '
    'seconds: 1, nanos: 2 }) }',
    f"2026-11-23T10:00:00.000 [INFO] Quorum! Quorum {{ quorum_id: {BIG}, participants: [], "
    "created: Some(Timestamp { seconds: 1, nanos: 2 }) }",
    "[titan] 2026-11-23 10:00:00,000 - torchft.manager - INFO - [ft_0:u/0 - step 12345678901234"
    "5678901] should_commit=True enough_replicas=True, errored=None",
], ids=["manager", "titan-step", "attempt", "replica", "member-step", "quorum-id", "19-digits"])
# fmt: skip
def test_a_number_too_long_for_a_step_is_no_event(line):
    assert logvocab.parse_line(line.encode()) is None


def test_eighteen_digits_still_parse():
    n = "9" * 18
    ev = logvocab.parse_line(f"[ft_0:u/0 - step {n}] reconfiguring for quorum_id={n}".encode())
    assert ev is not None and ev.step == int(n) and ev.quorum_id == int(n)
    assert logvocab.split_replica_id(f"ft_{BIG}:u") == (f"ft_{BIG}:u", None, None)
    assert logvocab.parse_log_name(f"tft-1_{BIG}.out") is None


def test_report_counts_a_too_long_step_as_malformed(tmp_path):
    mgr = "[titan] 2026-11-23 10:00:0{s},000 - torchft.manager - INFO - [ft_0:u/0 - step {n}] {m}"
    lines = [
        mgr.format(s=1, n=1, m="should_commit=True enough_replicas=True, errored=None"),
        mgr.format(s=2, n=BIG, m="healing required max_step=3"),
        mgr.format(s=3, n="1" * 25, m="should_commit=True enough_replicas=True, errored=None"),
        mgr.format(s=4, n=2, m="should_commit=True enough_replicas=True, errored=None"),
        f"[2026-11-23 10:00:05]  launching replica 0 (attempt {BIG}) on worker-0",
    ]
    log = tmp_path / "replica_0.log"
    log.write_text("\n".join(lines) + "\n")
    rep = build_report(str(log))
    assert rep.stats.malformed == 3
    c = rep.stats.commits[b"ft_0:u"]  # the two good steps are still counted
    assert (c.attempted, c.committed, c.max_step) == (2, 2, 2)


def test_status_skips_a_too_long_step_and_attempt():
    text = "\n".join([
        "[2026-11-23 10:00:00]  launching replica 1 (attempt 2) on worker-1",
        STEP_LINE.format(i=4),
        f"[titan] 2026-11-23 10:00:05,000 - root - INFO - step: {BIG}  loss:  1.0",
        f"[2026-11-23 10:00:06]  launching replica 1 (attempt {BIG}) on worker-1",
    ])  # fmt: skip
    s = st.summarize_tail(text)
    assert (s.attempt, s.last_step, s.last_loss) == (2, 4, 2.5)
