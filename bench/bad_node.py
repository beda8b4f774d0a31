"""Failure -> full strength when the failed replica's node is bad vs when it is good.

On the local Slurm with real training; a bad node is drained and the replica must move to
another node.

Both arms run one story with `ftslurm demo`'s code, through bench/recovery.py's demo_config
and figures (the CPU debug model through the FT sbatch script, 2 replicas, no spare), on a
cluster of one node more than the replicas, so that there is a free node to move to: replica 1
is killed FT_NODE_MAX_FAILS times (2 by default) on its node (simulate-failure --mode kill),
and the last kill is the failure measured.
  good: the kills are simulate-failure's own, which the launcher does not hold against the
        node: each one restarts the training in place (FT_MAX_RESTARTS), on the same node.
  bad:  the kills are marked --count-as-bad, as a crash nobody injected is counted: the last
        one reaches FT_NODE_MAX_FAILS on that node within FT_FAIL_WINDOW_MIN, the launcher
        drains the node and requeues, and Slurm starts the replica on the free node.
The arms differ in that mark alone. A kill counted against its node models a node that keeps
failing: the rule that takes it out (failure_history.bad_node) is the one a real crash loop meets.
A pre-flight check failed on purpose (FTSLURM_PREFLIGHT_FAIL) cannot model it here: the knob
is fixed when the array is submitted, and the launcher re-runs the check with the same
environment when it restarts in place, so the node would either fail before it ever trained
or never fail.

After each run the drained node is brought back with the command `ftslurm doctor` prints for
it (its `drained nodes` check), so that every run starts from idle nodes. The cluster is
started once for the whole bench (and stopped at the end if the bench started it).

`--repeats R` (at least 3) rounds of both arms, their order rotating each round
(recovery.schedule). Per arm: the median, min, max and n of failure -> full strength (the
report's time_to_full_strength_s: the failure to the failed slot's first commit in a quorum
back at the group size) over the runs whose replica took the arm's path (bad: its node drained
and the replica on another node; good: no node taken out), the demo's own clock beside it,
and per run every failure's figures, the nodes the replica's attempts ran on and the 1-minute
load average at its start. `--json`: one object on stdout; the tables go to stderr.

Run (root: the local Slurm cluster; under the heavy lock):
  flock /tmp/ftslurm-heavy.lock python bench/bad_node.py --repeats 3 --json --keep DIR
  python bench/bad_node.py --repeats 3 --json --reread DIR   # the kept runs, read again
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recovery  # noqa: E402

from ftslurm import doctor, knobs, paths, runner  # noqa: E402
from ftslurm.demo import DemoConfig, run_demo  # noqa: E402
from ftslurm.errors import UserError  # noqa: E402
from ftslurm.report import build_report  # noqa: E402

ARMS = {
    "good": "kills not held against the node: restarts in place",
    "bad": "kills --count-as-bad: the node drained at FT_NODE_MAX_FAILS, the replica moves",
}
TARGET = "1"  # the replica the demo's story fails (its first failure's target)
STORY_KNOBS = ("FT_NODE_MAX_FAILS", "FT_FAIL_WINDOW_MIN", "FT_MAX_FAILS", "FT_MAX_RESTARTS",
               "FTSLURM_BAD_NODES")  # fmt: skip


def kills_per_run(env: Mapping[str, str]) -> int:
    """The kills of each run: as many as take a bad node out (FT_NODE_MAX_FAILS). Raises
    UserError when the environment leaves no rule that takes a node out."""
    limit = knobs.get(env, "FT_NODE_MAX_FAILS")
    if limit < 1 or knobs.get(env, "FTSLURM_BAD_NODES") == "off":
        raise UserError("the bad arm needs the launcher to take a node out: unset "
                        "FT_NODE_MAX_FAILS=0 / FTSLURM_BAD_NODES=off")  # fmt: skip
    return limit


def replica_path(rep: Mapping[str, Any], replica: str = TARGET) -> list[dict[str, Any]]:
    """The attempts of `replica` in a report (its JSON), in the order they started: node and
    how each began (`start`, `restart in place`, `requeue`). By start time, not by the
    attempt number: a restart in place keeps Slurm's."""
    atts = [a for a in rep.get("attempts", []) if a.get("replica") == replica]
    atts.sort(key=lambda a: (a.get("start_time") or "", a.get("restart_in_place") or 0))
    out = []
    for i, a in enumerate(atts):
        how = ("start" if i == 0 else
               "restart in place" if a.get("restart_in_place") else "requeue")  # fmt: skip
        out.append({"node": a.get("node"), "how": how, "start_time": a.get("start_time")})
    return out


def path_text(path: list[dict[str, Any]]) -> str:
    """`worker-1 -> worker-1 (restart in place) -> worker-2 (requeue)`."""
    return " -> ".join(f"{p['node']}" + ("" if p["how"] == "start" else f" ({p['how']})")
                       for p in path) or "n/a"  # fmt: skip


