"""What asynchronous model checkpoints cost training: tokens over total time, with and without.

One replica of the CPU debug model (the `debug_cpu` preset, per-step FT, the real Lighthouse,
the launcher the sbatch script runs: `python -m ftslurm.replica job`) trains `--steps` steps
twice per repeat, alternated (with, without; then without, with; ...): once with the preset's
checkpoints (async, every `--interval` steps, keep_latest_k 2) and once with
`--checkpoint.no-enable`. Each run's figure is the tokens of its steps after `--warmup` over the
wall time between those step lines (torchtitan's own timestamps), so every save's staging and
its background write inside that window count, start-up and the end's final save do not. Both
arms pay fix 9's per-step data position save (torchtitan 0.2.2 writes it in every FT run).

Prints `{"ratio": median(with) / median(without), "spread": [min, max] of the per-repeat
ratios, "interval": N, ...}`; the default interval is debug_cpu's and should keep the ratio at
or above 0.99. Also `per_save_s`: what each save added to the 3 steps after it, against the
run's median step (measured inside one run, so the shared machine's run-to-run noise, larger
than the cost, cancels), and `ratio_from_per_save`, the ratio that gives at the interval, 60
and 120.

On one GPU (`--device cuda`): the 8B FT preset (llama3_8b_ft.toml: seq_len 8192, async
checkpoints, keep_latest_k 2) with bench/gpu_model.py's `8B_bench` flavour of `--layers` of the
8B shape's 32 layers, on the local tokenizer and data (bench/gpu_overhead.py's model
arguments: the GPU machine has no network). One layer (1.3 B parameters, embeddings
included) gives a ~15 GB save (fp32 weights and AdamW states): about one rank's shard of the
8B model on an 8-GPU node (~12 GB), which is what each rank stages and writes at a save.
Measured on one H200 (docs/benchmarks.md, docs/gpu/2026-11-28/checkpoint/): 20.5-24.8 s of
training stopped per save (staging 10-13 s, then the FT save's wait for the write), whatever
the step; hence the 8B presets' interval of 1200 steps.

Run (under the shared lock on a shared machine; ~1 min per run on 2 cores at --steps 63):
  flock /tmp/ftslurm-heavy.lock python bench/checkpoint_cost.py --json
  python bench/checkpoint_cost.py --device cuda --layers 1 --interval 15 --steps 50 --json
Measured (2 cores, shared, 3 repeats): --interval 60 --steps 63: ratio 0.9896, spread
0.966-1.036, and again 0.9888, spread 0.989-1.052 (the machine's noise is larger than the
cost); per save 0.115 s (0.041-0.178, 3 saves) at a 0.859 s step: 0.9978 from the per-save
figure (docs/cpu/2026-11-27/checkpoint/); --interval 5 --steps 23: ratio 0.9494, spread
0.9475-0.9956, i.e. ~0.2 s a save.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the cpu extra installs tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import gpu_overhead  # noqa: E402
from ftslurm import knobs, lighthouse, procs, runner  # noqa: E402
from ftslurm.replica import plan as planlib  # noqa: E402
from ftslurm.run.progress import steps_in  # noqa: E402
from ftslurm.wait import free_port  # noqa: E402

SAVED_RE = re.compile(r"Finished saving the checkpoint")
PRESET_OF = {"cpu": "debug_cpu", "cuda": "llama3_8b_ft"}  # the launcher's preset per device
WINDOW = 3  # steps after a save that its cost is looked for in


def preset(device: str) -> dict:
    with open(ROOT / planlib.CONFIG_DIR / planlib.PRESETS[PRESET_OF[device]].toml, "rb") as f:
        return tomllib.load(f)


def preset_interval() -> int:
    return int(preset("cpu")["checkpoint"]["interval"])


def tokens_per_step(device: str) -> int:
    """The preset's local_batch_size x seq_len: one replica of one rank."""
    training = preset(device)["training"]
    return int(training["local_batch_size"]) * int(training["seq_len"])


