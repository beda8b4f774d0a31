"""`ftslurm demo --all-fail` without a cluster: its plan, its checks, the log reader that sees a
resume, the local backend's kill of every replica at once, and the story's narration over a
scripted run (a backend whose replicas are log files written here). The real run on the local
Slurm is tests/test_demo_all_fail_slurm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import logvocab, procs
from ftslurm.demo import (
    ALL_FAIL_INTERVAL,
    Backend,
    DemoConfig,
    LocalBackend,
    ReplicaLog,
    _all_fail,
    _replica_env,
    plan_lines,
)
from ftslurm.runner import spawn
from ftslurm.wait import wait_for

pytestmark = pytest.mark.timeout(120)


def _step(step: int) -> str:
    return (f"[titan] 2026-11-27 10:00:{step % 60:02d},000 - root - INFO - step: {step:2d}  "
            "loss:  7.12345  grad_norm:  0.8736\n")  # fmt: skip


def _banner(replica: int, attempt: int) -> str:
    return f"[2026-11-27 10:00:00]  launching replica {replica} (attempt {attempt}) on worker-0\n"


def test_the_plan_says_every_replica_at_once_and_the_resume() -> None:
    local = plan_lines(DemoConfig(backend="local", failures=0, all_fail=True))
    assert not any(line.startswith("failure ") for line in local)
    text = "\n".join(local)
    assert f"every {ALL_FAIL_INTERVAL} steps" in text
    assert "SIGKILL all 2 replicas' process trees at once" in text
    assert ("resumes from that checkpoint (model, optimizer, step, data position), not "
            "step 1") in text
    slurm = "\n".join(plan_lines(DemoConfig(backend="slurm", failures=1, all_fail=True)))
    assert "failure 1/1" in slurm
    assert "State=DOWN on all 2 nodes at once" in slurm and "Slurm requeues every task" in slurm
    assert "every replica at once" not in "\n".join(plan_lines(DemoConfig(backend="local")))


def test_the_cli_dry_run_defaults_to_no_single_failures_and_refuses_spares(tmp_path: Path) -> None:
    env = {"FTSLURM_OUTPUTS": str(tmp_path), "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "ftslurm", "demo", "--dry-run", "--backend", "local"]
    out = subprocess.run([*base, "--all-fail"], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("failure ") == 0 and "every replica at once" in out.stdout
    out = subprocess.run([*base, "--all-fail", "-k", "2"], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.stdout.count("failure ") == 2 and "every replica at once" in out.stdout
    out = subprocess.run([*base], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.count("failure ") == 2 and "every replica at once" not in out.stdout
    out = subprocess.run([*base, "--all-fail", "--spares", "1"], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == ("Error: --all-fail takes every node down, spares too: drop "
                                  "--spares")
    assert not any(tmp_path.iterdir())


def test_the_replicas_get_a_short_interval_and_the_users_own_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FTSLURM_EXTRA_ARGS", raising=False)
    env = _replica_env(DemoConfig(all_fail=True), "http://x:1")
    assert env["FTSLURM_EXTRA_ARGS"] == f"--checkpoint.interval={ALL_FAIL_INTERVAL} "
    monkeypatch.setenv("FTSLURM_EXTRA_ARGS", "--checkpoint.interval=30")
    env = _replica_env(DemoConfig(all_fail=True), "http://x:1")
    assert env["FTSLURM_EXTRA_ARGS"].split() == [f"--checkpoint.interval={ALL_FAIL_INTERVAL}",
                                                  "--checkpoint.interval=30"]  # fmt: skip
    assert "FTSLURM_EXTRA_ARGS" not in _replica_env(DemoConfig(), "http://x:1")


def test_the_log_reader_sees_each_attempts_resume_and_first_step(tmp_path: Path) -> None:
    path = tmp_path / "r.out"
    path.write_text(_banner(1, 0) + logvocab.resume_line(1, -1, None) + "\n"
                    + "".join(_step(s) for s in range(1, 16)))  # fmt: skip
    log = ReplicaLog(path)
    log.poll()
    assert (log.attempt, log.resumed, log.first_step, log.last_step) == (0, (-1, None), 1, 15)
    with path.open("a") as f:
        f.write(_banner(1, 1))
    log.poll()
    assert (log.attempt, log.resumed, log.first_step) == (1, None, None)
    with path.open("a") as f:
        f.write(logvocab.resume_line(1, 12, 12) + "\n" + _step(13) + _step(14))
    log.poll()
    assert (log.resumed, log.first_step, log.last_step) == ((12, 12), 13, 14)


def test_the_local_backend_kills_every_replica_in_one_go(tmp_path: Path) -> None:
    cfg = DemoConfig(backend="local", outputs=tmp_path)
    b = LocalBackend(cfg, say=lambda m: None)
    b.run_id = "local-test"
    b.attach_logs()
    b.run_dir.mkdir(parents=True)
    for i in range(2):  # a replica: a launcher with a child, as python -m ftslurm.replica job
        proc = spawn(["sh", "-c", "sleep 300 & wait"], detach=True)
        b.procs[i] = proc.pid

    def forked() -> dict[int, list[int]] | None:
        """Each tree, once each shell has forked its sleep (not yet right after the spawn)."""
        t = {i: procs.process_tree(pid) for i, pid in b.procs.items()}
        return t if all(len(x) == 2 for x in t.values()) else None

    trees = wait_for(forked, 10, what="each launcher's child")
    try:
        b.fail_all()
        assert not any(procs.pid_alive(p) for t in trees.values() for p in t)
        assert b.procs == {}
        events = [json.loads(x) for x in b.events_path.read_text().splitlines()]
        assert [(e["action"], e["replica"]) for e in events] == [("kill", 0), ("kill", 1)]
        assert all("every replica at once" in e["detail"] for e in events)
    finally:
        procs.kill_pids([p for t in trees.values() for p in t], 9)


class _Scripted(Backend):
    """Two replicas as log files: they train past a checkpoint at step 12 (written under the
    run's checkpoint folder), die together, and resume from it."""

    def __init__(self, cfg: DemoConfig, said: list[str]):
        super().__init__(cfg, said.append)
        self.run_id = "scripted"
        self.attach_logs()
        self.run_dir.mkdir(parents=True)
        self.events: list[str] = []
        for i, log in enumerate(self.logs):
            log.path.write_text(_banner(i, 0) + logvocab.resume_line(i, -1, None) + "\n"
                                + "".join(_step(s) for s in range(1, 15 + i)))  # fmt: skip
        (self.run_dir / "checkpoint" / "step-12").mkdir(parents=True)
        (self.run_dir / "checkpoint" / "step-12" / ".metadata").write_bytes(b"x")
        (self.run_dir / "checkpoint" / "step-24").mkdir()  # cut off: no .metadata

    def quorum_size(self) -> int:
        return self.cfg.replicas

    def fail_all(self) -> None:
        self.events.append("fail_all")

    def restore_all(self) -> None:
        """Replica 0 back first, from the checkpoint; replica 1 later, healed from it."""
        self.events.append("restore_all")
        for i, log in enumerate(self.logs):
            with log.path.open("a") as f:
                f.write(_banner(i, 1) + logvocab.resume_line(i, 12, 12) + "\n"
                        + _step(13 if i == 0 else 15))  # fmt: skip


def test_the_story_narrates_the_resume_from_the_checkpoint_and_the_lost_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHECKPOINT_FOLDER", raising=False)
    said: list[str] = []
    cfg = DemoConfig(backend="local", outputs=tmp_path, down_for=0, timeout=10, all_fail=True)
    b = _Scripted(cfg, said)
    _all_fail(b, cfg, said.append)
    assert b.events == ["fail_all", "restore_all"]
    text = "\n".join(said)
    assert "checkpoint step-12 written; replicas at training steps 14, 15" in text
    assert ("replica 0 (attempt 1) resumed from checkpoint step-12 (model, optimizer, step and "
            "its data position step-12): first step 13, not 1") in text  # fmt: skip
    assert ("replica 1 (attempt 1) loaded checkpoint step-12 (model, optimizer, step and its "
            "data position step-12), came back after a peer had resumed from it and healed "
            "from that peer: first step 15") in text  # fmt: skip
    assert ("steps lost: 3 (trained to step 15 before the outage, trained again from step 13; "
            f"at most the interval, {ALL_FAIL_INTERVAL})") in text  # fmt: skip
    assert "quorum of 2 again" in text
