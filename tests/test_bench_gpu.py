"""The GPU benchmarks (bench/gpu_overhead.py, bench/gpu_heal.py) on CPU.

The GPU figures come from a GPU machine (docs/benchmarks.md); here the same scripts run in
their `--device cpu --smoke` mode -- the same launcher, Lighthouse and log parsing, the debug
model -- so a change that breaks them is caught without a GPU. Plus the launcher knob they
need (FTSLURM_SINGLE_NODE=1: the classic job without srun) and the log parsers, fast.

Every process a smoke run starts is stopped by pid, also when the test fails or times out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftslurm import lighthouse
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import job

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_overhead  # noqa: E402

NUMBER = r"([0-9][0-9,]*\.?[0-9]*)"


# --------------------------------------------------------------------------------------------
# fast


def test_single_node_classic_runs_torchrun_without_srun() -> None:
    env = {"DEVICE": "cuda", "FTSLURM_SINGLE_NODE": "1", "GPUS_PER_NODE": "1", "STEPS": "30"}
    p = planlib.build_classic_plan(env, ROOT, head_node="localhost", torchrun=["torchrun"])
    assert p.argv[:6] == [
        "torchrun",
        "--nnodes=1",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0",
        "--rdzv_id=classic_local",
    ]
    assert "srun" not in p.argv and p.torchrun_is_child
    # without the knob: srun, and the node count must come from Slurm
    env.pop("FTSLURM_SINGLE_NODE")
    env["SLURM_NNODES"] = "2"
    p = planlib.build_classic_plan(env, ROOT, head_node="w0")
    assert p.argv[0] == "srun" and not p.torchrun_is_child


def test_single_node_dry_run_needs_no_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"DEVICE": "cpu", "FTSLURM_SINGLE_NODE": "1", "FTSLURM_DRY_RUN": "1", "PATH": ""}
    assert job.main(["classic"], env) == 0  # no scontrol (PATH is empty)
    out = capsys.readouterr().out
    assert "launching classic job local on" in out
    assert "--rdzv_endpoint=localhost:0" in out and "srun" not in out


def test_overhead_cuda_dry_run_prints_both_commands_and_writes_nothing(tmp_path: Path) -> None:
    """The free first check on a GPU machine (docs/benchmarks.md): the cuda commands are built
    from the 8B presets and the bench's model, and no temporary folder is left behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, "bench/gpu_overhead.py", "--device", "cuda", "--dry-run"],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("command: ")]
    assert len(commands) == 2 and done.stdout.count("nothing started") == 2
    classic, ft = commands
    assert "/slurm/configs/llama3_8b.toml" in classic and "srun" not in classic
    assert "/slurm/configs/llama3_8b_ft.toml" in ft and "--fault_tolerance.enable" in ft
    for command in commands:
        assert "--model.flavor=8B_bench" in command
        assert "--experimental.custom_import=bench.gpu_model" in command
    assert "free port of 127.0.0.1" in done.stdout
    assert list(tmp.iterdir()) == []


def test_parse_steps_plain_and_coloured() -> None:
    plain = (
        "[titan] 2026-11-23 10:34:45,050 - root - INFO - step:  1  loss:  8.14386  "
        "grad_norm:  0.8774  memory:  1.00GiB(4.26%)  tps: 146  tflops: 0.01  mfu: 0.00%"
    )
    coloured = (
        "[titan] 2026-11-23 08:54:46,955 - root - INFO - \x1b[31mstep: 12  \x1b[32mloss:  8.09969"
        "  \x1b[38;2;180;60;0mgrad_norm:  0.3656  \x1b[38;2;54;234;195mmemory: 61.20GiB(77.31%)"
        "  \x1b[34mtps: 12,345  \x1b[36mtflops: 300.1  \x1b[35mmfu: 30.00%\x1b[39m"
    )
    steps = gpu_overhead.parse_steps("\n".join([plain, "noise tps: 5", coloured]))
    assert [(s.step, s.memory_gib, s.memory_pct, s.tps) for s in steps] == [
        (1, 1.0, 4.26, 146),
        (12, 61.2, 77.31, 12345),
    ]
    assert gpu_overhead.parse_params("\x1b[31msize: 6,163,712 total parameters\x1b[39m") == 6163712


# --------------------------------------------------------------------------------------------
# smoke runs (real training on CPU)


def _descendants(pid: int) -> list[int]:
    return gpu_overhead.descendants(pid)


def _run_bench(args: list[str], out: Path, timeout: float) -> str:
    """Run a bench script; on any exit path kill every process it started (by pid) and stop
    any Lighthouse it left under `out`."""
    log = out.parent / (out.name + ".stdout")
    seen: set[int] = set()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, *args, "--out", str(out)],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update(_descendants(proc.pid))
            time.sleep(0.5)
        text = log.read_text(errors="replace")
        assert proc.poll() is not None, f"bench still running after {timeout} s:\n{text[-3000:]}"
        assert proc.returncode == 0, text[-3000:]
        return text
    finally:
        seen.update(_descendants(proc.pid))
        for pid in [proc.pid, *seen]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
        for pidfile in out.rglob("lighthouse.pid"):
            lighthouse.stop(pidfile.parent)


def _number(text: str, pattern: str) -> float:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in:\n{text[-3000:]}"
    return float(m[1].replace(",", ""))


@pytest.mark.training
@pytest.mark.timeout(300)
def test_overhead_smoke_on_cpu(tmp_path: Path) -> None:
    text = _run_bench(
        ["bench/gpu_overhead.py", "--device", "cpu", "--smoke"], tmp_path / "overhead", 240
    )
    for name in ("classic", "ft"):
        assert _number(text, rf"(?m)^{name}\s+tokens/s\s+{NUMBER}") > 0
        assert _number(text, rf"(?m)^{name}\s+tokens/s.*peak memory {NUMBER} GiB") > 0
    assert _number(text, rf"(?m)^ratio ft/classic tokens/s: {NUMBER}") > 0
    # steps 3..6 are timed; checksums after steps 2..5 are paid in them (one per step on cpu)
    assert "ft: 4 parameter checksum(s) in the timed steps (every 1 steps" in text
    assert "versions: " in text and "torchtitan=0.2.2" in text


@pytest.mark.training
@pytest.mark.timeout(360)
def test_heal_smoke_on_cpu(tmp_path: Path) -> None:
    text = _run_bench(["bench/gpu_heal.py", "--device", "cpu", "--smoke"], tmp_path / "heal", 300)
    assert "FSDP applied: yes" in text
    assert ("survivor's torchft Manager: torchft quorum: sync (before forward); heal transport: "
            "HTTPTransport, survivor waits up to 600 s") in text  # fmt: skip
    assert _number(text, rf"transfer bytes {NUMBER}") > 0
    assert _number(text, rf"seconds {NUMBER}") > 0
    assert _number(text, rf"GB/s {NUMBER}") > 0
    assert "survivor alive" in text
    m = re.search(r"after the heals: (\d+)/(\d+) checksums identical", text)
    assert m and int(m[2]) >= 2 and m[1] == m[2], text[-3000:]
    assert "verdict: OK: replicas identical after the heal" in text