def _env(work: Path, lh: str, name: str, steps: int, device: str) -> dict[str, str]:
    drop = ("SLURM_", "SBATCH_", "FTSLURM_", "TORCHFT_", "WANDB_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in knobs.KNOBS}
    env.update(DEVICE=device, GPUS_PER_NODE="1", STEPS=str(steps), FT_MODE="per-step",
               TORCHFT_LIGHTHOUSE=lh, FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
               FTSLURM_RUN_ID=name, FTSLURM_PRESET=PRESET_OF[device],
               FTSLURM_OUTPUTS=str(work / "outputs"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
               PYTHONUNBUFFERED="1")  # fmt: skip
    return env


def one_run(arm: str, n: int, work: Path, lh: str, steps: int, interval: int, warmup: int,
            timeout: float, device: str = "cpu", layers: int = 1,
            folder: Path | None = None, async_mode: str = "") -> dict:  # fmt: skip
    """One launcher run; tokens/s between the step line after `warmup` and the last one.
    `folder`: the checkpoints go to `<folder>/<run>` (CHECKPOINT_FOLDER), removed after."""
    name = f"ckpt-{n:02d}-{arm}"
    env = _env(work, lh, name, steps, device)
    if folder is not None:
        env["CHECKPOINT_FOLDER"] = str(folder / name)
    ckpt = (f"--checkpoint.enable --checkpoint.interval={interval} --checkpoint.keep_latest_k=2"
            if arm == "with" else "--checkpoint.no-enable")  # fmt: skip
    if arm == "with" and async_mode:
        ckpt += f" --checkpoint.async_mode={async_mode}"
    if device == "cuda":
        model_env, model = gpu_overhead.model_args(device, False, layers, [])
        env.update(model_env)
        ckpt = " ".join([*model, ckpt])
    env["FTSLURM_EXTRA_ARGS"] = ckpt
    log = work / f"{name}.out"
    proc = runner.spawn([sys.executable, "-m", "ftslurm.replica", "job"], log_path=log,
                        env=env, cwd=ROOT, detach=True)  # fmt: skip
    try:
        proc.wait(timeout=timeout)
    except Exception:
        procs.kill_pids(procs.process_tree(proc.pid), signal.SIGKILL)
        proc.wait(timeout=30)
    if folder is not None:
        shutil.rmtree(folder / name, ignore_errors=True)
    text = log.read_text(errors="replace")
    times = {r.step: r.time for r in steps_in(text) if r.time is not None}
    first, last = warmup, max(times, default=0)
    if first not in times or last <= first:
        raise SystemExit(f"run {name} has no steps {first}..{steps} (exit {proc.returncode}); "
                         f"log: {log}\n{text[-2000:]}")  # fmt: skip
    elapsed = times[last] - times[first]
    deltas = {s: times[s] - times[s - 1] for s in range(first + 1, last + 1)
              if s in times and s - 1 in times}  # fmt: skip
    return {"arm": arm, "run": n, "steps": last - first, "seconds": round(elapsed, 3),
            "tokens_per_s": round((last - first) * tokens_per_step(device) / elapsed, 1),
            "saves": len(SAVED_RE.findall(text)), "returncode": proc.returncode,
            "step_s": round(statistics.median(deltas.values()), 4),
            "save_excess_s": save_excess(deltas, interval) if arm == "with" else []}  # fmt: skip


def save_excess(deltas: dict[int, float], interval: int, window: int = WINDOW) -> list[float]:
    """Seconds each save added to the steps after it: the staging runs after step N's line
    (N a multiple of the interval), the background write beside the next steps, so the
    `window` steps after N against the run's median step elsewhere. A figure per save, measured
    inside one run, so the machine's run-to-run noise (the shared cores) cancels out."""
    saves = [s for s in deltas if s % interval == 0 and all(s + j in deltas
                                                           for j in range(1, window + 1))]
    near = {s + j for s in saves for j in range(1, window + 1)}
    rest = [d for s, d in deltas.items() if s not in near]
    if not saves or not rest:
        return []
    base = statistics.median(rest)
    return [round(sum(deltas[s + j] for j in range(1, window + 1)) - window * base, 4)
            for s in saves]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=int, default=preset_interval(),
                    help="checkpoint every N steps (default: debug_cpu.toml's)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=0,
                    help="steps per run (default: 3 intervals + warmup)")  # fmt: skip
    ap.add_argument("--warmup", type=int, default=3, help="steps not counted")
    ap.add_argument("--repeats", type=int, default=3, help="runs per arm (>= 3)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: the debug model; cuda: the 8B FT preset with --layers layers")
    ap.add_argument("--layers", type=int, default=1,
                    help="cuda: layers of the 8B shape (1: a ~15 GB save, one 8B rank's shard)")
    ap.add_argument("--json", action="store_true", help="print only the JSON figures")
    ap.add_argument("--folder", type=Path, default=None,
                    help="write the checkpoints under this folder (default: the run's own "
                         "<dump folder>/checkpoint in a temporary folder)")  # fmt: skip
    ap.add_argument("--async-mode", default="", choices=("", "async", "async_with_pinned_mem"),
                    help="torchtitan's checkpoint.async_mode (default: the preset's)")
    ap.add_argument("--logs", type=Path, default=None,
                    help="copy each run's launcher log here (the raw record of the figures)")
    a = ap.parse_args()
    if a.repeats < 3 or a.interval < 1 or a.warmup < 1:
        print("Error: --repeats >= 3, --interval >= 1, --warmup >= 1", file=sys.stderr)
        return 2
    steps = a.steps or a.warmup + 3 * a.interval
    rows: list[dict] = []
    if a.device == "cuda":
        gpu_overhead.ensure_local_assets()
    with tempfile.TemporaryDirectory(prefix="checkpoint-cost-") as tmp:
        work = Path(tmp)
        lh = lighthouse.start(bind=f"127.0.0.1:{free_port()}", advertise="127.0.0.1",
                              state_dir=work / "lighthouse")  # fmt: skip
        try:
            n = 0
            for rep in range(a.repeats):
                for arm in ("with", "without") if rep % 2 == 0 else ("without", "with"):
                    try:
                        row = one_run(arm, n, work, lh.address, steps, a.interval, a.warmup,
                                      a.timeout, a.device, a.layers, a.folder,
                                      a.async_mode)  # fmt: skip
                    finally:
                        if a.logs is not None:
                            a.logs.mkdir(parents=True, exist_ok=True)
                            for log in work.glob(f"ckpt-{n:02d}-*.out"):
                                shutil.copy(log, a.logs / log.name)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
                    n += 1
        finally:
            lighthouse.stop(work / "lighthouse")
    per = {arm: [r["tokens_per_s"] for r in rows if r["arm"] == arm] for arm in ("with", "without")}
    ratios = [w / o for w, o in zip(per["with"], per["without"], strict=True)]
    out = {"ratio": round(statistics.median(per["with"]) / statistics.median(per["without"]), 4),
           "spread": [round(min(ratios), 4), round(max(ratios), 4)], "interval": a.interval,
           "steps": steps, "warmup": a.warmup, "repeats": a.repeats,
           "tokens_per_s": {k: statistics.median(v) for k, v in per.items()},
           "saves_per_run": [r["saves"] for r in rows if r["arm"] == "with"],
           "device": a.device, "cpu_count": os.cpu_count(),
           "folder": str(a.folder) if a.folder else "the run's dump folder",
           "async_mode": a.async_mode or preset(a.device)["checkpoint"]["async_mode"],
           **({"layers": a.layers} if a.device == "cuda" else {})}  # fmt: skip
    excess = [x for r in rows for x in r["save_excess_s"]]
    if excess:  # the per-save cost, and the ratio it gives at other intervals
        step_s = statistics.median(r["step_s"] for r in rows if r["arm"] == "without")
        per_save = statistics.median(excess)
        out["per_save_s"] = {"median": round(per_save, 4), "saves": len(excess),
                             "spread": [round(min(excess), 4), round(max(excess), 4)]}
        out["step_s"] = round(step_s, 4)
        out["ratio_from_per_save"] = {
            str(i): round(1 - per_save / (i * step_s + per_save), 4)
            for i in sorted({a.interval, 60, 120})
        }  # fmt: skip
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
