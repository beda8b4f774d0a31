"""N replicas of the real FT sbatch script on an N-node local Slurm, with chaos.

What it does, all with the tools users run (root; slurm-wlm + munge installed):
1. `ftslurm cluster up --nodes N` (local.up) in its own state folder, the real Lighthouse
   (`ftslurm lighthouse start`'s lifecycle.start) on a free port, and
   `FTSLURM_PRESET=tiny ftslurm submit --array=0-(N-1) llama3.1-8b-pretraining-torchft.sh`
   (ftslurm/replica/worker/tiny.py: a real torchft Manager + gloo, a tiny model);
2. waits for a full quorum (a `Quorum!` line of the Lighthouse with all N replicas) and
   measures each replica's memory (RSS, PSS, private) from /proc;
3. chaos: `ftslurm simulate-failure --chaos --every G --count K-2` (node-down, random
   running replicas) in the background; between two of its events a double failure (two
   `simulate-failure --replica` at once), and a Lighthouse restart (lifecycle.restart, same
   port) in the middle; then waits for the full quorum again;
4. times `ftslurm status`, `ftslurm report --json`, `simulate-failure --dry-run` (target
   resolution), `ftslurm logs -n`, `ftslurm doctor` at this size (repeats: median, min, max);
5. checks that `ftslurm report` lists every injected failure and a recovery after each;
6. stops everything it started (scancel, Lighthouse, cluster) by pid, also on errors.

Figures (`--json`): quorum_formation_s (all tasks RUNNING -> first full quorum),
submit_to_full_quorum_s, lighthouse_restart_to_full_quorum_s, failure_to_next_commit_s
(median/max, from the report), report_s, status_s, resolve_s, logs_s, doctor_s, memory.

Run: python bench/scale.py --replicas 64 --failures 10 --json   (under the heavy lock)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ftslurm import lighthouse, logvocab, runner  # noqa: E402
from ftslurm.cluster import local  # noqa: E402
from ftslurm.run.cursor import LogCursor  # noqa: E402
from ftslurm.wait import WaitTimeout, free_port, wait_for  # noqa: E402

FT_SCRIPT = ROOT / "llama3.1-8b-pretraining-torchft.sh"
LH_QUORUM = b"Quorum! Quorum {"  # the Lighthouse's line (parsed by logvocab, as the report)
# what one more replica costs (measured 2026-11-25 by this bench: PSS of the tiny worker
# 266 MB + its launcher 13 MB, docs/cpu/2026-11-25/scale-*.json)
GB_PER_REPLICA = 0.28
HEADROOM_GB = 3.0
# below this much available memory mid-run the job is cancelled (the machine is shared)
ABORT_BELOW_GB = 2.0
ACTIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED"}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class ScaleConfig:
    replicas: int
    failures: int
    state: Path
    step_s: float = 0.5  # FTSLURM_TINY_STEP_S
    every: float = 12.0  # chaos: seconds between failures
    down_for: float = 4.0
    seed: int = 0
    timeout: float = 300.0
    repeats: int = 5
    pg_timeout_s: int = 15
    # the figures in docs/ were taken at torchft's 5000 ms (the toolkit's default is 2000 since)
    heartbeat_timeout_ms: int = 5000
    # the Lighthouse's --min-replicas; None: half the replicas (at least 1). With 1, a replica
    # that asks first after a Lighthouse restart gets a quorum of its own and trains apart
    # from the others (seen in CI: a requeued replica's first request came 0.5 s after the
    # restart). The figures in docs/ up to 2026-11-25 were taken with 1.
    min_replicas: int | None = None

    @property
    def lighthouse_min_replicas(self) -> int:
        return self.min_replicas or max(1, self.replicas // 2)


@dataclass
class Run:
    """What run_scale builds up, so the cleanup knows what to stop."""

    cfg: ScaleConfig
    env: dict[str, str] = field(default_factory=dict)
    job: int | None = None
    lh_dir: Path | None = None
    lh_log: Path | None = None
    lh_pid: int | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def outputs(self) -> Path:
        return self.cfg.state / "outputs"

    @property
    def run_dir(self) -> Path:
        return logvocab.run_dir(self.job, self.outputs)

    @property
    def events(self) -> Path:
        return self.outputs / "events.jsonl"

    def ftslurm(self, *args: str, timeout: float = 120, check: bool = True) -> runner.Completed:
        return runner.run([sys.executable, "-m", "ftslurm", *args], env=self.env, cwd=ROOT,
                          timeout=timeout, check=check)  # fmt: skip


def mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def check_memory(replicas: int) -> float:
    """Refuse a run that would leave less than HEADROOM_GB on a machine others share."""
    avail = mem_available_gb()
    need = replicas * GB_PER_REPLICA + HEADROOM_GB
    if avail < need:
        raise SystemExit(
            f"{replicas} replicas need ~{need:.1f} GB available ({GB_PER_REPLICA} GB each + "
            f"{HEADROOM_GB} GB headroom); {avail:.1f} GB are: ask for fewer --replicas"
        )
    return avail


def _rollup(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def replica_memory(state: Path) -> dict[str, Any]:
    """RSS / PSS / private memory of the tiny workers and their launchers (processes whose
    environment names this run's outputs), in MB: what one more replica costs."""
    marker = f"FTSLURM_OUTPUTS={state / 'outputs'}".encode()
    groups: dict[str, list[dict[str, int]]] = {"worker": [], "launcher": []}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            if b"ftslurm.replica" not in cmd or marker not in (proc / "environ").read_bytes():
                continue
        except OSError:
            continue
        kind = "worker" if b"ftslurm.replica.worker.tiny" in cmd else "launcher"
        if r := _rollup(int(proc.name)):
            groups[kind].append(r)
    out: dict[str, Any] = {}
    for kind, rows in groups.items():
        if not rows:
            continue
        mb = {
            k: statistics.mean(r.get(k, 0) for r in rows) / 1024
            for k in ("Rss", "Pss", "Anonymous")
        }
        private = statistics.mean(
            r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rows) / 1024
        out[kind] = {"count": len(rows), "rss_mb": round(mb["Rss"], 1),
                     "pss_mb": round(mb["Pss"], 1), "private_mb": round(private, 1),
                     "shared_mb": round(mb["Rss"] - private, 1)}  # fmt: skip
    out["per_replica_pss_mb"] = round(
        sum(v["pss_mb"] for v in out.values() if isinstance(v, dict)), 1)
    return out


class LighthouseLog:
    """Reads the Lighthouse log as it grows: the `Quorum!` lines (one per quorum round)."""

    def __init__(self, path: Path) -> None:
        self.appended = LogCursor(path)  # the run model's incremental reader
        self.full: list[tuple[str, float]] = []  # (log time, monotonic seen) of full quorums
        self.sizes: list[tuple[int, float]] = []  # (members, monotonic seen) of every Quorum!

    def poll(self, n: int) -> None:
        for raw in self.appended.lines():
            if LH_QUORUM not in raw or (q := logvocab.parse_line(raw)) is None:
                continue
            members = len({logvocab.split_replica_id(m.replica_id)[1] for m in q.members})
            self.sizes.append((members, time.monotonic()))
            if members == n:
                stamp = datetime.fromtimestamp(q.time, timezone.utc) if q.time else None
                self.full.append((stamp.isoformat(timespec="milliseconds")[:23] if stamp
                                  else "", time.monotonic()))  # fmt: skip

    def full_since(self, t: float, n: int) -> tuple[str, float] | None:
        self.poll(n)
        return next(((s, m) for s, m in self.full if m >= t), None)


def _lh_seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Wall seconds of `fn` over `repeats` runs: median, min, max."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
            "max": round(max(times), 3), "n": repeats}  # fmt: skip


