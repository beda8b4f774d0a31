"""Real training on CPU: the real `torchft_lighthouse`, two replicas of the debug model started
through `python -m ftslurm.replica job`, a SIGKILLed training worker, a restarted replica that
heals from the survivor, and the launcher's parameter checksums compared across replicas.

No mocks. Every process started here is killed by pid at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ftslurm import runner
from ftslurm.failure_plan import is_training_worker
from ftslurm.replica.worker import checksum, ft_checkpoints
from ftslurm.run.progress import StepReader
from ftslurm.wait import free_port, wait_for
from tests.ftjob import lighthouse_argv

pytestmark = [pytest.mark.training, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return kids


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a for a in f.read().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class Replica:
    """One `python -m ftslurm.replica job` attempt and the pids of its worker (and torchrun)."""

    replica_id: int
    attempt: int
    log: Path
    proc: subprocess.Popen
    pids: set[int] = field(default_factory=set)
    step_reader: StepReader | None = field(default=None, repr=False)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def worker_pid(self) -> int | None:
        """The training process: the launcher's child (one rank: FTSLURM_SKIP_TORCHRUN), or
        torchrun's child, in a session of its own (FTSLURM_SKIP_TORCHRUN=0)."""
        for child in _children(self.proc.pid):
            self.pids.add(child)
            if is_training_worker(_cmdline(child)):
                return child
            for worker in _children(child):
                self.pids.add(worker)
                return worker
        return None

    def steps(self) -> list[tuple[float, int, float]]:
        """(time, step, memory GiB) of each timed step line with its memory (the run model's
        incremental step reader: each call parses only the lines appended since)."""
        if self.step_reader is None:
            self.step_reader = StepReader(self.log)
        return [(s.time, s.step, s.memory_gib) for s in self.step_reader.read()
                if s.time is not None and s.memory_gib is not None]  # fmt: skip

    def checksums(self) -> dict[tuple[int, str], str]:
        return {(r.step, r.scope): r.sha256 for r in checksum.parse(self.text().splitlines())}

    def lrs(self) -> dict[int, tuple[str, ...]]:
        """The learning rates each committed step trained with, by step, as float.hex (rank 0;
        per-step mode only)."""
        recs = checksum.lrs_by_key(checksum.parse_lrs(self.text().splitlines()))
        return {step: lrs for (rank, step), lrs in recs.items() if rank == 0}

    def stop(self) -> None:
        self.worker_pid()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the launcher forwards it to torchrun
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        for pid in [self.proc.pid, *self.pids]:
            _kill(pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class Run:
    """A Lighthouse plus replicas for one test, all torn down by pid."""

    def __init__(self, tmp: Path, mode: str, extra_env: dict[str, str]) -> None:
        self.tmp = tmp
        self.mode = mode
        self.extra_env = extra_env
        self.port = free_port()
        self.lighthouse_log = tmp / "lighthouse.log"
        self.lighthouse = runner.spawn(
            lighthouse_argv(tmp, self.port),
            log_path=self.lighthouse_log,
        )
        self.replicas: list[Replica] = []
        try:
            wait_for(
                lambda: "listening on" in self.lighthouse_log.read_text(errors="replace"),
                timeout=30,
                what="the Lighthouse to listen",
            )
        except BaseException:  # make_run never saw this Run: stop its Lighthouse here
            self.close()
            raise

    def env(self, replica_id: int, attempt: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(
            DEVICE="cpu",
            STEPS="1000",
            FT_MODE=self.mode,
            FTSLURM_REPLICA_ID=str(replica_id),
            FTSLURM_GROUP_SIZE="2",
            FTSLURM_ATTEMPT=str(attempt),
            FTSLURM_RUN_ID="test",
            FTSLURM_OUTPUTS=str(self.tmp / "outputs"),
            TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{self.port}",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self, replica_id: int, attempt: int = 0) -> Replica:
        log = self.tmp / f"replica{replica_id}.attempt{attempt}.log"
        proc = runner.spawn(
            [sys.executable, "-m", "ftslurm.replica", "job"],
            log_path=log,
            env=self.env(replica_id, attempt),
            cwd=ROOT,
        )
        rep = Replica(replica_id, attempt, log, proc)
        self.replicas.append(rep)
        return rep

    def quorum_with_both(self) -> bool:
        for line in self.lighthouse_log.read_text(errors="replace").splitlines():
            if "Quorum!" in line and "torchtitan_ft_0:" in line and "torchtitan_ft_1:" in line:
                return True
        return False

    def close(self) -> None:
        for rep in self.replicas:
            rep.stop()
        _kill(self.lighthouse.pid, signal.SIGTERM)
        try:
            self.lighthouse.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill(self.lighthouse.pid)
            self.lighthouse.wait(timeout=5)


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator:
    runs: list[Run] = []

    def make(mode: str, **extra_env: str) -> Run:
        run = Run(tmp_path, mode, extra_env)
        runs.append(run)
        return run

    try:
        yield make
    finally:
        for run in runs:
            run.close()


def _committed(rep: Replica, n: int) -> bool:
    return len(rep.checksums()) >= n


def _common_after(a: Replica, b: Replica, step: int) -> dict[tuple[int, str], tuple[str, str]]:
    ca, cb = a.checksums(), b.checksums()
    return {k: (ca[k], cb[k]) for k in sorted(set(ca) & set(cb)) if k[0] > step}


def _lrs_after(a: Replica, b: Replica, step: int) -> dict[int, tuple[tuple[str, ...], ...]]:
    """(a's rates, b's rates) by step, for each step after `step` that both logged."""
    la, lb = a.lrs(), b.lrs()
    return {s: (la[s], lb[s]) for s in sorted(la.keys() & lb.keys()) if s > step}


# per-step heal runs: a learning rate that changes at every step from step 3 on (the shipped
# debug schedule is flat from step 3 to step 200 of the tests' 1000), so a stale rate a healed
# replica loads differs from its peer's whichever step it was cached at
CHANGING_LR = "--lr_scheduler.decay_ratio=1.0"


def _assert_lr_changes_every_step(rep: Replica, first: int = 3) -> None:
    """The schedule the lr assertions rely on: from step `first`, no two logged steps alike."""
    rates = [lrs for step, lrs in sorted(rep.lrs().items()) if step >= first]
    assert len(rates) >= 3 and len(set(rates)) == len(rates), rates


def _heal_then_compare(run: Run, measure: Path | None = None) -> dict:
    """Both replicas train and agree; replica 1's worker is SIGKILLed; attempt 1 heals from
    replica 0. Returns what the test asserts on."""
    r0, r1 = run.start(0), run.start(1)
    wait_for(run.quorum_with_both, timeout=120, what="a quorum with both replicas")
    wait_for(
        lambda: _committed(r0, 3) and _committed(r1, 3),
        timeout=120,
        what="3 committed checksums on both replicas",
    )
    before = _common_after(r0, r1, 0)
    workers = {r.replica_id: r.worker_pid() for r in (r0, r1)}
    rss = {}
    for rid, pid in workers.items():
        with open(f"/proc/{pid}/status") as f:
            rss[rid] = int(next(ln for ln in f if ln.startswith("VmRSS:")).split()[1]) / 2**20

    victim = workers[1]
    assert victim is not None and victim != r1.proc.pid
    _kill(victim)  # the training process itself, not torchrun
    wait_for(lambda: r1.proc.poll() is not None, timeout=60, what="attempt 0 of replica 1 to end")
    # the worker's own exit code without torchrun (FTSLURM_SKIP_TORCHRUN): SIGKILL; torchrun: 1
    code = 137 if run.extra_env.get("FTSLURM_SKIP_TORCHRUN", "1") == "1" else 1
    assert f"not requeueing (training exited with code {code}): not inside a Slurm job array" in (
        r1.text()
    )
    kill_step = max(s for _, s, _ in r0.steps())

    r1b = run.start(1, attempt=1)
    wait_for(
        lambda: "Loaded state dict" in r1b.text(),
        timeout=150,
        what="replica 1 (attempt 1) to heal from replica 0",
    )
    heal_step = min(s for s, _ in r1b.checksums()) - 1 if r1b.checksums() else kill_step
    wait_for(
        lambda: len(_common_after(r0, r1b, heal_step)) >= 3,
        timeout=120,
        what="3 committed checksums on both replicas after the heal",
    )
    # the fix-5 checks need a few steps of FT checkpoints: since the cheaper start a heal can
    # be over (3 common commits) before replica 0 reaches step 8
    wait_for(lambda: max((s for _, s, _ in r0.steps()), default=0) >= 8, timeout=120,
             what="replica 0 to reach step 8")  # fmt: skip
    after = _common_after(r0, r1b, heal_step)
    lr_after = _lrs_after(r0, r1b, heal_step)
    # the healed replica's first committed step: the one it trains with the state it loaded
    healed_first = min(r1b.lrs(), default=None)
    r0_steps = [s for _, s, _ in r0.steps()]
    r0_last_step = max(r0_steps)  # read before the folders are listed
    ft_steps = {rid: _ft_checkpoint_steps(run, rid) for rid in (0, 1)}
    loaded = re.search(r"Loading the FT checkpoint at step (\d+)\.", r1b.text())
    if measure is not None:
        rows = {}
        for rep in (r0, r1):
            steps = rep.steps()
            gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:], strict=False) if b[1] == a[1] + 1]
            rows[f"replica{rep.replica_id}"] = {
                "steps": len(steps),
                "median_step_s": sorted(gaps)[len(gaps) // 2] if gaps else None,
                "peak_rss_gib_logged": max(m for _, _, m in steps),
                "rss_gib_sampled": round(rss[rep.replica_id], 3),
            }
        measure.write_text(json.dumps(rows, indent=2))
        print(json.dumps({run.mode: rows}))
    healed_line = next(
        ln
        for ln in r1b.text().splitlines()
        if "healing is required" in ln and "max_step=0" not in ln
    )
    # a real heal (max_step > 0) already at start-up: one replica joined after the other's
    # first commit and copied its state then (timing-dependent; init syncs are max_step=0)
    real_heal = re.compile(r"healing is required step=\d+, max_step=[1-9]")
    startup_heal = any(real_heal.search(r.text()) for r in (r0, r1))
    return {"before": before, "after": after, "healed_line": healed_line, "r0": r0, "r1": r1,
            "r1b": r1b,
            "lr_after": lr_after, "healed_first": healed_first,
            "startup_heal": bool(startup_heal), "ft_steps": ft_steps,
            "r1_last_step": max(s for _, s, _ in r1.steps()),
            "r0_first_step": min(r0_steps), "r0_last_step": r0_last_step,
            "ft_loaded_step": int(loaded[1]) if loaded else None}  # fmt: skip


def _ft_checkpoint_steps(run: Run, replica_id: int) -> list[int]:
    """The step-<N> folders of a replica's FT dataloader checkpoints, as torchtitan names them."""
    folder = run.tmp / "outputs" / "torchft" / "tft-test" / "checkpoint"
    return sorted(ft_checkpoints.scan(folder / f"ft-replicat-{replica_id}"))


def _assert_ft_checkpoints_pruned(res: dict) -> None:
    """Fix 5: a few FT dataloader checkpoint folders, not one per step, and the restarted
    replica still resumed its data from (nearly) where attempt 0 was killed: its last logged
    step S was saved, or S-1 or S-2 if the kill cut those saves short."""
    for rid, steps in res["ft_steps"].items():
        assert 1 <= len(steps) <= 3, (rid, steps)
    assert res["r0_last_step"] >= 8
    assert res["ft_loaded_step"] is not None, "attempt 1 loaded no FT dataloader checkpoint"
    assert res["r1_last_step"] - 2 <= res["ft_loaded_step"] <= res["r1_last_step"], res


# every heal transport option (replica/worker/transport.py): each must leave the replicas equal
HEAL_TRANSPORTS = ["http", "http-chunked", "pg"]
TRANSPORT_LINES = {
    "http": "HTTPTransport, survivor waits up to 600 s for a healing peer's download (one stream)",
    "http-chunked": "HTTPTransport, survivor waits up to 600 s for a healing peer's download "
    "(8 parallel chunks)",
    "pg": "PGTransport, survivor waits up to 600 s for each tensor sent (in-place receive, "
    "through cpu)",
}


def _assert_healed_through(res: dict, heal_transport: str) -> None:
    """The heal went through the option under test (torchft's own log lines): HTTP fetches
    name their URL, one `/full` or a `/metadata` and one per chunk; PGTransport's survivor
    times its `send tensors` and the joiner fetches no URL."""
    fetched = re.findall(r"fetching checkpoint from http://\S+/(\w+) took", res["r1b"].text())
    chunks = [str(i) for i in range(8)]  # FTSLURM_HEAL_CHUNKS's default
    expected = {"http": ["full"], "http-chunked": [*chunks, "metadata"], "pg": []}
    assert sorted(set(fetched)) == expected[heal_transport], fetched
    assert ("send tensors took" in res["r0"].text()) == (heal_transport == "pg")


def _once_on_both_stacks(transport: str) -> list:
    """HEAL_TRANSPORTS, `transport` of them also in the second stack's tier (its time)."""
    return [pytest.param(t, marks=pytest.mark.both_stacks) if t == transport else t
            for t in HEAL_TRANSPORTS]  # fmt: skip


@pytest.mark.parametrize("heal_transport", _once_on_both_stacks("http"))
def test_diloco_heal_gives_identical_replicas(
    make_run, tmp_path: Path, heal_transport: str
) -> None:
    # hashed the GPU way (host copy, background thread): the per-step test keeps the CPU way
    run = make_run("diloco", FTSLURM_CHECKSUM_ASYNC="1", FTSLURM_HEAL_TRANSPORT=heal_transport)
    res = _heal_then_compare(run, measure=tmp_path / "measure-diloco.json")
    assert res["before"] and all(a == b for a, b in res["before"].values()), res["before"]
    assert len(res["after"]) >= 3
    assert all(a == b for a, b in res["after"].values()), res["after"]
    assert "recover_src_replica_rank=0" in res["healed_line"]
    assert "launching replica 1 (attempt 1) on" in res["r1b"].text().splitlines()[0]
    _assert_healed_through(res, heal_transport)
    _assert_ft_checkpoints_pruned(res)


@pytest.mark.parametrize("heal_transport", _once_on_both_stacks("pg"))
def test_per_step_heal_gives_identical_replicas(
    make_run, tmp_path: Path, heal_transport: str
) -> None:
    run = make_run("per-step", FTSLURM_HEAL_TRANSPORT=heal_transport,
                   FTSLURM_EXTRA_ARGS=CHANGING_LR)  # fmt: skip
    res = _heal_then_compare(run, measure=tmp_path / "measure-per-step.json")
    assert res["before"] and all(a == b for a, b in res["before"].values()), res["before"]
    assert all(a == b for a, b in res["after"].values()), res["after"]
    # fix 2 on the rate itself: the healed replica steps with its peer's rate, bit for bit,
    # from its first step after the heal (the one a stale rate would be used at) on
    assert res["healed_first"] is not None and res["healed_first"] in res["lr_after"], res
    assert len(res["lr_after"]) >= 3, res["lr_after"]
    assert all(a == b for a, b in res["lr_after"].values()), res["lr_after"]
    _assert_lr_changes_every_step(res["r0"])
    # fixes 1 and 4, read back from the Manager torchtitan built (torchtitan alone: async
    # quorum in per-step mode, and torchft's 60 s)
    for line in ("[ftslurm] torchft quorum: sync (before forward)",
                 f"[ftslurm] heal transport: {TRANSPORT_LINES[heal_transport]}"):
        assert line in res["r0"].text() and line in res["r1b"].text(), line
    _assert_healed_through(res, heal_transport)
    _assert_ft_checkpoints_pruned(res)


@pytest.mark.both_stacks
def test_per_step_heal_without_optimizer_fix_diverges(make_run) -> None:
    """Bug 2 reproduced: with the cached optimizer state dict the healed replica differs, and
    its first step after the heal trains with a stale learning rate. With fix 5 off too,
    torchtitan keeps an FT dataloader checkpoint for every step."""
    # torchrun as before the cheaper start (FTSLURM_SKIP_TORCHRUN=0, FTSLURM_LAZY_COMPILE=0):
    # that path (GPUS_PER_NODE > 1 always takes it) still heals
    run = make_run(
        "per-step", FTSLURM_FIX_OPTIMIZER_STATE="0", FTSLURM_FIX_FT_CHECKPOINT_RETENTION="0",
        FTSLURM_SKIP_TORCHRUN="0", FTSLURM_LAZY_COMPILE="0", FTSLURM_EXTRA_ARGS=CHANGING_LR,
    )
    res = _heal_then_compare(run)
    assert "[ftslurm] fix optimizer_state: OFF" in res["r1b"].text()
    assert "[ftslurm] fix ft_checkpoint_retention: OFF" in res["r1b"].text()
    # every step it trained, up to the one before the last logged (whose save may not have
    # begun); the first is 2 when replica 0 healed at start-up from replica 1's step 1
    assert res["r0_first_step"] == 1 or res["startup_heal"], res["r0_first_step"]
    trained = range(res["r0_first_step"], res["r0_last_step"] - 1)
    assert set(trained) <= set(res["ft_steps"][0]), (trained, res["ft_steps"][0])
    if not res["startup_heal"]:  # else the bug may already show before the kill
        assert res["before"] and all(a == b for a, b in res["before"].values()), res["before"]
    assert res["after"] and all(a != b for a, b in res["after"].values()), res["after"]
    # the cause, on the rate itself: the healed replica's first step after the heal trained
    # with the stale rate the survivor's cached optimizer state dict sent
    # with the stale rate the survivor's cached optimizer state dict sent: the one cached when
    # the trainer was built, which step 1 trained with. Only that step: the scheduler sets every
    # later step's rate from its own state (loaded fresh), yet the parameters stay apart.
    lr_after, first = res["lr_after"], res["healed_first"]
    assert first in lr_after and lr_after[first][0] != lr_after[first][1], (first, lr_after)
    step1 = {rep.lrs().get(1) for rep in (res["r0"], res["r1"])} - {None}
    assert step1 == {lr_after[first][1]}, (step1, first, lr_after)
    assert all(a == b for s, (a, b) in lr_after.items() if s > first), (first, lr_after)
    _assert_lr_changes_every_step(res["r0"])


def test_replicas_survive_a_lighthouse_restart(make_run) -> None:
    """TORCHFT_QUORUM_RETRIES (the launcher's default 3) keeps replicas alive while the
    Lighthouse is down for a few seconds and comes back on the same port. (Measured with
    TORCHFT_QUORUM_RETRIES=0: both replicas die with `TimeoutError: status: Cancelled,
    message: "Timeout expired"` from the quorum call.)"""
    run = make_run("per-step")
    r0, r1 = run.start(0), run.start(1)
    wait_for(run.quorum_with_both, timeout=120, what="a quorum with both replicas")
    wait_for(
        lambda: _committed(r0, 2) and _committed(r1, 2),
        timeout=120,
        what="2 committed checksums on both replicas",
    )
    assert "TORCHFT_QUORUM_RETRIES=3" in r0.text()
    _kill(run.lighthouse.pid)
    run.lighthouse.wait(timeout=10)
    n0, n1 = len(r0.checksums()), len(r1.checksums())
    down_until = time.monotonic() + 3
    wait_for(
        lambda: time.monotonic() >= down_until or r0.proc.poll() is not None,
        timeout=10,
        what="3 s of Lighthouse downtime",
    )
    run.lighthouse = runner.spawn(
        lighthouse_argv(run.tmp, run.port),
        log_path=run.tmp / "lighthouse.restarted.log",
    )
    restarted = run.tmp / "lighthouse.restarted.log"
    wait_for(lambda: "listening on" in restarted.read_text() or run.lighthouse.poll() is not None,
             timeout=60, what="the restarted Lighthouse to listen")  # fmt: skip
    assert run.lighthouse.poll() is None, restarted.read_text()
    wait_for(
        lambda: len(r0.checksums()) >= n0 + 2 and len(r1.checksums()) >= n1 + 2,
        timeout=120,
        what="both replicas to commit 2 more steps after the restart",
    )
    assert r0.proc.poll() is None and r1.proc.poll() is None
    common = _common_after(r0, r1, 0)
    assert len(common) >= 2 and all(a == b for a, b in common.values()), common

    # SIGTERM to the launcher (what Slurm sends on cancel/requeue) tears down the worker too,
    # and is not answered with a self-requeue.
    worker = r0.worker_pid()
    assert worker is not None
    r0.proc.send_signal(signal.SIGTERM)
    r0.proc.wait(timeout=60)
    wait_for(lambda: not _alive(worker), timeout=30, what="the worker to stop after SIGTERM")
    assert "not requeueing: stopped by a signal from Slurm or the user" in r0.text()


def _restart_lighthouse(run: Run, name: str) -> None:
    """Stop the Run's Lighthouse and start a new one on the same port (its quorum ids begin
    at 1 again)."""
    _kill(run.lighthouse.pid, signal.SIGTERM)
    run.lighthouse.wait(timeout=10)
    log = run.tmp / name
    run.lighthouse = runner.spawn(lighthouse_argv(run.tmp, run.port), log_path=log)
    wait_for(lambda: "listening on" in log.read_text() or run.lighthouse.poll() is not None,
             timeout=60, what="the restarted Lighthouse to listen")  # fmt: skip
    assert run.lighthouse.poll() is None, log.read_text()


def test_replicas_reconnect_after_a_lighthouse_restart_that_reuses_quorum_ids(make_run) -> None:
    """Fix 7 (FTSLURM_FIX_RENDEZVOUS_NAMESPACE), with two tiny replicas: replica 1 is killed
    and comes back until replica 0 has met quorum ids up to 4; then the Lighthouse restarts
    and numbers its quorums from 1 again while replica 0, whose store hosts the rendezvous,
    holds the old quorums' keys, and replica 1 is killed and comes back once more, so that
    replica 0 meets again under a quorum id it met under before. (A replica does not
    reconfigure at a new quorum that has the id it is on, so it may skip an id or two after
    the restart: with ids up to 4 met before, the later ones still fall among them.) Both
    replicas commit 5 more steps each time, no process group fails to connect, and every
    rendezvous of replica 0 had a name of its own (the gloo failure a reused name gives:
    tests/test_replica_rendezvous.py)."""
    run = make_run("per-step", FTSLURM_PRESET="tiny", FTSLURM_TINY_STEP_S="0.2",
                   PG_TIMEOUT_S="10")  # fmt: skip
    r0, r1 = run.start(0), run.start(1)
    wait_for(lambda: len(r0.steps()) >= 3 and len(r1.steps()) >= 3, timeout=120,
             what="both tiny replicas stepping")  # fmt: skip
    assert "[ftslurm] fix rendezvous_namespace: ON" in r0.text()
    found = r"process group rendezvous (torchft/\d+) for quorum (\d+)"
    for attempt in range(1, 5):
        r1.stop()
        r1 = run.start(1, attempt=attempt)  # a new member id: new quorums
        wait_for(lambda r=r1: len(r.steps()) >= 3, timeout=120,
                 what=f"replica 1's attempt {attempt}")  # fmt: skip
        if max(int(q) for _, q in re.findall(found, r0.text())) >= 4:
            break
    restart_at = len(r0.text())
    checked = [(r1, len(r1.text()))]
    steps = [len(r0.steps()), len(r1.steps())]
    _restart_lighthouse(run, "lighthouse.restarted.log")
    wait_for(lambda: len(r0.steps()) >= steps[0] + 5 and len(r1.steps()) >= steps[1] + 5,
             timeout=120, what="5 more steps on both replicas after the restart")  # fmt: skip
    r1.stop()
    r1 = run.start(1, attempt=attempt + 1)  # two more quorums of the restarted Lighthouse
    checked.append((r1, 0))
    steps = [len(r0.steps()), 0]
    wait_for(lambda: len(r0.steps()) >= steps[0] + 5 and len(r1.steps()) >= 5, timeout=120,
             what="5 more steps on both replicas with replica 1's third attempt")  # fmt: skip
    after = r0.text()[restart_at:] + "".join(rep.text()[at:] for rep, at in checked)
    assert "connectFullMesh failed" not in after
    assert r0.proc.poll() is None and r1.proc.poll() is None
    names = re.findall(found, r0.text())
    assert len(names) >= 4 and len({n for n, _ in names}) == len(names), names
    earlier = {q for _, q in re.findall(found, r0.text()[:restart_at])}
    later = {q for _, q in re.findall(found, r0.text()[restart_at:])}
    assert earlier & later, names  # quorum ids the restarted Lighthouse reused, new names
