"""Recovery timings per failure, on the local Slurm and/or the local backend.

Runs `ftslurm demo` with --failures N (the same code path users run) and reads the figures
from the same `ftslurm report` users get (its JSON). For each failure it prints:
  kill -> survivor's next committed step      (goal <= Lighthouse heartbeat timeout + 1 step)
  node DOWN -> replica running again          (Slurm only; goal <= 10 s)
  replica running -> first healed commit      (goal <= 10 s on CPU)
  heal: the joiner's `healing required` -> `Loaded state dict.` (quorum reply, the
        transfer FTSLURM_HEAL_TRANSPORT selects, the load), and its share of the above
and the medians.

Run (root for the Slurm backend):  python bench/recovery.py --backend both --failures 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from ftslurm.demo import DemoConfig, run_demo
from ftslurm.report import build_report


def _t(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _fmt(x: float | None) -> str:
    return f"{x:6.2f} s" if x is not None else "     n/a"


def measure(backend: str, failures: int, outputs: Path) -> dict[str, list[float]]:
    cfg = DemoConfig(replicas=2, failures=failures, backend=backend, outputs=outputs)
    run_dir = run_demo(cfg, say=lambda m: print(f"  {m}", file=sys.stderr))
    rep = build_report(str(run_dir)).to_json()
    failures_ = [f for f in rep["failures"] if f.get("kind") in ("node-down", "kill")]
    to_commit = rep["summary"]["failure_to_next_commit_s"]
    attempts = sorted(
        (a for a in rep["attempts"] if a["attempt"] > 0), key=lambda a: _t(a["start_time"])
    )
    heals = sorted(
        (r for r in rep["recoveries"] if r["time"] and r["healed_time"]),
        key=lambda r: _t(r["time"]),
    )
    rows = {"kill_to_survivor_commit": [], "down_to_running": [], "running_to_healed": [],
            "heal_required_to_loaded": []}  # fmt: skip
    transport = os.environ.get("FTSLURM_HEAL_TRANSPORT", "default")
    print(f"\n{backend}: {len(failures_)} failures (run dir {run_dir}), heal transport {transport}")
    print("  #  failure -> survivor commit   DOWN -> running again   running -> healed commit"
          "   heal: required -> loaded (share)")  # fmt: skip
    for i, f in enumerate(failures_):
        nxt = attempts[i] if i < len(attempts) else None
        a = to_commit[i] if i < len(to_commit) else None
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
        h = _t(heals[i]["healed_time"]) - _t(heals[i]["time"]) if i < len(heals) else None
        for key, v in zip(rows, (a, b, c, h), strict=True):
            if v is not None:
                rows[key].append(v)
        share = f" ({h / c:5.1%})" if h is not None and c else ""
        print(f"  {i + 1}  {_fmt(a)}                {_fmt(b)}               {_fmt(c)}"
              f"             {_fmt(h)}{share}")  # fmt: skip
    med = {k: statistics.median(v) if v else None for k, v in rows.items()}
    print(
        f"  median {_fmt(med['kill_to_survivor_commit'])}                "
        f"{_fmt(med['down_to_running'])}               {_fmt(med['running_to_healed'])}"
        f"             {_fmt(med['heal_required_to_loaded'])}"
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["slurm", "local", "both"], default="both")
    ap.add_argument("--failures", type=int, default=5)
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run under this outputs dir.")
    a = ap.parse_args()
    backends = ["slurm", "local"] if a.backend == "both" else [a.backend]
    for b in backends:
        if a.keep:
            measure(b, a.failures, a.keep)
        else:
            with tempfile.TemporaryDirectory() as d:
                measure(b, a.failures, Path(d))
    print(
        "\nnotes: 'running' = the launcher's first line of the new attempt (1 s resolution); "
        "heartbeat timeout = 5 s (torchft default); the heal waits for the next DiLoCo sync."
    )


if __name__ == "__main__":
    main()
