"""How fast a replica (re)starts on CPU: launcher banner -> torchtitan's `Starting job`
(goal <= 4 s) and -> its first step line, upstream's start (`old`) vs ftslurm's (`new`).

Each run is one real attempt of the launcher the sbatch script execs (`python -m
ftslurm.replica job`, DEVICE=cpu, the FT script's environment: replica 0 of a group of 1,
STEPS=1) against a Lighthouse this script starts on 127.0.0.1 (min_replicas 1), its output
appended to a log file that is polled every 10 ms: a line's time is when it first appears
there (the launcher flushes each line; the worker runs with -u). Group of 1: a restart in a
real group also fetches a checkpoint from a peer, which this does not measure.

Modes (a mode sets the cheaper-start switches of ftslurm/replica/worker/startup.py):
  old            FTSLURM_SKIP_TORCHRUN=0 FTSLURM_LAZY_COMPILE=0 (upstream's start)
  new            both on (the defaults)
  skip_torchrun  only FTSLURM_SKIP_TORCHRUN on;  lazy_compile  only FTSLURM_LAZY_COMPILE on
Runs alternate between the modes (the order flips every repeat), after one warm-up run of
each that is not counted (page cache, byte-compiled files, the local assets). Figures: the
median, min and max of each mode.

--importtime adds one run per mode under `python -X importtime` (not timed) and lists the
top-level imports between the banner and `Starting job`: where the time goes.

Run (heavy: under the lock):
  flock /tmp/ftslurm-heavy.lock python bench/restart_speed.py --repeats 5 --json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ftslurm import knobs, lighthouse, logvocab, procs, runner  # noqa: E402
from ftslurm.wait import free_port  # noqa: E402

MODES = {
    "old": {"FTSLURM_SKIP_TORCHRUN": "0", "FTSLURM_LAZY_COMPILE": "0"},
    "new": {"FTSLURM_SKIP_TORCHRUN": "1", "FTSLURM_LAZY_COMPILE": "1"},
    "skip_torchrun": {"FTSLURM_SKIP_TORCHRUN": "1", "FTSLURM_LAZY_COMPILE": "0"},
    "lazy_compile": {"FTSLURM_SKIP_TORCHRUN": "0", "FTSLURM_LAZY_COMPILE": "1"},
}
# milestone -> the bytes that mark it in the attempt's log (the first line that has them)
MARKS = {
    "banner": logvocab.BANNER,
    "starting_job": b"Starting job",
    "first_step": b"step:",
    "exited": b"exited with code",
}
GOAL_S = 4.0


def _clean_env() -> dict[str, str]:
    """This shell's env minus every knob and Slurm variable: the run sees the defaults."""
    drop = ("SLURM_", "SBATCH_", "FTSLURM_", "TORCHFT_", "WANDB_")
    return {k: v for k, v in os.environ.items()
            if not k.startswith(drop) and k not in knobs.KNOBS}  # fmt: skip


