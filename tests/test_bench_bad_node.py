"""bench/bad_node.py's pure parts: the failed replica's path read from a report, whether a run
took its arm's path, the doctor's undo commands, the kills per run, and the bench's rounds and
summary over recorded runs (the demo and the report replaced)."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
from pathlib import Path

import pytest

from ftslurm import doctor
from ftslurm.errors import UserError
from ftslurm.slurm.parse import NodeReason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state"), pytest.mark.timeout(60)]


def _load():
    spec = importlib.util.spec_from_file_location("bench_bad_node", ROOT / "bench" / "bad_node.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bn = _load()


def _att(replica: str, attempt: int, second: int, node: str, restart: int = 0) -> dict:
    return {"replica": replica, "attempt": attempt, "node": node, "restart_in_place": restart,
            "start_time": f"2026-11-27T18:00:{second:02d}.000"}  # fmt: skip


# a report's attempts as the two arms leave them: two kills of replica 1 on worker-1; a
# restart in place keeps Slurm's attempt number (0), so only the start times order them
GOOD = {"attempts": [_att("0", 0, 0, "worker-0"), _att("1", 0, 22, "worker-1", restart=2),
                     _att("1", 0, 1, "worker-1"), _att("1", 0, 11, "worker-1", restart=1)]}
BAD = {"attempts": [_att("0", 0, 0, "worker-0"), _att("1", 0, 1, "worker-1"),
                    _att("1", 0, 11, "worker-1", restart=1), _att("1", 1, 40, "worker-2")]}
DRAIN = {"node": "worker-1", "action": "drain", "reason": "ftslurm: 2 failures ...",
         "undo": "sudo scontrol update NodeName=worker-1 State=RESUME"}


def test_the_failed_replicas_path_in_order_with_how_each_attempt_began():
    path = bn.replica_path(GOOD)
    assert [(p["node"], p["how"]) for p in path] == [
        ("worker-1", "start"), ("worker-1", "restart in place"), ("worker-1", "restart in place")]
    assert bn.path_text(bn.replica_path(BAD)) == (
        "worker-1 -> worker-1 (restart in place) -> worker-2 (requeue)")
    assert bn.replica_path({"attempts": []}) == [] and bn.path_text([]) == "n/a"


def test_a_run_counts_only_when_it_took_its_arms_path():
    good, bad = bn.replica_path(GOOD), bn.replica_path(BAD)
    assert bn.judge("good", good, []) == ""
    assert bn.judge("good", bad, []) == ""  # a good node's requeue may land anywhere
    assert bn.judge("good", good, [DRAIN]).startswith("a node was taken out: worker-1 drain")
    assert bn.judge("bad", bad, [DRAIN]) == ""
    assert bn.judge("bad", bad, []) == "worker-1 was not drained"
    assert bn.judge("bad", bad, [{**DRAIN, "action": "avoid"}]) == "worker-1 was not drained"
    assert bn.judge("bad", good, [DRAIN]) == "the replica did not move off worker-1"
    assert bn.judge("bad", [], [DRAIN]) == "no attempt of the failed replica in the report"


def test_the_undo_commands_are_the_doctors_without_sudo():
    reasons = [NodeReason("worker-1", "drained", "2026-11-27T18:00:00", "ftslurm: 2 failures"),
               NodeReason("worker-2", "drained", "2026-11-27T18:00:01", "ftslurm: pre-flight"),
               NodeReason("worker-0", "drained", "2026-11-27T18:00:02", "an admin's own")]
    check = doctor.check_drained(reasons)
    assert bn.undo_commands(check) == [
        ["scontrol", "update", "NodeName=worker-1", "State=RESUME"],
        ["scontrol", "update", "NodeName=worker-2", "State=RESUME"],
    ]  # fmt: skip
    assert bn.undo_commands(doctor.check_drained(reasons[2:])) == []


def test_each_run_kills_as_often_as_takes_a_node_out():
    assert bn.kills_per_run({}) == 2
    assert bn.kills_per_run({"FT_NODE_MAX_FAILS": "3"}) == 3
    for env in ({"FT_NODE_MAX_FAILS": "0"}, {"FTSLURM_BAD_NODES": "off"}):
        with pytest.raises(UserError, match="needs the launcher to take a node out"):
            bn.kills_per_run(env)


def _record(arm: str, rnd: int, full: list[float], why: str = "") -> dict:
    path = bn.replica_path(BAD if arm == "bad" else GOOD)
    return {"arm": arm, "round": rnd, "measured_s": None if why else full[-1],
            "full_strength_s": full, "demo_full_strength_s": [x - 0.5 for x in full],
            "path": path, "path_text": bn.path_text(path), "as_expected": not why,
            "why_not": why or None}  # fmt: skip


def test_the_rounds_alternate_the_arms_and_the_summary_is_over_the_runs_that_count(
    tmp_path, monkeypatch
):
    figures = {("good", 1): [5.1, 4.9], ("bad", 1): [5.0, 20.5], ("bad", 2): [5.2, 18.0],
               ("good", 2): [4.8, 5.3], ("good", 3): [5.5, 4.7], ("bad", 3): [5.1, 22.0],
               ("bad", 4): [5.0, 5.1], ("good", 4): [5.0, 5.0]}  # fmt: skip
    seen = []

    def fake_run(cfg, say):
        seen.append(cfg)
        return tmp_path / f"run{len(seen)}"

    def fake_record(arm, rnd, run_dir, cfg, out):
        why = "the replica did not move off worker-1" if (arm, rnd) == ("bad", 4) else ""
        return _record(arm, rnd, figures[arm, rnd], why)

    monkeypatch.setattr(bn, "run_record", fake_record)
    monkeypatch.delenv("FT_NODE_MAX_FAILS", raising=False)
    a = argparse.Namespace(replicas=2, repeats=4, heartbeat_timeout_ms=None, reread=tmp_path)
    out = io.StringIO()
    res = bn.bench(a, tmp_path, run=fake_run, out=out)
    assert res["order"] == [["good", "bad"], ["bad", "good"], ["good", "bad"], ["bad", "good"]]
    assert [(c.count_as_bad, c.nodes, c.cluster_nodes, c.failures, c.modes, c.spares)
            for c in seen[:2]] == [(False, 3, 3, 2, ("kill",), 0),
                                   (True, 3, 3, 2, ("kill",), 0)]  # fmt: skip
    bad, good = res["arms"]["bad"], res["arms"]["good"]
    assert bad["full_strength_s"] == {"median": 20.5, "spread": [18.0, 22.0],
                                      "values": [20.5, 18.0, 22.0], "n": 3}  # fmt: skip
    assert bad["left_out"] == ["round 4: the replica did not move off worker-1"]
    assert bad["runs_as_expected"] == 3 and bad["runs_total"] == 4
    assert good["full_strength_s"]["median"] == pytest.approx(4.95)
    assert good["full_strength_s"]["n"] == 4
    assert good["demo_full_strength_s"]["median"] == pytest.approx(4.45)
    assert good["first_failure_full_strength_s"]["values"] == [5.1, 4.8, 5.5, 5.0]
    assert res["bad_minus_good_median_s"] == pytest.approx(20.5 - 4.95)
    assert res["kills_per_run"] == 2 and res["nodes"] == 3
    assert res["knobs"]["FT_NODE_MAX_FAILS"] == 2
    json.dumps(res)  # --json prints it
    text = out.getvalue()
    assert "bad   median 20.50 s  (min 18.00 s, max 22.00 s, n 3)" in text
    assert "round 1 bad : [5.00 s, 20.50 s]  worker-1 -> worker-1 (restart in place) -> " \
           "worker-2 (requeue)" in text
    assert "left out: round 4: the replica did not move off worker-1" in text
    assert "bad - good (medians): +15.55 s" in text


def test_a_run_that_timed_out_is_kept_and_left_out(tmp_path, monkeypatch):
    def failing_run(cfg, say):
        raise UserError("demo stopped: timed out after 300 s waiting for replica 1 to heal")

    monkeypatch.delenv("FT_NODE_MAX_FAILS", raising=False)
    a = argparse.Namespace(replicas=2, repeats=3, heartbeat_timeout_ms=None, reread=tmp_path)
    res = bn.bench(a, tmp_path, run=failing_run, out=io.StringIO())
    good = res["arms"]["good"]
    assert good["full_strength_s"]["n"] == 0 and good["runs_total"] == 3
    assert good["left_out"][0] == ("round 1: demo stopped: timed out after 300 s waiting for "
                                   "replica 1 to heal")  # fmt: skip
    assert res["bad_minus_good_median_s"] is None


RECORDED = ROOT / "docs" / "cpu" / "2026-11-27" / "bad-node" / "bad-node-runs.tar.gz"


def test_a_recorded_run_of_each_arm_read_again(tmp_path):
    """Round 1 of the committed bench: the figures, the path and the drain read back."""
    import tarfile

    from ftslurm.demo import DemoConfig

    with tarfile.open(RECORDED) as tar:  # by hand: extractall's filter= is 3.10.12+
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith("./round1-") and ".." not in m.name:
                dest = tmp_path / m.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tar.extractfile(m).read())
    rec = {}
    for arm in ("good", "bad"):
        out = tmp_path / f"round1-{arm}"
        cfg = DemoConfig(replicas=2, failures=2, backend="slurm", outputs=out, nodes=3,
                         count_as_bad=arm == "bad", modes=("kill",))  # fmt: skip
        rec[arm] = bn.run_record(arm, 1, bn.recovery.kept_run(cfg), cfg, io.StringIO())
    good, bad = rec["good"], rec["bad"]
    assert good["as_expected"] and bad["as_expected"], (good["why_not"], bad["why_not"])
    assert good["full_strength_s"] == pytest.approx([5.647, 4.629], abs=0.01)
    assert bad["full_strength_s"] == pytest.approx([5.699, 14.917], abs=0.01)
    assert bad["measured_s"] == bad["full_strength_s"][-1]
    assert good["path_text"] == ("worker-1 -> worker-1 (restart in place) -> worker-1 (restart "
                                 "in place)")  # fmt: skip
    assert bad["path_text"] == "worker-1 -> worker-1 (restart in place) -> worker-2 (requeue)"
    assert good["taken_out"] == []
    [drain] = bad["taken_out"]
    assert (drain["node"], drain["action"]) == ("worker-1", "drain")
    assert drain["reason"].startswith("ftslurm: 2 failures of this array's replicas within 30 min")
    assert drain["undo"] == "sudo scontrol update NodeName=worker-1 State=RESUME"
    assert (bad["restarts_in_place"], bad["requeues"]) == (1, 1)
