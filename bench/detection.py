"""Detection vs false drops: a soak at one Lighthouse heartbeat timeout, false drops counted.

A lower heartbeat timeout detects a failure sooner (the survivors wait that long for the next
quorum), but a live replica that goes silent for longer (a loaded node, a long pause) is
dropped from the quorum: a false drop, which `ftslurm report` counts (a replica that left
a quorum and came back as the same process, `summary.false_drops`). This runs the soak of
bench/soak.py (local backend: the real launcher and Lighthouse, a replica other than 0
SIGKILLed every --every seconds) with `--heartbeat-timeout-ms`, optionally with --load busy
processes competing for the cores, and prints the report's figures.

Run (under the heavy-work lock, <= 10 min):
  python bench/detection.py --heartbeat-timeout-ms 1000 --every 40 --count 10 --json
`--json` prints on stdout {"heartbeat_timeout_ms", "load", "failures", "false_drops",
"median_detection_s", "median_full_strength_s", "goodput", "step_ratio", "heals", "wall_s"}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from soak import _s, heartbeat_timeout, report_figures, soak

from ftslurm.demo import DemoConfig


def _burn(stop: float) -> None:
    """Busy loop until the monotonic time `stop`: load on one core."""
    while time.monotonic() < stop:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heartbeat-timeout-ms", type=int, required=True)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--every", type=float, default=40.0)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", type=int, default=0, help="Busy processes beside the soak.")
    ap.add_argument("--keep", type=Path, default=None, help="Keep outputs here.")
    ap.add_argument("--json", action="store_true", help="Print the figures as JSON on stdout.")
    a = ap.parse_args()
    if a.heartbeat_timeout_ms < 1 or a.count < 1 or a.load < 0:
        ap.error("--heartbeat-timeout-ms >= 1, --count >= 1, --load >= 0")
    heartbeat_timeout(a.heartbeat_timeout_ms)
    out = a.keep or Path(tempfile.mkdtemp(prefix="ftslurm-detection-"))
    cfg = DemoConfig(replicas=a.replicas, backend="local", down_for=2.0, outputs=out,
                     steps=1_000_000, timeout=300)  # fmt: skip
    t0 = time.monotonic()
    budget = a.every * (a.count + 2) + 120  # the soak, its start and its end
    burners = [mp.Process(target=_burn, args=(t0 + budget,), daemon=True) for _ in range(a.load)]
    for p in burners:
        p.start()
    try:
        res = soak(cfg, a.every, a.count, a.seed)
    finally:
        for p in burners:
            p.terminate()
            p.join(5)
    fig = report_figures(res["backend"].run_dir)
    result = {
        "heartbeat_timeout_ms": a.heartbeat_timeout_ms, "load": a.load,
        "replicas": a.replicas, "every_s": a.every, "injected": a.count,
        "heals": res["healed"], "wall_s": round(time.monotonic() - t0, 1),
        "run_dir": str(res["backend"].run_dir), **fig,
    }  # fmt: skip
    text = (f"heartbeat timeout {a.heartbeat_timeout_ms} ms, load {a.load}: "
            f"{fig['failures']} failures ({a.count} injected), {res['healed']} heals, "
            f"false quorum drops {fig['false_drops']}, median detection "
            f"{_s(fig['median_detection_s'])}, goodput {fig['goodput']}")
    print(text, file=sys.stderr if a.json else sys.stdout)
    if a.json:
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
