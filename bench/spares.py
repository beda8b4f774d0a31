"""Time to full strength with warm spares vs without, on the local Slurm (or local) backend.

Runs `ftslurm demo` (the code path users run) with `--spares 0` and `--spares S`, alternating,
`--rounds` times each, `--failures` node failures per run, and reads the demo's own
measurement per failure: failure injected -> the replacing process (a warm spare that claimed
the slot, or the requeued replica) healed from a peer, committed a step, and the Lighthouse's
quorum is back at the group size. Prints per setting the list, the median and the spread
(min..max); `--json` prints one JSON object per setting on stdout:
`{"spares": S, "full_strength_s": [...], "median_full_strength_s": x, ...}`.

Run under the machine-wide lock (root, for the Slurm backend):
    flock /tmp/ftslurm-heavy.lock python bench/spares.py --rounds 2 --failures 3 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ftslurm.demo import DemoConfig, run_demo


def one_run(backend: str, spares: int, failures: int, outputs: Path) -> list[float]:
    cfg = DemoConfig(replicas=2, failures=failures, backend=backend, outputs=outputs,
                     spares=spares)  # fmt: skip
    t0 = time.monotonic()
    run_dir = run_demo(cfg, say=lambda m: print(f"  [spares={spares}] {m}", file=sys.stderr))
    figures = [float(m["full_strength_s"]) for m in cfg.measured]
    print(f"  [spares={spares}] run {run_dir}: {figures} ({time.monotonic() - t0:.0f} s)",
          file=sys.stderr)  # fmt: skip
    return figures


def summary(spares: int, figures: list[float], runs: int, backend: str) -> dict:
    return {
        "spares": spares,
        "backend": backend,
        "runs": runs,
        "full_strength_s": figures,
        "median_full_strength_s": round(statistics.median(figures), 2) if figures else None,
        "min_s": min(figures, default=None),
        "max_s": max(figures, default=None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["slurm", "local"], default="slurm")
    ap.add_argument("--spares", type=int, default=1, help="S of the run with spares [1]")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    ap.add_argument("--failures", type=int, default=3, help="node failures per run")
    ap.add_argument("--json", action="store_true", help="one JSON object per setting")
    args = ap.parse_args()
    results: dict[int, list[float]] = {0: [], args.spares: []}
    with tempfile.TemporaryDirectory(prefix="ftslurm-bench-spares-") as tmp:
        for r in range(args.rounds):
            for s in ((0, args.spares) if r % 2 == 0 else (args.spares, 0)):
                out = Path(tmp) / f"r{r}-s{s}"
                results[s] += one_run(args.backend, s, args.failures, out)
    rows = [summary(s, f, args.rounds, args.backend) for s, f in results.items()]
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print(f"spares={row['spares']}: time to full strength median "
                  f"{row['median_full_strength_s']} s (min {row['min_s']}, max {row['max_s']}, "
                  f"n={len(row['full_strength_s'])}): {row['full_strength_s']}")  # fmt: skip


if __name__ == "__main__":
    main()
