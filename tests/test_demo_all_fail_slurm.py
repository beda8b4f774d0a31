"""`ftslurm demo --all-fail` on the real local Slurm (its own cluster, as tests/test_demo.py):
after a model checkpoint every node of the array goes DOWN at once, Slurm requeues every task,
and each replica resumes from that checkpoint (its first step is the checkpoint's + 1, not 1);
`ftslurm report` lists each restart with its lost steps (at most the interval).

Run under the heavy lock:
`flock /tmp/ftslurm-heavy.lock pytest tests/test_demo_all_fail_slurm.py`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ftslurm.demo import ALL_FAIL_INTERVAL
from tests.test_demo import _cleanup, _processes_marked_with, _run_demo

pytestmark = [pytest.mark.slurm, pytest.mark.training]

RESUMED = re.compile(
    r"replica (\d) \(attempt (\d+)\) (?:resumed from|loaded) checkpoint step-(\d+) \(model, "
    r"optimizer, step and its data position step-(\d+)\)(, came back after a peer had resumed "
    r"from it and healed from that peer)?: first step (\d+)"
)
LOST = re.compile(r"steps lost: (\d+) \(trained to step (\d+) before the outage, trained again "
                  r"from step (\d+);")
REPORT_ROW = re.compile(
    r"replica (\d): restart, resumed at step (\d+) from checkpoint step-(\d+); last step "
    r"before (\d+); steps lost (\d+)"
)


@pytest.mark.timeout(600)
def test_every_node_down_at_once_resumes_every_replica_from_the_checkpoint(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("the Slurm backend needs root")
    # the demo's own interval, not one the caller's shell sets
    out = _run_demo(tmp_path, "slurm", "--all-fail", drop=("FTSLURM_EXTRA_ARGS",), timeout=540)
    print(out.stderr, out.stdout, sep="\n")  # the narration and the report: the figures
    left = _processes_marked_with(str(tmp_path))
    if left or out.returncode != 0:
        _cleanup(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not left, left
    err = out.stderr
    assert "failure 1/" not in err  # the whole-array story alone (-k 0 with --all-fail)
    assert "set DOWN together: every replica lost" in err
    assert "every node RESUMEd" in err
    said = {int(m[1]): m.groups() for m in RESUMED.finditer(err)}
    assert sorted(said) == [0, 1], err[-3000:]
    ckpts = {int(g[2]) for g in said.values()}
    assert len(ckpts) == 1, said  # both from the same checkpoint
    ckpt = ckpts.pop()
    assert ckpt > 0 and ckpt % ALL_FAIL_INTERVAL == 0
    for _, attempt, _, data, healed, first in said.values():
        assert int(attempt) >= 1 and int(data) == ckpt  # the data position at that step
        # the first back trains on from the checkpoint (not from 1, not from the newest data
        # position); one back after it heals from it
        assert int(first) == ckpt + 1 or (healed and int(first) > ckpt + 1), said
    assert any(int(g[5]) == ckpt + 1 for g in said.values()), said
    # a late replica's data after the checkpoint was lost with its lineage: read again
    job = re.search(r"submitted FT array job (\d+)", err)[1]  # type: ignore[index]
    for rid, g in said.items():
        if g[4]:
            log = tmp_path / "outputs" / "torchft" / f"tft-{job}" / f"tft-{job}_{rid}.out"
            assert re.search(rf"replica {rid} healed after step \d+ from a peer: data position "
                             rf"stays step-{ckpt}\b", log.read_text(errors="replace")), rid
    [(lost, last, again)] = LOST.findall(err)
    assert int(again) == ckpt + 1 and int(lost) == int(last) - ckpt
    assert 0 < int(lost) <= ALL_FAIL_INTERVAL
    assert "quorum of 2 again" in err
    # the report: a restart row for each replica that resumed from the checkpoint itself
    rows = {int(m[1]): m.groups() for m in REPORT_ROW.finditer(out.stdout)}
    assert rows, out.stdout[-3000:]
    for _, first, resumed_from, _last, row_lost in rows.values():
        assert (int(first), int(resumed_from)) == (ckpt + 1, ckpt)
        assert 0 < int(row_lost) <= int(lost)
    assert "local Slurm cluster stopped" in err and "cleaning up" in err
