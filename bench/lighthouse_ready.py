"""Time from `ftslurm lighthouse start` to a Lighthouse answering HTTP (goal < 1 s), as a ratio
to the bare `torchft_lighthouse` binary's own start-up (exec → its port answers HTTP).

Run: python bench/lighthouse_ready.py [--runs 5]
Prints one line per figure: medians over --runs, each run on a fresh free port and state dir.
- `ftslurm lighthouse start` (console script, wall time until it returns: it returns only
  once the Lighthouse answers), and `lighthouse.start()` (the Python API, in this process);
- the bare `torchft_lighthouse` console script, and torchft's Lighthouse loaded directly (the
  launcher `start` uses; skips `import torch`), both timed from exec to HTTP 200 on /status.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ftslurm import daemon, runner
from ftslurm import lighthouse as lh
from ftslurm.wait import free_port


def bare_ready(cmd: list[str], port: int, timeout: float = 60.0) -> float:
    """exec `cmd` and poll its HTTP port every 5 ms; seconds until it answers 200."""
    url = f"http://127.0.0.1:{port}/status"
    t0 = time.perf_counter()
    proc = runner.spawn(cmd)
    try:
        daemon.wait_ready(lambda: lh.answers(url, 0.5), pid=proc.pid, poll=proc.poll,
                          timeout=timeout, interval=0.005)  # fmt: skip
        return time.perf_counter() - t0
    finally:
        daemon.stop(proc.pid, grace=5)
        proc.wait(10)


def cli_ready(ftslurm: list[str], port: int, state: Path) -> float:
    t0 = time.perf_counter()
    runner.run([*ftslurm, "lighthouse", "start", "--bind", f"127.0.0.1:{port}",
                "--state-dir", str(state)], timeout=120)  # fmt: skip
    dt = time.perf_counter() - t0
    assert lh.answers(f"http://127.0.0.1:{port}/status")
    lh.stop(state, grace=5)
    return dt


def api_ready(port: int, state: Path) -> float:
    t0 = time.perf_counter()
    lh.start(bind=f"127.0.0.1:{port}", state_dir=state)
    dt = time.perf_counter() - t0
    lh.stop(state, grace=5)
    return dt


def median(f: Callable[[int, Path], float], runs: int, tmp: Path, name: str) -> float:
    times = [f(free_port(), tmp / f"{name}-{i}") for i in range(runs)]
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    script = shutil.which("torchft_lighthouse")
    if script is None:
        sys.exit("torchft_lighthouse not found: pip install torchft-nightly")
    exe = Path(sys.executable).with_name("ftslurm")
    ftslurm = [str(exe)] if exe.exists() else [sys.executable, "-m", "ftslurm"]
    # the binary from the same environment (not a pyenv shim, which adds its own start-up)
    same_env = Path(sys.executable).with_name("torchft_lighthouse")
    binary = str(same_env) if same_env.exists() else script
    args = ["--min_replicas", "1", "--quorum_tick_ms", "100", "--join_timeout_ms", "10000"]

    with tempfile.TemporaryDirectory(prefix="lh-bench-") as d:
        tmp = Path(d)
        launcher, _ = lh.lighthouse_command(tmp, None)  # the direct launcher, written into tmp

        def bare(port: int, _: Path) -> float:
            return bare_ready([binary, "--bind", f"127.0.0.1:{port}", *args], port)

        def direct(port: int, _: Path) -> float:
            return bare_ready([*launcher, "--bind", f"127.0.0.1:{port}", *args], port)

        t_bare = median(bare, a.runs, tmp, "bare")
        t_direct = median(direct, a.runs, tmp, "direct")
        t_cli = median(lambda p, s: cli_ready(ftslurm, p, s), a.runs, tmp, "cli")
        t_api = median(api_ready, a.runs, tmp, "api")

    goal = "ok" if t_cli < 1.0 else "MISSED"
    print(f"bare torchft_lighthouse exec->HTTP ready   median {t_bare:7.3f} s")
    print(f"direct-loaded Lighthouse exec->HTTP ready  median {t_direct:7.3f} s  "
          f"ratio {t_direct / t_bare:.2f}x of bare")  # fmt: skip
    print(f"ftslurm lighthouse start -> ready (CLI)    median {t_cli:7.3f} s  "
          f"ratio {t_cli / t_bare:.2f}x of bare  (goal < 1 s: {goal})")  # fmt: skip
    print(f"lighthouse.start() -> ready (Python API)   median {t_api:7.3f} s  "
          f"ratio {t_api / t_bare:.2f}x of bare")  # fmt: skip


if __name__ == "__main__":
    main()
