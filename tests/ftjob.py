"""Helpers for tests that run the real FT sbatch script on the local Slurm cluster."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ftslurm import knobs, lighthouse, logvocab
from ftslurm.replica.worker import checksum
from ftslurm.run.model import Run
from ftslurm.slurm import client
from ftslurm.wait import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
FT_SCRIPT = ROOT / "llama3.1-8b-pretraining-torchft.sh"
CLASSIC_SCRIPT = ROOT / "llama3.1-8b-pretraining.sh"
# logvocab's shapes as text patterns, for the tests that search a log's text themselves
STEP_RE = logvocab.STEP_TEXT
ANSI_RE = logvocab.ANSI_TEXT
# every knob of the registry and every Slurm/sbatch input variable: tests drop the caller's,
# so they see the defaults whatever the shell that runs pytest has exported
KNOB_ENV_RE = re.compile(
    r"^(SLURM_|SBATCH_|FTSLURM_|TORCHFT_|WANDB_)|^("
    + "|".join(re.escape(name) for name in knobs.KNOBS)
    + ")$"
)


@dataclass
class FTRun:
    job: int
    outputs: Path
    lighthouse: lighthouse.LighthouseInfo
    lighthouse_dir: Path
    run: Run = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.run = Run.of(self.job, self.outputs)

    @property
    def run_dir(self) -> Path:
        return self.run.folder

    def log(self, task: int) -> Path:
        return self.run.log(task)

    def text(self, task: int) -> str:
        p = self.log(task)
        return logvocab.strip_ansi_text(p.read_text(errors="replace")) if p.exists() else ""

    def steps(self, task: int) -> list[int]:
        """Every step the task's log shows, every attempt's (read incrementally)."""
        return [s.step for s in self.run.steps(task).read()]

    def last_step(self, task: int) -> int:
        s = self.steps(task)
        return s[-1] if s else -1

    def checksums(self, task: int) -> list[checksum.Record]:
        return list(checksum.parse(self.text(task).splitlines()))

    def tasks(self):
        return {j.array_task_id: j for j in client.current().jobs(self.job)}

    def lighthouse_log(self) -> str:
        return Path(self.lighthouse.log_path).read_text(errors="replace")


def lighthouse_argv(state_dir: Path, port: int) -> list[str]:
    """torchft's real Lighthouse on 127.0.0.1:`port`, quick quorums, started the way
    `ftslurm lighthouse start` starts it: this interpreter's torchft, not whichever
    `torchft_lighthouse` comes first on PATH (its launcher file goes in `state_dir`)."""
    return [
        *lighthouse.lighthouse_command(state_dir)[0],  # no binary given: no environment to add
        "--bind", f"127.0.0.1:{port}",
        "--min_replicas", "1",
        "--quorum_tick_ms", "100",
        "--join_timeout_ms", "10000",
    ]  # fmt: skip


def start_lighthouse(state_dir: Path) -> lighthouse.LighthouseInfo:
    return lighthouse.start(bind=f"0.0.0.0:{free_port()}", advertise="login-0", state_dir=state_dir)


class FTTestEnv(NamedTuple):
    """What a test of `ftslurm` commands against the real FT script sets up first."""

    outputs: Path
    lh_dir: Path
    lh: lighthouse.LighthouseInfo
    events: Path
    env: dict[str, str]  # for `ftslurm ...` subprocesses: the cluster's, outputs, event log


def ft_test_env(tmp_path: Path) -> FTTestEnv:
    """A Lighthouse of the test's own (stop it with `lighthouse.stop(lh_dir)`), outputs and an
    event log under `tmp_path`, and the environment `ftslurm` commands run with."""
    outputs = tmp_path / "outputs"
    lh_dir = outputs / "lighthouse"
    lh = start_lighthouse(lh_dir)
    events = tmp_path / "events.jsonl"
    env = {**client.current().environment(), "FTSLURM_OUTPUTS": str(outputs),
           "FTSLURM_EVENTS": str(events)}  # fmt: skip
    return FTTestEnv(outputs, lh_dir, lh, events, env)


def submit_ft(
    outputs: Path, lh: lighthouse.LighthouseInfo, replicas: int = 2, steps: int = 1000, **env
) -> int:
    """`DEVICE=cpu ftslurm submit --array=0-(N-1)` of the real FT script, from the repo root
    (where users run it), its outputs in `outputs`."""
    full = {
        **client.current().environment(),
        "DEVICE": "cpu",
        "STEPS": str(steps),
        "TORCHFT_LIGHTHOUSE": lh.address,
        "FTSLURM_OUTPUTS": str(outputs),
        **{k: str(v) for k, v in env.items()},
    }
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "submit", "--json", f"--array=0-{replicas - 1}",
         f"--output={outputs}/torchft/slurm-%A_%a.out", str(FT_SCRIPT)],
        env=full, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    import json

    return int(json.loads(out.stdout)["job_id"])


@contextlib.contextmanager
def ft_job(tmp_path: Path, replicas: int = 2, steps: int = 1000,
           **env: object) -> Iterator[tuple[FTTestEnv, int, list[Path]]]:  # fmt: skip
    """The real FT script submitted with a Lighthouse of its own (`ft_test_env`, `submit_ft`):
    the test env, the job id and the replicas' log paths; afterwards the job cancelled, every
    node RESUMEd and the Lighthouse stopped, whatever the test did."""
    t = ft_test_env(tmp_path)
    job = None
    try:
        job = submit_ft(t.outputs, t.lh, replicas=replicas, steps=steps, **env)
        run = Run.of(job, t.outputs)
        yield t, job, [run.log(i) for i in range(replicas)]
    finally:
        if job:
            cancel(job)
        resume_all_nodes()
        lighthouse.stop(t.lh_dir)


def cancel(job: int) -> None:
    subprocess.run(["scancel", str(job)], env=client.current().environment(), timeout=30,
                   check=False)  # fmt: skip


def resume_all_nodes() -> None:
    for node, state in client.current().nodes().items():
        if "down" in state or "drain" in state:
            client.current().update_node(node, "RESUME")


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}


FIRST_ERROR_RE = re.compile(r"terminate called|Fatal Python error|Traceback|Error:|FAILED")


def failure_excerpt(log: str, tail: int = 1500) -> str:
    """A failed job's log for an assertion message: the lines around its first error (a rank's
    abort sits far above torchrun's long summary, which alone filled a 3,000-character tail in
    CI) and the log's last `tail` characters."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if FIRST_ERROR_RE.search(line)), None)
    head = "" if first is None else "\n".join(lines[max(first - 3, 0) : first + 12])
    return f"first error:\n{head}\n...\nlast {tail} characters:\n{log[-tail:]}"


def checksums(text: str) -> dict[tuple[int, int, str], str]:
    """(step, rank, scope) -> parameter digest, from one replica's log."""
    return {(r.step, r.rank, r.scope): r.sha256 for r in checksum.parse(text.splitlines())}


def wait_healed_and_equal(healed: Callable[[], str], peer: Callable[[], str]) -> None:
    """Wait until the log text `healed()` (a restarted replica's, from its restart on) shows a
    heal and two checksummed steps it shares with `peer()`; assert their digests are equal."""
    wait_for(lambda: "Loaded state dict" in healed(), 180, 1, "the restarted replica to heal")

    def compared() -> list[tuple[int, int, str]] | None:
        both = sorted(set(checksums(healed())) & set(checksums(peer())))
        return both if len(both) >= 2 else None

    both = wait_for(compared, 180, 1, "two checksummed steps of the restarted replica")
    mine, theirs = checksums(healed()), checksums(peer())
    assert all(mine[k] == theirs[k] for k in both), both
