"""Throughput cost of fault tolerance on one device: classic torchtitan vs torchft per-step.

Issue 9, part 1. The same config is trained twice in one invocation, both through the very
launcher the sbatch scripts exec (`python -m ftslurm.replica classic|job`, no separate code
path):

1. classic: `python -m ftslurm.replica classic` with FTSLURM_SINGLE_NODE=1 (one torchrun on
   this machine instead of `srun` across nodes), FT off;
2. FT: the real torchft Lighthouse (`ftslurm.lighthouse.start` on a free port) and one replica
   group, `python -m ftslurm.replica job`, FT_MODE=per-step (a quorum and a cross-replica
   all-reduce every step, the launcher's fixes on: the synchronous quorum is part of the cost).

It reads torchtitan's step lines (`memory: 60.1GiB(75.9%)  tps: 12,345`) from each log and
prints tokens/s per device (mean over the steps after --warmup), peak memory (torchtitan's max
reserved; on CPU the process's peak RSS) and the FT/classic tokens/s ratio (goal >= 0.97).

Model on --device cuda: the Llama-3 8B shape with --layers of its 32 layers (flavour
`8B_bench`, registered by bench/gpu_model.py through torchtitan's --experimental.custom_import:
torchtitan 0.2.2 has no 1B/3B llama3 flavour and no --model.n_layers). 8 layers = 2.8 B
parameters: 16 bytes/param of fp32 weights, grads and AdamW states = 45 GB, plus activations
at seq_len 8192 with selective activation checkpointing, fits one 80 GB H100; the full 8B
(128 GB of states without FSDP sharding) does not. Tokenizer and data are the local ones
(`ftslurm assets make-local`): the GPU machine has no network. The tokenizer's ids (< 2000)
are a subset of the 128256-entry vocabulary, so the compute per token is the 8B shape's.
--device cpu --smoke: the debug model, a few steps, for the test suite.

Run (GPU): python bench/gpu_overhead.py --device cuda --json outputs/bench/overhead.json
Run (CPU smoke, ~1-2 min on 2 cores): python bench/gpu_overhead.py --device cpu --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ftslurm import lighthouse, logvocab, procs, runner  # noqa: E402
from ftslurm.failure_plan import is_training_worker  # noqa: E402
from ftslurm.replica import plan as planlib  # noqa: E402
from ftslurm.replica.worker import checksum  # noqa: E402
from ftslurm.run.progress import steps_in  # noqa: E402

ANSI = logvocab.ANSI_TEXT  # bench/gpu_heal.py strips its log's colours with it too
PARAMS_RE = re.compile(r"size:\s*([\d,]+) total parameters")
DEVICE_RE = re.compile(r"(?:CUDA|CPU|GPU) capacity: (?P<name>.+?) with (?P<gib>[\d.]+)GiB memory")


def say(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# Log parsing (pure)


@dataclass(frozen=True)
class Step:
    step: int
    memory_gib: float
    memory_pct: float
    tps: int


def parse_steps(text: str) -> list[Step]:
    """torchtitan step lines of one log that carry memory and throughput (the run model's
    step parser; colours are stripped there: the 8B TOMLs keep them on)."""
    return [
        Step(s.step, s.memory_gib, s.memory_pct, s.tps)
        for s in steps_in(text)
        if s.memory_gib is not None and s.memory_pct is not None and s.tps is not None
    ]


def parse_params(text: str) -> int | None:
    """The model's parameter count as torchtitan logs it (`size: 6,163,712 total parameters`)."""
    m = PARAMS_RE.search(ANSI.sub("", text))
    return int(m[1].replace(",", "")) if m else None


def parse_device(text: str) -> str | None:
    m = DEVICE_RE.search(ANSI.sub("", text))
    return f"{m['name']} ({m['gib']} GiB)" if m else None


@dataclass
class RunResult:
    """Figures of one training run, from its log."""

    name: str
    steps: int
    tps_mean: float
    tps_median: float
    peak_memory_gib: float
    peak_memory_pct: float
    params: int | None
    device: str | None
    log: str
    wall_s: float
    checksums_timed: int = 0  # parameter checksums taken during the timed steps


def summarize(name: str, text: str, warmup: int, log: Path, wall_s: float) -> RunResult:
    steps = parse_steps(text)
    if not steps:
        raise SystemExit(f"{name}: no torchtitan step lines in {log}; see the log")
    timed = [s for s in steps if s.step > warmup] or steps[-1:]
    tps = [s.tps for s in timed]
    peak = max(steps, key=lambda s: s.memory_gib)
    # a checksum after step k is paid in step k+1's time (torchtitan times log to log)
    sums = [r for r in checksum.parse(text.splitlines()) if warmup < r.step + 1 <= steps[-1].step]
    return RunResult(
        name=name,
        steps=len(steps),
        tps_mean=statistics.fmean(tps),
        tps_median=statistics.median(tps),
        peak_memory_gib=peak.memory_gib,
        peak_memory_pct=peak.memory_pct,
        params=parse_params(text),
        device=parse_device(text),
        log=str(log),
        wall_s=wall_s,
        checksums_timed=len(sums),
    )