def judge(arm: str, path: list[dict[str, Any]], taken_out: list[dict[str, Any]]) -> str:
    """Why this run does not show the arm's path ('' when it does). bad: the node the replica
    started on drained, the replica's last attempt on another node; good: no node taken out."""
    if not path:
        return "no attempt of the failed replica in the report"
    first, last = path[0]["node"], path[-1]["node"]
    if arm == "good":
        if taken_out:
            return "a node was taken out: " + "; ".join(f"{t['node']} {t['action']}"
                                                        for t in taken_out)  # fmt: skip
        return ""
    if not any(t["node"] == first and t["action"] == "drain" for t in taken_out):
        return f"{first} was not drained"
    if last == first:
        return f"the replica did not move off {first}"
    return ""


def undo_commands(check: doctor.Check | None) -> list[list[str]]:
    """The commands `ftslurm doctor`'s `drained nodes` check gives to bring each node back
    (`once fixed, bring each back: sudo scontrol ...; sudo scontrol ...`), as argv lists; no
    `sudo` (the bench runs as root)."""
    if check is None:
        return []
    out = []
    for line in check.fix.split(": ", 1)[1].split("; "):
        argv = shlex.split(line)
        out.append(argv[1:] if argv[:1] == ["sudo"] else argv)
    return out


def reset_cluster(say: Callable[[str], None]) -> list[str]:
    """The state every run starts from: the previous run's job gone (the demo's scancel ends
    it a moment later), then every node an FT launcher drained brought back with the
    doctor's commands; the commands run. Waits until sinfo shows none drained."""
    from ftslurm.cluster import local
    from ftslurm.slurm import client
    from ftslurm.wait import wait_for

    spec = local.load_spec(paths.cluster_dir())
    if spec is not None:
        wait_for(lambda: not local.active_jobs(spec), 60, interval=0.5,
                 what="the run's job gone")  # fmt: skip
    slurm = client.current()
    cmds = undo_commands(doctor.check_drained(slurm.node_reasons()))
    for argv in cmds:
        say(f"undo (ftslurm doctor's command): {shlex.join(argv)}")
        runner.run(argv, timeout=30, env=slurm.environment())
    wait_for(lambda: doctor.check_drained(client.current().node_reasons()) is None, 30,
             interval=0.5, what="no node drained by ftslurm")  # fmt: skip
    return [shlex.join(c) for c in cmds]


def run_record(arm: str, rnd: int, run_dir: Path, cfg: DemoConfig, out) -> dict[str, Any]:
    """One run's figures: recovery.figures (the report's, per failure; its table to `out`),
    the report's breakdown of each failure, the failed replica's path, the nodes taken out,
    and whether the run took the arm's path."""
    fig = recovery.figures(run_dir, cfg, out, mode="kill")
    rep = build_report(str(run_dir)).to_json()
    fails = [{k: f.get(k) for k in ("time", "replica", "node", "kind", "detection_s",
                                     "degraded_s", "healing_s", "time_to_full_strength_s")}
             for f in rep["failures"] if f.get("kind") == "kill"]  # fmt: skip
    path = replica_path(rep)
    taken = [{k: b.get(k) for k in ("node", "action", "reason", "undo")}
             for b in rep.get("bad_nodes", [])]  # fmt: skip
    full = fig["full_strength_s"]
    why = judge(arm, path, taken)
    if not why and len(full) != cfg.failures:
        why = f"{len(full)} failures in the report, {cfg.failures} injected"
    return {
        "arm": arm, "round": rnd, "run_dir": str(run_dir),
        "measured_s": full[-1] if full and not why else None,
        "full_strength_s": full,
        "demo_full_strength_s": fig["demo_full_strength_s"],
        "failures": fails, "path": path, "path_text": path_text(path), "taken_out": taken,
        "as_expected": not why, "why_not": why or None,
        "restarts_in_place": rep["summary"].get("restarts_in_place"),
        "requeues": rep["summary"].get("requeues"),
    }  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's figures over its runs: the measured (last) failure's time to full strength
    (report, and the demo's clock) over the runs that took the arm's path; the first
    failure's beside it (every arm restarts the first kill in place)."""
    ok = [r for r in runs if r.get("as_expected")]
    return {
        "full_strength_s": recovery.spread([r["measured_s"] for r in ok]),
        "demo_full_strength_s": recovery.spread(
            [r["demo_full_strength_s"][-1] if r["demo_full_strength_s"] else None for r in ok]),
        "first_failure_full_strength_s": recovery.spread(
            [r["full_strength_s"][0] if r["full_strength_s"] else None for r in ok]),
        "runs_as_expected": len(ok), "runs_total": len(runs),
        "left_out": [f"round {r['round']}: {r.get('why_not') or r.get('error')}"
                     for r in runs if not r.get("as_expected")],
    }  # fmt: skip


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} s"