def start(run: Run) -> None:
    cfg = run.cfg
    n = cfg.replicas
    t0 = time.monotonic()
    spec = local.up(nodes=n, state_dir=cfg.state / "cluster", timeout=180, install=False)
    run.figures["cluster_up_s"] = round(time.monotonic() - t0, 2)
    say(f"cluster up: {n} nodes in {run.figures['cluster_up_s']} s")
    run.lh_dir = cfg.state / "lighthouse"
    run.env = {
        **local.slurm_env(spec),
        "FTSLURM_CLUSTER_DIR": str(cfg.state / "cluster"),
        "FTSLURM_LIGHTHOUSE_DIR": str(run.lh_dir),
        "FTSLURM_EVENTS": str(run.events),
        "FTSLURM_OUTPUTS": str(run.outputs),
        "PYTHONPATH": str(ROOT),
    }
    os.environ.update({k: run.env[k] for k in ("SLURM_CONF", "FTSLURM_CLUSTER_DIR")})
    lh = lighthouse.start(bind=f"0.0.0.0:{free_port()}", advertise="login-0",
                          state_dir=run.lh_dir,
                          heartbeat_timeout_ms=cfg.heartbeat_timeout_ms,
                          min_replicas=cfg.lighthouse_min_replicas)  # fmt: skip
    run.figures["lighthouse_min_replicas"] = cfg.lighthouse_min_replicas
    run.lh_log = Path(lh.log_path)
    run.lh_pid = lh.pid
    say(f"Lighthouse: {lh.address}")
    (run.outputs / "torchft").mkdir(parents=True, exist_ok=True)
    job_env = {
        **run.env,
        "FTSLURM_PRESET": "tiny",
        "STEPS": "1000000",
        "FTSLURM_TINY_STEP_S": str(cfg.step_s),
        "TORCHFT_LIGHTHOUSE": lh.address,
        "FT_MAX_REQUEUES": "100",
        # a replica that dies between a quorum and the process group's rendezvous holds the
        # others for this long (torchft waits for its store key); the TOMLs say 60 s
        "PG_TIMEOUT_S": str(cfg.pg_timeout_s),
    }
    out = runner.run(
        [sys.executable, "-m", "ftslurm", "submit", "--json", f"--array=0-{n - 1}",
         f"--output={run.outputs}/torchft/slurm-%A_%a.out", str(FT_SCRIPT)],
        env=job_env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    run.job = int(json.loads(out.stdout)["job_id"])
    t_submit = time.monotonic()
    say(f"submitted job {run.job}: {n} tasks")
    lh_log = LighthouseLog(run.lh_log)

    def all_running() -> bool:
        states = tasks(run)
        return len(states) == n and all(s == "RUNNING" for s in states.values())

    wait_for(all_running, cfg.timeout, interval=0.5, what=f"{n} tasks RUNNING")
    t_running = time.monotonic()
    stamp, t_full = wait_for(lambda: lh_log.full_since(t_submit, n), cfg.timeout, interval=0.5,
                             what=f"a quorum of all {n} replicas")  # fmt: skip
    run.figures["submit_to_running_s"] = round(t_running - t_submit, 2)
    run.figures["submit_to_full_quorum_s"] = round(t_full - t_submit, 2)
    run.figures["quorum_formation_s"] = round(t_full - t_running, 2)
    say(f"full quorum of {n} at {stamp}: {run.figures['submit_to_full_quorum_s']} s after "
        f"submit, {run.figures['quorum_formation_s']} s after all tasks ran")  # fmt: skip
    time.sleep(3)  # a few steps in the full quorum before measuring memory
    run.figures["memory"] = replica_memory(cfg.state)
    run.figures["mem_available_gb_running"] = round(mem_available_gb(), 2)
    say(f"memory per replica: {run.figures['memory']}")


def tasks(run: Run) -> dict[int, str]:
    from ftslurm.slurm import client

    return {j.array_task_id: j.state for j in client.current(env=run.env).jobs(run.job)}


def chaos(run: Run) -> dict[str, Any]:
    """K failures: K-2 from `simulate-failure --chaos`, a double failure between two of its
    events, and a Lighthouse restart in the middle."""
    cfg = run.cfg
    n = cfg.replicas
    double = n >= 4  # two at once needs a survivor besides the chaos tool's spare
    singles = max(cfg.failures - 2, 1) if double else cfg.failures
    job = str(run.job)
    common = ["--job", job, "--down-for", str(cfg.down_for), "--mode", "node-down"]
    log = cfg.state / "chaos.log"
    proc = runner.spawn(
        [sys.executable, "-m", "ftslurm", "simulate-failure", "--chaos", "--every",
         str(cfg.every), "--count", str(singles), "--seed", str(cfg.seed), *common],
        log_path=log, env=run.env, cwd=ROOT, detach=True,
    )  # fmt: skip
    t0 = time.monotonic()
    out: dict[str, Any] = {"chaos_failures": singles}
    lh_log = LighthouseLog(run.lh_log)  # type: ignore[arg-type]
    t_restart = None
    try:
        if double:  # half-way between chaos events 1 and 2 (chaos waits `every` first)
            time.sleep(max(0.0, t0 + 1.5 * cfg.every - time.monotonic()))
            pair = random.Random(cfg.seed + 1).sample(range(1, n), 2)
            both = [
                runner.spawn([sys.executable, "-m", "ftslurm", "simulate-failure", "--replica",
                              str(r), *common], log_path=cfg.state / f"double-{r}.log",
                             env=run.env, cwd=ROOT, detach=True)  # fmt: skip
                for r in pair
            ]
            out["double"] = pair
            say(f"double failure: replicas {pair} at once")
            for p in both:
                p.wait(timeout=cfg.down_for + 60)
            out["double_rc"] = [p.returncode for p in both]
        # the Lighthouse restart, in the middle of the chaos
        time.sleep(max(0.0, t0 + (singles / 2 + 0.5) * cfg.every - time.monotonic()))
        lh_log.poll(n)
        assert run.lh_dir is not None
        t_restart = time.monotonic()
        run.lh_pid = lighthouse.restart(lighthouse.recorded_config(run.lh_dir)).pid
        say("Lighthouse restarted")
        out["lighthouse_restart_at_s"] = round(t_restart - t0, 1)
        # read the Lighthouse log as it grows: a quorum's time is when it is first seen
        deadline = time.monotonic() + cfg.every * (singles + 2) + 300
        while proc.poll() is None and time.monotonic() < deadline:
            lh_log.poll(n)
            time.sleep(0.25)
        out["chaos_rc"] = proc.returncode
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    # back to full strength: a Quorum! of all n written after the last failure's resume
    # (the lines already in the log are read first: `full` keeps when a line was first seen)
    lh_log.poll(n)
    t_end = time.monotonic()
    try:
        got = wait_for(lambda: lh_log.full_since(t_end, n), cfg.timeout, interval=0.5,
                       what=f"all {n} replicas back in one quorum")  # fmt: skip
        out["last_failure_to_full_quorum_s"] = round(got[1] - t_end, 2)
    except WaitTimeout as e:  # a figure in itself: measure and check the report anyway
        out["last_failure_to_full_quorum_s"] = None
        out["full_quorum_error"] = str(e)
        say(str(e))
    # after the Lighthouse restart: the first quorum as large as the last one before it
    # (the replicas that were up then; others may be down by the chaos)
    if t_restart is not None:
        size = max([k for k, m in lh_log.sizes if m < t_restart][-1:] or [n])
        after = next((m for k, m in lh_log.sizes if m >= t_restart and k >= size), None)
        out["quorum_before_restart"] = size
        out["lighthouse_restart_to_quorum_s"] = round(after - t_restart, 2) if after else None
    say(f"full quorum again: {out['last_failure_to_full_quorum_s']} s after the chaos ended")
    return out


def _cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def follow_cost(run: Run, seconds: float = 10.0) -> dict[str, Any]:
    """`ftslurm logs -f --lighthouse` for `seconds`: its CPU time and the lines it printed,
    and how fast the replica logs and the Lighthouse log grow (the log volume per hour)."""
    out_path = run.cfg.state / "logs-follow.out"
    assert run.lh_log is not None

    def sizes() -> tuple[int, int]:
        return (sum(p.stat().st_size for p in run.run_dir.glob("*.out")),
                run.lh_log.stat().st_size)  # type: ignore[union-attr]  # fmt: skip

    lh_cpu0 = _cpu_seconds(run.lh_pid) if run.lh_pid else None
    before, t0 = sizes(), time.monotonic()
    proc = runner.spawn([sys.executable, "-m", "ftslurm", "logs", "-f", "--lighthouse", "--job",
                         str(run.job), "-n", "1"], log_path=out_path, env=run.env, cwd=ROOT,
                        detach=True)  # fmt: skip
    try:
        time.sleep(seconds)
        cpu = _cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    after, dt = sizes(), time.monotonic() - t0
    lh_cpu = _cpu_seconds(run.lh_pid) - lh_cpu0 if run.lh_pid and lh_cpu0 is not None else None
    lines = len(out_path.read_bytes().splitlines())
    return {
        "logs_follow_s": round(dt, 1),
        "logs_follow_cpu_s": round(cpu, 2),
        "logs_follow_lines": lines,
        # the Lighthouse's CPU over the same window: heartbeats (10/s per replica) + quorums
        "lighthouse_cpu_pct": round(100 * lh_cpu / dt, 1) if lh_cpu is not None else None,
        "replica_log_mb_per_hour": round((after[0] - before[0]) / dt * 3600 / 2**20, 1),
        "lighthouse_log_mb_per_hour": round((after[1] - before[1]) / dt * 3600 / 2**20, 1),
    }


def measure_cli(run: Run) -> dict[str, Any]:
    """The commands users run at this size, timed (a fresh interpreter each, as typed); a
    command that fails is recorded as `<figure>_error`, the others are still measured."""
    out: dict[str, Any] = {}
    try:
        _measure_cli(run, out)
    except Exception as e:  # noqa: BLE001 - keep the figures so far and the report check
        out["measure_error"] = f"{type(e).__name__}: {e}"
    return out


def _measure_cli(run: Run, out: dict[str, Any]) -> None:
    cfg, job = run.cfg, str(run.job)
    running = sorted(i for i, st in tasks(run).items() if st == "RUNNING")
    lh = ["--lighthouse", str(run.lh_log), "--events", str(run.events)]
    status = run.ftslurm("status", "--job", job)
    rows = [ln for ln in status.stdout.splitlines() if re.match(r"^\d+\s", ln)]
    out["status_rows"] = len(rows)
    out["status_s"] = timed(lambda: run.ftslurm("status", "--job", job), cfg.repeats)
    out["status_json_s"] = timed(lambda: run.ftslurm("status", "--job", job, "--json"),
                                 cfg.repeats)  # fmt: skip
    out["resolve_s"] = timed(lambda: run.ftslurm(
        "simulate-failure", "--job", job, "--replica", str(running[-1]), "--dry-run"),
        cfg.repeats)  # fmt: skip
    out["logs_s"] = timed(lambda: run.ftslurm("logs", "--job", job, "-n", "5"), cfg.repeats)
    out["doctor_s"] = timed(lambda: run.ftslurm("doctor", "--json", check=False, timeout=300),
                            1)  # fmt: skip
    try:
        out.update(follow_cost(run))
    except Exception as e:  # noqa: BLE001 - a figure lost, not the run
        out["logs_follow_error"] = f"{type(e).__name__}: {e}"
    out["report_s"] = timed(lambda: run.ftslurm("report", str(run.run_dir), *lh, "--json",
                                                timeout=600), 3)  # fmt: skip
    png = cfg.state / "report.png"
    out["report_png_s"] = timed(lambda: run.ftslurm("report", str(run.run_dir), *lh, "--plot",
                                                    str(png), timeout=600), 1)  # fmt: skip
    out["report_png"] = str(png)
    out["log_bytes"] = sum(p.stat().st_size for p in run.run_dir.glob("*.out"))
    out["lighthouse_log_bytes"] = run.lh_log.stat().st_size if run.lh_log else 0


def check_report(run: Run, t_first_submit: float, heal_wait_s: float = 120.0) -> dict[str, Any]:
    """Every injected failure is in the report, and each failed replica healed afterwards.
    A full quorum is not yet a heal (its process group may still fail to form, and the
    replica heals at the next one): while a failed replica has not healed, the report is
    read again, for `heal_wait_s` at most, the job still running."""
    t0 = time.monotonic()
    while True:
        got = _read_report(run)
        if not got.missing_recoveries or time.monotonic() - t0 >= heal_wait_s:
            break
        time.sleep(3)
    rep, failures = got.rep, got.failures
    to_commit = [x for x in rep["summary"]["failure_to_next_commit_s"] if x is not None]
    injected_commit = [f["to_next_commit_s"] for f in failures if f["to_next_commit_s"] is not None]
    return {
        "events_logged": len(got.injected),
        "down_events": len(got.downs),
        "failures_reported": len(failures),
        "failures_all_kinds": len(rep["failures"]),
        "recoveries_reported": len(rep["recoveries"]),
        "failed_replicas_not_healed": got.missing_recoveries,
        "waited_for_heals_s": round(time.monotonic() - t0, 1),
        "missing_failures": got.missing_failures,
        "failure_to_next_commit_s": _median_max(to_commit),
        # the injected failures only (the list above also has the report's `left-quorum`)
        "injected_failure_to_next_commit_s": _median_max(injected_commit),
        "quorum_changes": rep["summary"]["quorum_changes"],
        "steps_committed": rep["summary"]["steps_committed"],
    }


def _median_max(seconds: list[float]) -> dict[str, Any]:
    """{median, max, n} of `seconds`, rounded to 10 ms (None for an empty list)."""
    return {"median": round(statistics.median(seconds), 2) if seconds else None,
            "max": round(max(seconds), 2) if seconds else None, "n": len(seconds)}  # fmt: skip


class ReportCheck(NamedTuple):
    """One reading of the run's report against its injected events (check_report)."""

    rep: dict[str, Any]  # the report's JSON
    injected: list[dict[str, Any]]  # every injected event
    downs: list[dict[str, Any]]  # the injected node-downs
    failures: list[dict[str, Any]]  # the report's node-down failures
    missing_failures: list[tuple[Any, Any]]  # injected node-downs the report misses
    missing_recoveries: list[Any]  # failed replicas not healed


def _read_report(run: Run) -> ReportCheck:
    lh = ["--lighthouse", str(run.lh_log), "--events", str(run.events)]
    rep = json.loads(run.ftslurm("report", str(run.run_dir), *lh, "--json", timeout=600).stdout)
    injected = [json.loads(line) for line in run.events.read_text().splitlines() if line.strip()]
    downs = [e for e in injected if e.get("action") == "node-down"]
    failures = [f for f in rep["failures"] if f["kind"] == "node-down"]
    missing_failures, missing_recoveries = [], []
    for e in downs:
        t = _lh_seconds(e["time"])
        if not any(int(f["replica"]) == int(e["replica"]) and f["time"]
                   and abs(_lh_seconds(f["time"]) - t) < 2 for f in failures):  # fmt: skip
            missing_failures.append((e["replica"], e["time"]))
    for f in failures:
        healed = [r for r in rep["recoveries"] if r["target_replica"] == f["replica"]
                  and r["time"] and r["time"] > f["time"]]  # fmt: skip
        if not healed:
            missing_recoveries.append(f["replica"])
    return ReportCheck(rep, injected, downs, failures, missing_failures, missing_recoveries)


def stop(run: Run) -> None:
    """Everything this run started, by pid / by its own state folders."""
    if run.job is not None:
        runner.run(["scancel", str(run.job)], env=run.env, timeout=30, check=False)
        try:
            wait_for(lambda: not ACTIVE & set(tasks(run).values()), 60, interval=1,
                     what="the job to end")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the cluster goes down anyway
            say(f"job {run.job} still listed: {e}")
    if run.lh_dir is not None:
        lighthouse.stop(run.lh_dir)
    local.down(run.cfg.state / "cluster")
    say("stopped: job, Lighthouse, cluster")


def _memory_guard(run: Run, done: threading.Event) -> None:
    """Cancel the job when the machine runs short of memory (others share it)."""
    low = None
    while not done.wait(1.0):
        avail = mem_available_gb()
        low = avail if low is None else min(low, avail)
        run.figures["mem_available_gb_min"] = round(low, 2)
        if avail < ABORT_BELOW_GB and run.job is not None:
            say(f"only {avail:.1f} GB available: cancelling job {run.job}")
            runner.run(["scancel", str(run.job)], env=run.env, timeout=30, check=False)
            run.figures["aborted_low_memory"] = True
            return


def run_scale(cfg: ScaleConfig, measure: bool = True) -> dict[str, Any]:
    """The whole run; returns the figures."""
    avail = check_memory(cfg.replicas)
    run = Run(cfg)
    run.figures.update(replicas=cfg.replicas, mem_available_gb_before=round(avail, 2),
                       step_s=cfg.step_s, every_s=cfg.every, down_for_s=cfg.down_for)  # fmt: skip
    t0 = time.monotonic()
    done = threading.Event()
    guard = threading.Thread(target=_memory_guard, args=(run, done), daemon=True)
    guard.start()
    try:
        start(run)
        if cfg.failures:
            run.figures.update(chaos(run))
        if measure:
            run.figures.update(measure_cli(run))
        run.figures.update(check_report(run, t0))
        run.figures["run_dir"] = str(run.run_dir)
    finally:
        done.set()
        stop(run)
    run.figures["total_s"] = round(time.monotonic() - t0, 1)
    return run.figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--failures", type=int, default=10,
                    help="failures injected: K-2 by --chaos, plus one double")
    ap.add_argument("--every", type=float, default=12.0, help="chaos: seconds between failures")
    ap.add_argument("--down-for", type=float, default=4.0)
    ap.add_argument("--step-s", type=float, default=0.5, help="FTSLURM_TINY_STEP_S")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-replicas", type=int, default=None,
                    help="the Lighthouse's --min-replicas [half the replicas]")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=5000,
                    help="the Lighthouse's (5000: torchft's, as the figures in docs/)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-measure", action="store_true", help="skip timing the commands")
    ap.add_argument("--state", type=Path, default=None, help="state folder [a new temp dir]")
    ap.add_argument("--json", action="store_true", help="stdout: one JSON object")
    ap.add_argument("--check-only", action="store_true",
                    help="only the report check, on the kept --state of an earlier run")
    a = ap.parse_args()
    if a.check_only:
        run = Run(ScaleConfig(replicas=a.replicas, failures=a.failures, state=a.state))
        run.job = int(next((a.state / "outputs" / "torchft").glob("tft-*")).name[4:])
        run.lh_log = a.state / "lighthouse" / "lighthouse.log"
        run.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        print(json.dumps(check_report(run, 0.0, heal_wait_s=0), indent=1))
        return
    # `timeout` / Ctrl-C: unwind through run_scale's finally, which stops everything started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    state = (a.state or Path(tempfile.mkdtemp(prefix="ftslurm-scale-"))).resolve()
    cfg = ScaleConfig(replicas=a.replicas, failures=a.failures, state=state, step_s=a.step_s,
                      every=a.every, down_for=a.down_for, seed=a.seed,
                      repeats=a.repeats,
                      heartbeat_timeout_ms=a.heartbeat_timeout_ms,
                      min_replicas=a.min_replicas)  # fmt: skip
    figures = run_scale(cfg, measure=not a.no_measure)
    if a.json:
        print(json.dumps(figures, indent=1))
    else:
        for k, v in figures.items():
            print(f"{k:40} {v}")


if __name__ == "__main__":
    main()
