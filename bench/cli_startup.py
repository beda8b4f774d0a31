"""How fast `ftslurm --help` answers, as a ratio to a bare `python -c pass` (goal <= 3x).

Run: python bench/cli_startup.py [--runs 20]
Prints the median wall time of each and the ratio. The CLI imports its sub-commands lazily and
never torch, so this stays close to the interpreter's own start-up.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    bare = median_wall([sys.executable, "-c", "pass"], a.runs)
    help_ = median_wall([sys.executable, "-m", "ftslurm", "--help"], a.runs)
    version = median_wall([sys.executable, "-m", "ftslurm", "--version"], a.runs)
    print(f"python -c pass      median {bare * 1000:7.1f} ms")
    ratio = help_ / bare
    print(f"ftslurm --help      median {help_ * 1000:7.1f} ms  ratio {ratio:.2f}x (goal <= 3x)")
    print(f"ftslurm --version   median {version * 1000:7.1f} ms  ratio {version / bare:.2f}x")


if __name__ == "__main__":
    main()
