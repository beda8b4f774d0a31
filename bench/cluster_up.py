"""Time `cluster up` (to N idle nodes) and `cluster down` on this machine.

Run as root: python bench/cluster_up.py [--nodes 2 8 16] [--runs 3]
Uses its own state directory and free ports, so a running cluster is not disturbed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ftslurm.cluster import local


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    for n in a.nodes:
        ups, downs = [], []
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                local.up(nodes=n, state_dir=Path(d), timeout=60)
                t1 = time.perf_counter()
                local.down(Path(d))
                t2 = time.perf_counter()
            ups.append(t1 - t0)
            downs.append(t2 - t1)
        print(
            f"nodes={n:<3} up median {statistics.median(ups):5.2f} s "
            f"(min {min(ups):.2f}, max {max(ups):.2f})   "
            f"down median {statistics.median(downs):5.2f} s"
        )


if __name__ == "__main__":
    main()