def table(res: Mapping[str, Any]) -> list[str]:
    """The summary: per arm median (min .. max, n), then every run."""
    lines = ["", f"failure -> full strength, the last of {res['kills_per_run']} kills of "
             f"replica {TARGET} per run ({res['replicas']} replicas, {res['nodes']} nodes, "
             "no spare):"]  # fmt: skip
    for arm in ARMS:
        s = res["arms"][arm]
        fs, demo = s["full_strength_s"], s["demo_full_strength_s"]
        lo, hi = fs["spread"] or (None, None)
        lines.append(f"  {arm:4}  median {_fmt(fs['median'])}  (min {_fmt(lo)}, max "
                     f"{_fmt(hi)}, n {fs['n']})  demo's clock median {_fmt(demo['median'])}  "
                     f"[{ARMS[arm]}]")  # fmt: skip
        for why in s["left_out"]:
            lines.append(f"        left out: {why}")
    lines.append("  runs (round, arm: each failure's time to full strength; the replica's path):")
    for arm in ARMS:
        for r in res["arms"][arm]["runs"]:
            figs = ", ".join(_fmt(x) for x in r.get("full_strength_s", []))
            lines.append(f"    round {r['round']} {arm:4}: [{figs}]  {r.get('path_text', '')}"
                         f"  load {r.get('load_1m')}")  # fmt: skip
    if (d := res.get("bad_minus_good_median_s")) is not None:
        lines.append(f"  bad - good (medians): {d:+.2f} s")
    return lines


def bench(a: argparse.Namespace, outputs: Path, run: Callable[..., Path] = run_demo,
          out=sys.stderr) -> dict[str, Any]:  # fmt: skip
    """Every round's runs in recovery.schedule's order; the result (`--json`'s object).
    `run`: the demo (recovery.kept_run reads a kept bench again)."""
    kills = kills_per_run(os.environ)
    rounds = recovery.schedule(list(ARMS), a.repeats, control=False)
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}

    def say(m: str) -> None:
        print(f"  {m}", file=out, flush=True)

    for r, order in enumerate(rounds):
        for arm in order:
            d = outputs / f"round{r + 1}-{arm}"
            d.mkdir(parents=True, exist_ok=True)
            cfg = recovery.demo_config("slurm", kills, d, a.replicas, 0, a.heartbeat_timeout_ms,
                                       "kill")  # fmt: skip
            cfg.nodes, cfg.count_as_bad = a.replicas + 1, arm == "bad"
            load = round(os.getloadavg()[0], 2)
            print(f"\nround {r + 1}: {arm} ({ARMS[arm]}), load {load}", file=out, flush=True)
            try:
                rec = run_record(arm, r + 1, run(cfg, say=say), cfg, out)
            except UserError as e:  # a run that timed out: said, kept, left out
                say(f"run failed: {e}")
                rec = {"arm": arm, "round": r + 1, "error": str(e), "as_expected": False}
            rec["load_1m"] = load
            if not a.reread:
                rec["undo"] = reset_cluster(say)
            runs[arm].append(rec)
    arms = {arm: {**summarize(rs), "what": ARMS[arm], "runs": rs} for arm, rs in runs.items()}
    good, bad = (arms[x]["full_strength_s"]["median"] for x in ("good", "bad"))
    res = {
        "replicas": a.replicas, "nodes": a.replicas + 1, "spares": 0, "kills_per_run": kills,
        "mode": "kill", "repeats": a.repeats, "order": rounds,
        "knobs": {k: knobs.get(os.environ, k) for k in STORY_KNOBS},
        "heartbeat_timeout_ms": a.heartbeat_timeout_ms,
        "bad_minus_good_median_s": None if good is None or bad is None else round(bad - good, 3),
        "arms": arms,
    }  # fmt: skip
    for line in table(res):
        print(line, file=out)
    return res


def _cluster(nodes: int, say: Callable[[str], None]) -> bool:
    """The local cluster up with `nodes` nodes for the whole bench (the demo finds it up and
    leaves it up); whether the bench started it."""
    from ftslurm.cluster import local

    state = paths.cluster_dir()
    was_up = local.status(state).running
    spec = local.up(nodes=nodes, state_dir=state, progress=say)
    os.environ["SLURM_CONF"] = str(spec.conf_path)
    return not was_up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="Rounds of both arms [3]")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                    help="The Lighthouse's heartbeat timeout [its default]")
    ap.add_argument("--json", action="store_true",
                    help="Print the figures as JSON on stdout (the tables go to stderr)")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the runs under this folder")
    ap.add_argument("--reread", type=Path, default=None,
                    help="Run nothing: read the runs a bench kept with --keep DIR again")
    a = ap.parse_args()
    if a.replicas < 2 or a.repeats < 3:
        ap.error("--replicas >= 2 and --repeats >= 3 (medians of at least 3)")
    try:
        kills_per_run(os.environ)
    except UserError as e:
        ap.error(str(e))
    if a.reread is not None:
        res = bench(a, a.reread, run=recovery.kept_run)
    else:
        started = _cluster(a.replicas + 1, lambda m: print(f"  {m}", file=sys.stderr))
        try:
            if a.keep:
                res = bench(a, a.keep)
            else:
                with tempfile.TemporaryDirectory() as d:
                    res = bench(a, Path(d))
        finally:
            if started:
                from ftslurm.cluster import local

                local.down(paths.cluster_dir())
    if a.json:
        print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
