"""Recovery timings per failure, on the local Slurm and/or the local backend.

Runs `ftslurm demo` with --failures N (the same code path users run) and reads the figures
from the same `ftslurm report` users get (its JSON). For each failure it prints:
  kill -> survivor's next committed step      (goal <= Lighthouse heartbeat timeout + 1 step)
  node DOWN -> replica running again          (Slurm only; goal <= 10 s)
  replica running -> first healed commit      (goal <= 10 s on CPU)
  failure -> full strength                    (group whole again, the healed replica committed)
  heal: the joiner's `healing required` -> `Loaded state dict.` (quorum reply, the
        transfer FTSLURM_HEAL_TRANSPORT selects, the load), and its share of running -> healed
and the medians, then the run's replica-step goodput beside its step ratio (both from the
report's summary: `goodput`, `step_ratio`).

`--spares S` runs the demo with S warm spares (FT_SPARES=S, S more array tasks).
`--heartbeat-timeout-ms N` starts its Lighthouse with that heartbeat timeout.
`--json` prints, on stdout, `{"spares": S, "full_strength_s": [..],
"median_full_strength_s": x, "detection_s": [..], "goodput": g, ...}` (one object per
backend: a list with `--backend both`); the table then goes to stderr.

Run (root for the Slurm backend):
  python bench/recovery.py --backend slurm --replicas 2 --spares 0 --failures 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from ftslurm.demo import DemoConfig, run_demo
from ftslurm.lighthouse.config import LighthouseConfig
from ftslurm.report import build_report


def _t(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _fmt(x: float | None) -> str:
    return f"{x:6.2f} s" if x is not None else "     n/a"


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def measure(backend: str, failures: int, outputs: Path, replicas: int = 2,
            spares: int = 0, out=sys.stdout,
            heartbeat_timeout_ms: int | None = None) -> dict[str, Any]:
    cfg = DemoConfig(replicas=replicas, failures=failures, backend=backend, outputs=outputs,
                     spares=spares, heartbeat_timeout_ms=heartbeat_timeout_ms)  # fmt: skip
    run_dir = run_demo(cfg, say=lambda m: print(f"  {m}", file=sys.stderr))
    rep = build_report(str(run_dir)).to_json()
    failures_ = [f for f in rep["failures"] if f.get("kind") in ("node-down", "kill")]
    attempts = sorted(
        (a for a in rep["attempts"] if a["attempt"] > 0), key=lambda a: _t(a["start_time"])
    )
    heals = sorted(
        (r for r in rep["recoveries"] if r["time"] and r["healed_time"]),
        key=lambda r: _t(r["time"]),
    )
    rows: dict[str, list[float]] = {
        "kill_to_survivor_commit": [], "down_to_running": [], "running_to_healed": [],
        "full_strength": [], "heal_required_to_loaded": [],
    }  # fmt: skip
    transport = os.environ.get("FTSLURM_HEAL_TRANSPORT", "default")
    hb = heartbeat_timeout_ms or LighthouseConfig().heartbeat_timeout_ms
    print(f"\n{backend}: {len(failures_)} failures, {spares} spares (run dir {run_dir}), heal "
          f"transport {transport}, heartbeat timeout {hb} ms", file=out)  # fmt: skip
    print("  #  failure -> survivor commit   DOWN -> running again   running -> healed commit"
          "   failure -> full strength   heal: required -> loaded (share)", file=out)
    for i, f in enumerate(failures_):
        # with spares the replacement is a warm spare already running: the next attempt is
        # the failed task coming back as a spare, not what restored full strength
        nxt = attempts[i] if i < len(attempts) and not spares else None
        a = f["to_next_commit_s"]
        b = (
            _t(nxt["start_time"]) - _t(f["time"])
            if nxt and backend == "slurm" and nxt["start_time"]
            else None
        )
        c = (
            _t(nxt["first_commit_time"]) - _t(nxt["start_time"])
            if nxt and nxt["first_commit_time"]
            else None
        )
        d = f["time_to_full_strength_s"]
        h = _t(heals[i]["healed_time"]) - _t(heals[i]["time"]) if i < len(heals) else None
        for key, v in zip(rows, (a, b, c, d, h), strict=True):
            if v is not None:
                rows[key].append(v)
        share = f" ({h / c:5.1%})" if h is not None and c else ""
        print(f"  {i + 1}  {_fmt(a)}                {_fmt(b)}               {_fmt(c)}"
              f"               {_fmt(d)}             {_fmt(h)}{share}", file=out)
    med = {k: _median(v) for k, v in rows.items()}
    print(
        f"  median {_fmt(med['kill_to_survivor_commit'])}                "
        f"{_fmt(med['down_to_running'])}               {_fmt(med['running_to_healed'])}"
        f"               {_fmt(med['full_strength'])}"
        f"             {_fmt(med['heal_required_to_loaded'])}", file=out,
    )
    sm = rep["summary"]
    g, ratio = sm["goodput"], sm["step_ratio"]
    print(f"  goodput (replica-steps) {_pct(g)}, step ratio {_pct(ratio)}, lost {sm['lost']}, "
          f"false quorum drops {sm['false_drops']}", file=out)
    return {
        "backend": backend, "replicas": replicas, "spares": spares,
        "failures": len(failures_),
        "full_strength_s": rows["full_strength"],
        "median_full_strength_s": _r(med["full_strength"]),
        "detection_s": rows["kill_to_survivor_commit"],
        "median_detection_s": _r(med["kill_to_survivor_commit"]),
        "down_to_running_s": [_r(x) for x in rows["down_to_running"]],
        "running_to_healed_s": [_r(x) for x in rows["running_to_healed"]],
        "heal_required_to_loaded_s": [_r(x) for x in rows["heal_required_to_loaded"]],
        "heal_transport": transport, "heartbeat_timeout_ms": heartbeat_timeout_ms,
        "demo_full_strength_s": [m["full_strength_s"] for m in cfg.measured],
        "goodput": g, "step_ratio": ratio, "lost": sm["lost"],
        "failure_free_step_rate": sm["failure_free_step_rate"],
        "false_drops": sm["false_drops"], "run_dir": str(run_dir),
    }  # fmt: skip


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["slurm", "local", "both"], default="both")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--spares", type=int, default=0,
                    help="Warm spares: FT_SPARES, S more array tasks")
    ap.add_argument("--failures", type=int, default=5)
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                    help="The Lighthouse's heartbeat timeout [its default]")
    ap.add_argument("--json", action="store_true",
                    help="Print the figures as JSON on stdout (the table goes to stderr).")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run under this outputs dir.")
    a = ap.parse_args()
    if a.spares < 0 or a.replicas < 2 or a.failures < 0:
        ap.error("--spares >= 0, --replicas >= 2 and --failures >= 0")
    out = sys.stderr if a.json else sys.stdout
    backends = ["slurm", "local"] if a.backend == "both" else [a.backend]
    results = []
    for b in backends:
        if a.keep:
            results.append(measure(b, a.failures, a.keep, a.replicas, a.spares, out,
                                      a.heartbeat_timeout_ms))
        else:
            with tempfile.TemporaryDirectory() as d:
                results.append(measure(b, a.failures, Path(d), a.replicas, a.spares, out,
                                          a.heartbeat_timeout_ms))
    print(
        "\nnotes: 'running' = the launcher's first line of the new attempt (1 s resolution; "
        "n/a with spares: a warm spare takes over); the heal waits for the next DiLoCo sync.",
        file=out,
    )
    if a.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=1))


if __name__ == "__main__":
    main()