def one_run(mode: str, lh_address: str, work: Path, n: int, timeout: float,
            importtime: bool = False) -> dict:  # fmt: skip
    """One launcher attempt in `mode`; seconds from its spawn to each milestone.
    importtime: every interpreter of the attempt writes `python -X importtime` lines."""
    log = work / f"run-{n:02d}-{mode}{'-importtime' if importtime else ''}.out"
    env = {
        **_clean_env(),
        "DEVICE": "cpu",
        "STEPS": "1",
        "TORCHFT_LIGHTHOUSE": lh_address,
        "FTSLURM_REPLICA_ID": "0",
        "FTSLURM_GROUP_SIZE": "1",
        "FTSLURM_RUN_ID": f"restart-{n:02d}-{mode}",
        "FTSLURM_OUTPUTS": str(work / "outputs"),
        "FTSLURM_PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
        **MODES[mode],
    }
    if importtime:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    t0 = time.monotonic()
    proc = runner.spawn([sys.executable, "-m", "ftslurm.replica", "job"], log_path=log,
                        env=env, cwd=ROOT, detach=True)  # fmt: skip
    seen: dict[str, float] = {}
    offset, pending = 0, b""
    try:
        while time.monotonic() - t0 < timeout:
            done = proc.poll() is not None
            with open(log, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            now = time.monotonic() - t0
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                for mark, needle in MARKS.items():
                    if mark not in seen and needle in line:
                        seen[mark] = now
            if done:
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            procs.kill_pids(procs.process_tree(proc.pid), signal.SIGKILL)
        proc.wait(timeout=30)
    row: dict = {"mode": mode, "run": n, "log": log.name, "returncode": proc.returncode}
    row.update({f"{k}_s": round(v, 3) for k, v in seen.items()})
    b = seen.get("banner")
    for mark in ("starting_job", "first_step"):
        if b is not None and mark in seen:
            row[f"banner_to_{mark}_s"] = round(seen[mark] - b, 3)
    return row


IMPORT_LINE = re.compile(rb"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


# the costly subtrees of a start (inductor via flex attention, the varlen module that imports
# dynamo, datasets, pandas, DTensor) and torchrun's own entry point: cumulative seconds
NAMED = (
    "torch.distributed.run",
    "torch._inductor.compile_fx",
    "torch.nn.attention.varlen",
    "torchtitan.models.attention",
    "datasets",
    "pandas",
    "torch.distributed.tensor",
)


def import_breakdown(log: Path, floor_s: float = 0.03) -> dict:
    """From an --importtime run's log: the top-level imports (cumulative seconds, in the
    order they happened, those >= floor_s) between the banner and `Starting job`; with
    torchrun, its own imports come first, then its worker's (each starts with `torch`).
    `named`: the NAMED subtrees' cumulative seconds, summed over the processes (absent:
    not imported before `Starting job`)."""
    data = gzip.decompress(log.read_bytes()) if log.suffix == ".gz" else log.read_bytes()
    start = data.find(MARKS["banner"])
    end = data.find(MARKS["starting_job"], start)
    top: list[list] = []
    named: dict[str, float] = {}
    total = 0.0
    for line in data[start:end].split(b"\n"):
        m = IMPORT_LINE.match(line)
        if not m:
            continue
        name, cum = m[4].decode(), int(m[2]) / 1e6
        if name in NAMED:
            named[name] = round(named.get(name, 0.0) + cum, 3)
        if len(m[3]) == 1:  # one space after the bar: a top-level import
            total += cum
            if cum >= floor_s:
                top.append([name, round(cum, 3)])
    return {"log": log.name, "top_level_total_s": round(total, 3), "top_level": top,
            "named": named}  # fmt: skip


def summary(rows: list[dict], mode: str) -> dict:
    out: dict = {"switches": MODES[mode]}
    for key in ("banner_to_starting_job_s", "banner_to_first_step_s", "banner_s"):
        vals = [r[key] for r in rows if r["mode"] == mode and key in r]
        out[key] = vals
        if vals:
            out[f"median_{key}"] = round(statistics.median(vals), 3)
            out[f"spread_{key}"] = [min(vals), max(vals)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="counted runs per mode")
    ap.add_argument("--modes", default="old,new", help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--keep", type=Path, help="copy each run's log into this folder")
    ap.add_argument(
        "--importtime",
        action="store_true",
        help="one more run per mode under `python -X importtime` (not timed): "
        "the top-level imports between the banner and `Starting job`",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    ap.add_argument(
        "--breakdown",
        type=Path,
        nargs="+",
        metavar="LOG",
        help="only print import_breakdown of these --importtime logs (JSON)",
    )
    a = ap.parse_args()
    if a.breakdown:
        print(json.dumps([import_breakdown(p) for p in a.breakdown], indent=1))
        return 0
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes) or a.repeats < 1:
        print(f"Error: --modes takes a comma list of {', '.join(MODES)}; --repeats >= 1",
              file=sys.stderr)  # fmt: skip
        return 2
    rows: list[dict] = []
    breakdown: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="restart-speed-") as tmp:
        work = Path(tmp)
        lh = lighthouse.start(bind=f"127.0.0.1:{free_port()}", advertise="127.0.0.1",
                              state_dir=work / "lighthouse")  # fmt: skip
        try:
            n = 0
            for mode in modes:  # warm-up, not counted
                r = one_run(mode, lh.address, work, n, a.timeout)
                print(f"warm-up {mode}: {r}", file=sys.stderr)
                n += 1
            for rep in range(a.repeats):
                for mode in modes if rep % 2 == 0 else modes[::-1]:
                    r = one_run(mode, lh.address, work, n, a.timeout)
                    rows.append(r)
                    print(f"run {n} {mode}: {r}", file=sys.stderr)
                    n += 1
            for mode in modes if a.importtime else []:
                r = one_run(mode, lh.address, work, n, a.timeout, importtime=True)
                breakdown[mode] = import_breakdown(work / r["log"])
                print(f"importtime {mode}: {breakdown[mode]}", file=sys.stderr)
                n += 1
        finally:
            lighthouse.stop(work / "lighthouse")
            if a.keep:
                a.keep.mkdir(parents=True, exist_ok=True)
                for p in work.glob("run-*.out"):
                    (a.keep / p.name).write_bytes(p.read_bytes())
    result = {
        "goal_banner_to_starting_job_s": GOAL_S,
        "repeats": a.repeats,
        "cpu_count": os.cpu_count(),
        "modes": {m: summary(rows, m) for m in modes},
        "runs": rows,
    }
    if breakdown:
        result["importtime"] = breakdown
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        for m in modes:
            s = result["modes"][m]
            for key in ("banner_to_starting_job_s", "banner_to_first_step_s"):
                if f"median_{key}" in s:
                    lo, hi = s[f"spread_{key}"]
                    print(f"{m:14s} {key:26s} median {s[f'median_{key}']:6.2f} s  "
                          f"[{lo:.2f} .. {hi:.2f}]  n={len(s[key])}")  # fmt: skip
        for m, b in breakdown.items():
            print(f"{m}: top-level imports, banner -> Starting job (-X importtime, "
                  f"{b['top_level_total_s']:.2f} s in all)")  # fmt: skip
            for name, cum in b["top_level"]:
                print(f"  {cum:6.2f} s  {name}")
    failed = [r for r in rows if "banner_to_starting_job_s" not in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