# ----------------------------------------------------------------------------------------
# Launching the launcher (and tearing every process down by pid)


def children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for kid in children(todo.pop()):
            out.append(kid)
            todo.append(kid)
    return out


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Launch:
    """One `python -m ftslurm.replica <what>` process, its log, and every pid it started."""

    def __init__(self, what: str, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self.started = time.monotonic()
        self.proc: subprocess.Popen = runner.spawn(
            [sys.executable, "-m", "ftslurm.replica", what], log_path=log, env=env, cwd=ROOT
        )
        self.pids: set[int] = set()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def track(self) -> list[int]:
        """Remember the torchrun and worker pids (they outlive a SIGKILLed launcher)."""
        found = descendants(self.proc.pid)
        self.pids.update(found)
        return found

    def worker_pid(self) -> int | None:
        """The training process: torchrun's child, or the launcher's own child when it runs a
        one-rank replica without torchrun (FTSLURM_SKIP_TORCHRUN)."""
        for pid in procs.process_tree(self.proc.pid)[1:]:
            self.pids.add(pid)
            if is_training_worker(procs.cmdline(pid)):
                return pid
        return None

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.track()
            time.sleep(0.5)
        return self.proc.poll()

    def stop(self) -> None:
        self.track()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the launcher forwards it to torchrun
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        for pid in [self.proc.pid, *self.pids]:
            kill_pid(pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def base_env(device: str, out: Path) -> dict[str, str]:
    """The caller's environment without Slurm's variables (this is one machine), plus the
    knobs every benchmark run shares."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        DEVICE=device,
        GPUS_PER_NODE="1",
        FTSLURM_OUTPUTS=str(out / "outputs"),
        PYTHONUNBUFFERED="1",
        # bench/gpu_model.py is imported as `bench.gpu_model` by the training process
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
    )
    return env


def model_args(device: str, smoke: bool, layers: int, extra: list[str]) -> tuple[dict, list[str]]:
    """(env, torchtitan arguments) that pick the benchmark model and the local data."""
    env = {"FTSLURM_BENCH_LAYERS": str(layers)}
    args = ["--experimental.custom_import=bench.gpu_model"]
    if device == "cuda":
        tok, data = planlib.local_assets(ROOT)
        args += [
            "--model.flavor=8B_bench",
            f"--model.hf_assets_path={tok}",
            "--training.dataset=c4_test",
            f"--training.dataset_path={data}",
            "--lr_scheduler.warmup_steps=2",
            "--metrics.log_freq=1",
        ]
    elif smoke:
        args += ["--training.local_batch_size=4"]
    return env, args + extra


def ensure_local_assets() -> None:
    """The local tokenizer and dataset (the GPU machine cannot download any)."""
    tok, data = planlib.local_assets(ROOT)
    if not (tok / "tokenizer_config.json").exists() or not (data / "data.jsonl").exists():
        from ftslurm.replica import assets

        say(f"building local assets under {tok.parent}")
        assets.make_local(tok.parent)


def start_lighthouse(out: Path) -> lighthouse.LighthouseInfo:
    """The real Lighthouse on a free port (port 0: the OS picks; never the default 29510)."""
    info = lighthouse.start(bind="127.0.0.1:0", state_dir=out / "lighthouse")
    say(f"Lighthouse pid {info.pid} at {info.address}")
    return info


def write_json(path: Path, device: str, **figures: Any) -> None:
    """The figures of one run for docs/benchmarks.md: date, device and versions first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device, "versions": versions()}
    path.write_text(json.dumps({**head, **figures}, indent=2))


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "torchtitan", "torchft-nightly"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# ----------------------------------------------------------------------------------------


def run_one(
    name: str, what: str, env: dict[str, str], out: Path, warmup: int, timeout: float
) -> RunResult:
    log = out / f"{name}.log"
    say(f"{name}: python -m ftslurm.replica {what} (log {log})")
    launch = Launch(what, env, log)
    try:
        rc = launch.wait(timeout)
    finally:
        launch.stop()
    wall = time.monotonic() - launch.started
    if rc != 0:
        tail = "\n".join(launch.text().splitlines()[-15:])
        raise SystemExit(f"{name}: launcher ended with {rc} after {wall:.0f} s; log tail:\n{tail}")
    res = summarize(name, launch.text(), warmup, log, wall)
    say(f"{name}: {res.steps} steps in {wall:.0f} s, tps {res.tps_mean:,.0f}")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="few steps (the test suite's mode)")
    ap.add_argument("--steps", type=int, help="training steps per run [cuda 30, cpu 6]")
    ap.add_argument("--warmup", type=int, help="steps left out of tokens/s [cuda 5, cpu 2]")
    ap.add_argument("--layers", type=int, default=8, help="layers of the 8B shape (cuda) [8]")
    ap.add_argument("--timeout", type=float, default=270.0, help="seconds per run [270]")
    ap.add_argument("--out", type=Path, help="folder for logs [a temporary folder]")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--checksum-every",
        type=int,
        help="FT run: parameter checksum every N steps [cuda 25: one in the timed steps, twice "
        "the launcher's rate of 50, so the ratio is a lower bound; cpu: the launcher's 1; 0: off]",
    )
    ap.add_argument("--extra", default="", help="more torchtitan arguments for both runs")
    ap.add_argument(
        "--dry-run", action="store_true", help="print both launcher commands (FTSLURM_DRY_RUN=1)"
    )
    a = ap.parse_args(argv)
    steps = a.steps or (30 if a.device == "cuda" else 6)
    checksum_every = a.checksum_every
    if checksum_every is None:
        checksum_every = 25 if a.device == "cuda" else 1
    warmup = a.warmup if a.warmup is not None else (5 if a.device == "cuda" else 2)
    if a.dry_run:  # prints paths, writes nothing: no temporary folder, no assets built
        out = (a.out or Path(tempfile.gettempdir(), "ftslurm-overhead-XXXXXXXX")).resolve()
    else:
        out = (a.out or Path(tempfile.mkdtemp(prefix="ftslurm-overhead-"))).resolve()
        out.mkdir(parents=True, exist_ok=True)
        ensure_local_assets()

    menv, margs = model_args(a.device, a.smoke, a.layers, a.extra.split())
    common = base_env(a.device, out)
    common.update(menv, STEPS=str(steps), FTSLURM_EXTRA_ARGS=" ".join(margs))

    classic_env = dict(common, FTSLURM_SINGLE_NODE="1", FTSLURM_RUN_ID="bench-classic")
    if a.device == "cuda":
        classic_env["FTSLURM_PRESET"] = "llama3_8b"
    if a.dry_run:
        ft_env = dict(common, FT_MODE="per-step", FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1")
        if a.device == "cuda":
            ft_env["FTSLURM_PRESET"] = "llama3_8b_ft"
        for what, env in (("classic", classic_env), ("job", ft_env)):
            done = runner.run(
                [sys.executable, "-m", "ftslurm.replica", what],
                env=dict(env, FTSLURM_DRY_RUN="1"),
                cwd=ROOT,
                check=False,
            )
            print(done.stdout + done.stderr, end="")
        print("(the FT run sets TORCHFT_LIGHTHOUSE to the Lighthouse it starts on a free port "
              "of 127.0.0.1, not the default above)")  # fmt: skip
        return 0
    classic = run_one("classic", "classic", classic_env, out, warmup, a.timeout)

    info = start_lighthouse(out)
    try:
        ft_env = dict(
            common,
            FT_MODE="per-step",
            FTSLURM_REPLICA_ID="0",
            FTSLURM_GROUP_SIZE="1",
            FTSLURM_RUN_ID="bench-ft",
            TORCHFT_LIGHTHOUSE=info.address,
            FTSLURM_CHECKSUM_EVERY=str(checksum_every),
        )
        if a.device == "cuda":
            ft_env["FTSLURM_PRESET"] = "llama3_8b_ft"
        ft = run_one("ft", "job", ft_env, out, warmup, a.timeout)
    finally:
        say(f"Lighthouse: {lighthouse.stop(out / 'lighthouse')}")

    ratio = ft.tps_mean / classic.tps_mean if classic.tps_mean else float("nan")
    device = ft.device or classic.device or a.device
    print(f"device: {device}")
    print("versions: " + " ".join(f"{k}={v}" for k, v in versions().items()))
    model = "Llama-3 debug model" if a.device == "cpu" else f"Llama-3 8B shape, {a.layers} layers"
    print(f"model: {model}, {ft.params or classic.params or 0:,} parameters; {steps} steps, "
          f"tokens/s averaged over steps {warmup + 1}..{steps}")  # fmt: skip
    for r in (classic, ft):
        print(
            f"{r.name:<8} tokens/s {r.tps_mean:12.1f}   median {r.tps_median:12.1f}   "
            f"peak memory {r.peak_memory_gib:.2f} GiB ({r.peak_memory_pct:.1f}%)"
        )
    print(f"ratio ft/classic tokens/s: {ratio:.3f} (goal >= 0.97)")
    print(
        f"ft: {ft.checksums_timed} parameter checksum(s) in the timed steps "
        f"(every {checksum_every} steps; the launcher's default on cuda is 50)"
    )
    print(f"logs: {out}")
    if a.json:
        write_json(
            a.json, device, model=model, steps=steps, warmup=warmup, classic=asdict(classic),
            ft=asdict(ft), ratio=ratio, checksum_every=checksum_every,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
