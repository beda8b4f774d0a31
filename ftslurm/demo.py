"""`ftslurm demo`: the whole fault-tolerance story on one machine, with real parts.

Slurm backend: the local Slurm cluster (N nodes) → the managed Lighthouse → the FT sbatch
script as an N-task array with the CPU debug model → quorum → replica 1's node DOWN → the
survivor commits alone → RESUME, requeue, heal → repeat → stop what was started → report.

Local backend (no Slurm: not root, not Linux): the same Lighthouse and the same replica
launcher (`python -m ftslurm.replica job`), N replica processes supervised here. A failure
SIGKILLs the replica's whole process tree, and the replica is started again with the same id
and the next attempt number, as Slurm's requeue would, appending to the same log layout
(`outputs/torchft/tft-<run>/tft-<run>_<i>.out`), so `report`, `logs` and `status` read both.

Everything started is tracked by pid and stopped in a `finally`, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import failure_modes, knobs, logfilter, logvocab, paths, procs, submission
from ftslurm.errors import UserError
from ftslurm.event_log import InjectedEvent, append_event, now_iso
from ftslurm.run.cursor import LogCursor
from ftslurm.run.model import Run
from ftslurm.wait import WaitTimeout, free_port, wait_for, wait_while

Say = Callable[[str], None]


# how long the demo holds a stall at most (its watchdog ends the worker well before)
STALL_HOLD_S = 120.0

def slurm_possible() -> str | None:
    """None if the Slurm backend can run here, else why not."""
    if not sys.platform.startswith("linux"):
        return "the local Slurm cluster needs Linux"
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root"
    from ftslurm.cluster import local

    if local.missing_binaries() and shutil.which("apt-get") is None:
        return "slurm-wlm and munge are missing and apt-get is not available"
    return None


@dataclass
class DemoConfig:
    replicas: int = 2
    failures: int = 2
    backend: str = "auto"  # auto | slurm | local
    steps: int = 10_000  # the demo stops the job itself once the story is told
    down_for: float = 5.0
    steps_between: int = 6  # committed steps with the full group before each failure
    outputs: Path = field(default_factory=paths.outputs_dir)
    timeout: float = 300.0  # for each wait
    spares: int = 0  # warm spares (FT_SPARES): a failed replica's slot is taken by one
    # failure k uses modes[k % len(modes)] (failure_plan.MODES); () = the backend's own:
    # node-down on Slurm, a SIGKILL of the process tree on the local backend (its only one)
    modes: tuple[str, ...] = ()
    every: float = 0.0  # seconds from one failure to the next at least (0: steps_between only)
    heartbeat_timeout_ms: int | None = None  # the Lighthouse's; None: its default
    # ranks per replica (GPUS_PER_NODE), the model FSDP-sharded across them; with more than
    # one, a kill on Slurm hits the last rank alone (simulate-failure --rank), as a GPU's
    # error kills one rank of a node
    ranks: int = 1
    # after the failures: every replica lost at once past a model checkpoint, the array
    # restarted, every replica resumed from that checkpoint (no peer is left to heal from)
    all_fail: bool = False
    # the story lasts at least this long from the full quorum (0: as long as its failures):
    # a failure-free control run (failures=0) as long as the run it is compared with
    min_run_s: float = 0.0
    # the local Slurm cluster's nodes (0: one per array task): more leave a free node that a
    # replica whose node was taken out (drained) requeues onto
    nodes: int = 0
    # the failures are held against the node, as `simulate-failure --count-as-bad` does: the
    # launcher drains a node after FT_NODE_MAX_FAILS of them (bench/bad_node.py)
    count_as_bad: bool = False
    # what the story measured, one dict per failure (bench/spares.py reads it)
    measured: list[dict[str, float | int]] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        """Array tasks (= nodes): the replicas and the spares."""
        return self.replicas + self.spares

    @property
    def cluster_nodes(self) -> int:
        """The local Slurm cluster's nodes: one per array task, or `nodes` if more."""
        return max(self.nodes, self.tasks)

    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return "slurm" if slurm_possible() is None else "local"

    def validate(self) -> None:
        if self.replicas < 2:
            raise UserError("--replicas must be at least 2 (one survivor, one to fail)")
        if self.failures < 0:
            raise UserError("--failures must be 0 or more")
        if self.spares < 0:
            raise UserError("--spares must be 0 or more")
        if self.steps < 1:
            raise UserError("--steps must be at least 1")
        if not (math.isfinite(self.down_for) and self.down_for >= 0):
            raise UserError("--down-for must be a number of seconds >= 0")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise UserError("--timeout must be a number of seconds > 0")
        if self.backend == "slurm" and (why := slurm_possible()):
            raise UserError(f"--backend slurm: {why}; use --backend local")
        from ftslurm.failure_plan import MODES

        if bad := [m for m in self.modes if m not in MODES]:
            raise UserError(f"unknown failure mode {bad[0]!r}; one of {', '.join(MODES)}")
        if self.resolved_backend() == "local" and set(self.modes) - {"kill"}:
            raise UserError("the local backend fails a replica one way, kill; "
                            "--backend slurm for node-down, requeue, hang, stall and "
                            "freeze-node")  # fmt: skip
        if not (math.isfinite(self.min_run_s) and self.min_run_s >= 0):
            raise UserError("min_run_s must be a number of seconds >= 0")
        if not 0 <= self.nodes <= 64:
            raise UserError("nodes must be between 0 (one per array task) and 64")
        if not (math.isfinite(self.every) and self.every >= 0):
            raise UserError("--every must be a number of seconds >= 0")
        from ftslurm.lighthouse.config import check_heartbeat_timeout

        check_heartbeat_timeout(self.heartbeat_timeout_ms)
        if not 1 <= self.ranks <= 8:
            raise UserError("--ranks must be between 1 and 8")
        if self.all_fail and self.spares:
            raise UserError("--all-fail takes every node down, spares too: drop --spares")

    def mode(self, k: int) -> str:
        """The failure mode of failure k (0-based)."""
        if not self.modes:
            return "node-down" if self.resolved_backend() == "slurm" else "kill"
        return self.modes[k % len(self.modes)]


def plan_lines(cfg: DemoConfig) -> list[str]:
    """What the demo will do, printed by --dry-run (nothing is started)."""
    from ftslurm.lighthouse.config import safe_min_replicas

    b = cfg.resolved_backend()
    n, k, s, t, c = cfg.replicas, cfg.failures, cfg.spares, cfg.tasks, cfg.cluster_nodes
    start = (
        [f"ftslurm cluster up --nodes {c}   (local Slurm: slurmctld + {c} slurmd nodes)"]
        if b == "slurm"
        else []
    )
    shown = ["DEVICE", *(["GPUS_PER_NODE"] if cfg.ranks > 1 else [])]
    submit = (
        submit_request(cfg, "<lighthouse>").cli_line(shown)
        if b == "slurm"
        else f"{t} x python -m ftslurm.replica job  (DEVICE=cpu, FT_SPARES={s}, supervised by "
        "ftslurm)"
    )
    def fail(i: int) -> str:
        if b != "slurm":
            return f"SIGKILL replica 1's process tree, wait {cfg.down_for:g} s, start attempt+1"
        timed = failure_modes.MODES[cfg.mode(i)].timed
        down = f" --down-for {cfg.down_for:g}" if timed else ""
        rank = f" --rank {cfg.ranks - 1}" if cfg.mode(i) == "kill" and cfg.ranks > 1 else ""
        return f"ftslurm simulate-failure --replica 1 --mode {cfg.mode(i)}{rank}{down}"

    every = f" (at least {cfg.every:g} s after the previous one's turn)" if cfg.every else ""
    survivors = "survivor commits alone" if n == 2 else f"the other {n - 1} commit without it"
    quorum_of = safe_min_replicas(n)
    return [
        f"backend: {b}",
        *start,
        "ftslurm lighthouse start --bind 0.0.0.0:<free port> (its own state dir)"
        + (f" --min-replicas {quorum_of}" if quorum_of > 1 else "")
        + (f" --heartbeat-timeout-ms {cfg.heartbeat_timeout_ms}"
           if cfg.heartbeat_timeout_ms else ""),
        submit,
        f"wait until all {n} replicas are in one quorum" + (f" and {s} spare(s) wait warm" if s
                                                             else ""),
        *[f"failure {i + 1}/{k}{every if i else ''}: {fail(i)}; {survivors}; "
          + ("a warm spare claims the slot and heals; the failed task comes back as a spare"
             if s else "heal") for i in range(k)],
        *(_all_fail_plan(cfg) if cfg.all_fail else []),
        "stop the job, the Lighthouse" + (" and the cluster" if b == "slurm" else ""),
        "ftslurm report <run dir> --plot <run dir>/report.png",
    ]


# --all-fail's checkpoint interval: two DiLoCo outer syncs of the debug preset (sync_steps 6),
# so the story waits for a checkpoint a few seconds, not the preset's 60 steps
ALL_FAIL_INTERVAL = 12


def _all_fail_plan(cfg: DemoConfig) -> list[str]:
    """--all-fail's lines of the plan."""
    if cfg.resolved_backend() == "slurm":
        down = (f"scontrol update State=DOWN on all {cfg.replicas} nodes at once, wait "
                f"{cfg.down_for:g} s, RESUME them: Slurm requeues every task")  # fmt: skip
    else:
        down = (f"SIGKILL all {cfg.replicas} replicas' process trees at once, wait "
                f"{cfg.down_for:g} s, start each again (attempt+1)")  # fmt: skip
    return [
        f"wait for a model checkpoint (every {ALL_FAIL_INTERVAL} steps: --checkpoint.interval="
        f"{ALL_FAIL_INTERVAL}) and a step past it on every replica",
        f"every replica at once: {down}",
        "each replica resumes from that checkpoint (model, optimizer, step, data position), "
        "not step 1; the steps past it are lost and trained again",
    ]


class ReplicaLog:
    """Incremental reader of one replica log: reads only what was appended since last time."""

    def __init__(self, path: Path):
        self.path = path
        self.appended = LogCursor(path)
        self.restarts = 0  # the cursor's restarts this fold has seen
        self._start()

    def _start(self) -> None:
        """The fold's state before any line: at the start, and again when the log was
        truncated or replaced (the cursor reads it from its start again)."""
        self.last_step = -1
        self.attempt = -1
        self.healed_step: dict[int, int] = {}  # attempt -> step of its first heal (> 0)
        self.claims = 0  # a warm spare's claims of a slot (banner `... taken from task U`)
        self.claim_healed: int | None = None  # the step its last claim healed at
        self.commits_since_claim = 0
        self.commits_in_attempt = 0  # since the last banner (a launch, or a spare's claim)
        # banners: Slurm's attempts and the launcher's restarts in place within one (a
        # restart in place keeps the attempt number), and the first heal since the last one
        self.launches = 0
        self.launch_healed: int | None = None
        self.heals = 0  # heals after the start (> step 0), of every attempt
        self.last_healed_step = -1
        # this attempt's resume line: (model checkpoint step or -1, data position step)
        self.resumed: tuple[int, int | None] | None = None
        self.first_step: int | None = None  # this attempt's first training step

    def poll(self) -> None:
        lines = self.appended.lines()
        if self.appended.restarts != self.restarts:
            self.restarts = self.appended.restarts
            self._start()
        for line in lines:
            if (got := logvocab.parse_resume(line)) is not None:
                self.resumed = got[1:]
            if (ev := logvocab.parse_line(line)) is None:
                continue
            if ev.kind == logvocab.LAUNCH and ev.rank is not None:
                self.attempt = ev.rank
                self.commits_in_attempt = 0
                self.launches += 1
                self.launch_healed = None
                self.resumed = self.first_step = None
                if "taken from task" in ev.detail:
                    self.claims += 1
                    self.claim_healed, self.commits_since_claim = None, 0
            elif ev.kind == logvocab.HEALED and (ev.step or 0) > 0:
                self.heals += 1
                self.last_healed_step = ev.step
                if self.attempt > 0:
                    self.healed_step.setdefault(self.attempt, ev.step)
                if self.launch_healed is None:
                    self.launch_healed = ev.step
            if ev.kind == logvocab.HEALED and self.claims and self.claim_healed is None:
                self.claim_healed = ev.step
            elif ev.kind == logvocab.COMMIT and ev.ok:
                self.commits_in_attempt += 1
                self.commits_since_claim += 1 if self.claims else 0
            elif ev.kind == logvocab.TITAN_STEP and ev.step is not None:
                self.last_step = ev.step
                if self.first_step is None:
                    self.first_step = ev.step


class Backend:
    """What the two backends share: the run directory, the Lighthouse, the logs."""

    name = ""

    def __init__(self, cfg: DemoConfig, say: Say):
        self.cfg = cfg
        self.say = say
        self.demo_dir = cfg.outputs / "demo"
        self.lh_dir = self.demo_dir / "lighthouse"
        self.lighthouse = None
        self.run_id = ""
        self.run_dir = Path()
        self.logs: list[ReplicaLog] = []

    # -- lifecycle ---------------------------------------------------------------------
    def start_lighthouse(self, advertise: str, bind_host: str) -> str:
        from ftslurm import lighthouse
        from ftslurm.lighthouse.config import safe_min_replicas

        lighthouse.stop(self.lh_dir)  # a previous demo killed hard
        for old in (self.lh_dir / "lighthouse.log", self.lh_dir / "lighthouse.log.1"):
            old.unlink(missing_ok=True)  # this run's report must not read an older run's quorums

        hb = self.cfg.heartbeat_timeout_ms
        info = lighthouse.start(
            bind=f"{bind_host}:{free_port()}", advertise=advertise, state_dir=self.lh_dir,
            min_replicas=safe_min_replicas(self.cfg.replicas),
            **({"heartbeat_timeout_ms": hb} if hb is not None else {}),  # None: the default
        )
        self.lighthouse = info
        self.say(f"Lighthouse running (pid {info.pid}): TORCHFT_LIGHTHOUSE={info.address}")
        return info.address

    def stop_lighthouse(self) -> None:
        from ftslurm import lighthouse

        if self.lighthouse is not None:
            lighthouse.stop(self.lh_dir)
            log = Path(self.lighthouse.log_path)
            if log.exists() and self.run_dir.is_dir():
                shutil.copyfile(log, self.run_dir / "lighthouse.log")
            self.say("Lighthouse stopped")

    def attach_logs(self) -> None:
        run = Run.of(self.run_id, self.cfg.outputs)
        self.run_dir = run.folder
        self.logs = [ReplicaLog(run.log(i)) for i in range(self.cfg.tasks)]

    @property
    def events_path(self) -> Path:
        return self.run_dir / "events.jsonl"

    def record(self, action: str, replica: int | None, node: str | None, detail: str) -> None:
        ev = InjectedEvent(now_iso(), action, replica, node, self.run_id, detail)
        append_event(ev, self.events_path)

    def poll(self) -> list[ReplicaLog]:
        for log in self.logs:
            log.poll()
        return self.logs

    def quorum_size(self) -> int:
        """Replicas in the newest `Quorum!` line of the Lighthouse log (read from the end)."""
        if self.lighthouse is None:
            return 0
        from ftslurm.daemon import tail_lines

        for line in reversed(tail_lines(Path(self.lighthouse.log_path), 50)):
            if "Quorum! Quorum {" not in line:
                continue
            if q := logvocab.parse_line(line.encode()):
                return len({logvocab.split_replica_id(m.replica_id)[1] for m in q.members})
            if (n := logfilter.folded_members(line.encode())) is not None:
                return n  # a round of the same quorum, folded by the Lighthouse's log filter
        return 0

    # -- backend specific ----------------------------------------------------------------
    def setup(self) -> None:
        raise NotImplementedError

    def fail(self, replica: int, mode: str) -> None:
        raise NotImplementedError

    def restore(self, replica: int, mode: str = "") -> None:
        """The failed replica (or array task) coming back after a failure of `mode`."""
        raise NotImplementedError

    def fail_all(self) -> None:
        """Every replica lost at once (--all-fail)."""
        raise NotImplementedError

    def restore_all(self) -> None:
        """Every replica started again, as after the outage."""
        raise NotImplementedError

    def teardown(self) -> None:
        raise NotImplementedError


def _replica_env(cfg: DemoConfig, lighthouse_addr: str) -> dict[str, str]:
    return {
        "DEVICE": "cpu",
        "STEPS": str(cfg.steps),
        "TORCHFT_LIGHTHOUSE": lighthouse_addr,
        "FTSLURM_OUTPUTS": str(cfg.outputs),
        "FTSLURM_GROUP_SIZE": str(cfg.replicas),
        "FTSLURM_PYTHON": paths.job_python(),
        "GPUS_PER_NODE": str(cfg.ranks),
        # the demo's --spares, not a FT_SPARES left in the shell (the array is sized for it)
        "FT_SPARES": str(cfg.spares),
        # each failure may restart the same task: the story must not run out of requeues
        "FT_MAX_REQUEUES": str(max(knobs.environ().FT_MAX_REQUEUES, cfg.failures + 1)),
        # --all-fail: a checkpoint soon (a user's own interval, given after it, wins)
        **({"FTSLURM_EXTRA_ARGS": f"--checkpoint.interval={ALL_FAIL_INTERVAL} "
            + (knobs.environ().FTSLURM_EXTRA_ARGS or "")} if cfg.all_fail else {}),
    }


def submit_request(cfg: DemoConfig, lighthouse_addr: str) -> submission.SubmitRequest:
    """The FT array the Slurm backend submits, as `ftslurm submit` would: from the checkout
    (the script's relative --output), Slurm's own messages beside the run folders of the
    demo's outputs, the knobs of `_replica_env` (its group size is the array's task count)."""
    job_knobs = _replica_env(cfg, lighthouse_addr)
    job_knobs.pop("FTSLURM_GROUP_SIZE")
    job_knobs.pop("FT_SPARES")  # the request's spares
    runs = paths.torchft_runs_dir(cfg.outputs)
    return submission.SubmitRequest(
        str(paths.project_root() / paths.FT_SCRIPT), [f"--output={runs}/slurm-%A_%a.out"],
        array=f"0-{cfg.tasks - 1}", spares=cfg.spares, knobs=job_knobs,
        workdir=paths.project_root(), outputs=cfg.outputs, timeout=60,
    )  # fmt: skip


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, cfg: DemoConfig, say: Say):
        super().__init__(cfg, say)
        self.cluster_dir = paths.cluster_dir()
        self.started_cluster = False
        self.job: int | None = None
        self.down_nodes: list[str] = []  # set DOWN by --all-fail and not RESUMEd yet

    def setup(self) -> None:
        from ftslurm.cluster import local

        was_up = local.status(self.cluster_dir).running
        running = local.load_spec(self.cluster_dir) if was_up else None
        busy = local.active_jobs(running) if running else []
        if busy:
            # the demo's array would wait behind them, or a resize would kill them
            raise UserError(
                f"the local cluster runs job(s) {', '.join(busy)}: the demo needs its nodes; "
                f"`scancel {' '.join(busy)}` first, or set FTSLURM_CLUSTER_DIR to another "
                "folder for a cluster of the demo's own"
            )
        spec = local.up(nodes=self.cfg.cluster_nodes, state_dir=self.cluster_dir, progress=self.say)
        self.started_cluster = not was_up
        os.environ["SLURM_CONF"] = str(spec.conf_path)
        addr = self.start_lighthouse(advertise="login-0", bind_host="0.0.0.0")
        self.job = submission.submit(submit_request(self.cfg, addr), say=self.say).job_id
        self.run_id = str(self.job)
        self.attach_logs()
        spares = f", FT_SPARES={self.cfg.spares}" if self.cfg.spares else ""
        self.say(
            f"submitted FT array job {self.job} "
            f"(sbatch --array=0-{self.cfg.tasks - 1} {paths.FT_SCRIPT}, DEVICE=cpu{spares})"
        )

    def fail(self, replica: int, mode: str) -> None:
        """`ftslurm simulate-failure --replica R --mode MODE --down-for D`, the same code:
        node-down is DOWN, D seconds, RESUME (RESUMEd on every way out); kill SIGKILLs the
        training worker (the launcher requeues its task); requeue is `scontrol requeue`.
        Each is logged to the event log."""
        from ftslurm import failure, failure_plan
        from ftslurm.slurm import client

        slurm = client.current()
        target = failure_plan.resolve_target(
            slurm.jobs(), slurm.nodes(), replica=replica, node=None, job=self.job,
            here=failure.hostname(),
        )  # fmt: skip
        if mode == "kill" and self.cfg.ranks > 1:  # one rank's death, as a GPU's error
            target = dataclasses.replace(target, rank=self.cfg.ranks - 1)
        # a stall never returns in the field: held until the replica's watchdog ends the
        # worker (the injection ends when it exits), not --down-for, after which it would go on
        down_for = max(self.cfg.down_for, STALL_HOLD_S) if mode == "stall" else self.cfg.down_for
        plan = failure_plan.make_plan(mode, target, down_for=down_for,
                                      reason="ftslurm demo", kill=failure.selection(mode, target))
        self.say(f"simulate-failure: {'; '.join(plan.lines())}")
        # its log: the events name the slot the task holds (with spares), found beside it
        failure.execute(plan, say=self.say, events_path=self.events_path,
                        log_path=self.logs[replica].path,
                        count_as_bad=self.cfg.count_as_bad)  # fmt: skip

    def restore(self, replica: int, mode: str = "") -> None:
        what = "array task" if self.cfg.spares else "replica"
        if mode and failure_modes.MODES[mode].launcher_acts:  # restart in place (job.py)
            self.say(f"{what} {replica}'s launcher restarts its training in place (the node "
                     "is fine), or requeues it")  # fmt: skip
        elif mode == "requeue":
            self.say(f"Slurm starts {what} {replica} again (requeued)")
        else:
            self.say(f"Slurm requeues {what} {replica} on the RESUMEd node")

    def fail_all(self) -> None:
        """Every node of the array DOWN at once: Slurm requeues every task (a whole-array
        outage: a power or network loss, the shared file system gone)."""
        from ftslurm.slurm import client

        slurm = client.current()
        tasks = slurm.array_tasks(self.job) if self.job is not None else {}
        for task, info in sorted(tasks.items()):
            if info.state != "RUNNING" or not info.node:
                continue
            self.down_nodes.append(info.node)  # before the call: RESUMEd on every way out
            slurm.update_node(info.node, "DOWN", "ftslurm demo --all-fail")
            self.record("node-down", task, info.node,
                        "State=DOWN Reason=ftslurm demo --all-fail (every node at once)")
        self.say(f"{', '.join(self.down_nodes)} set DOWN together: every replica lost, no "
                 "peer left to heal from; Slurm requeues every task")  # fmt: skip

    def restore_all(self) -> None:
        from ftslurm.slurm import client

        while self.down_nodes:
            node = self.down_nodes[0]
            client.current().update_node(node, "RESUME")
            self.down_nodes.pop(0)
            self.record("resume", None, node, "RESUME (ftslurm demo --all-fail)")
        self.say("every node RESUMEd: Slurm starts the requeued tasks again")

    def teardown(self) -> None:
        from ftslurm.cluster import local
        from ftslurm.slurm import client

        if self.down_nodes:  # interrupted while every node was DOWN
            with contextlib.suppress(Exception):
                self.restore_all()
        if self.job is not None:
            client.current().scancel(str(self.job), check=False)
            self.say(f"job {self.job} cancelled")
        self.stop_lighthouse()
        if self.started_cluster:
            local.down(self.cluster_dir)
            self.say("local Slurm cluster stopped")


class LocalBackend(Backend):
    name = "local"

    def __init__(self, cfg: DemoConfig, say: Say):
        super().__init__(cfg, say)
        self.procs: dict[int, int] = {}  # replica -> pid of its launcher
        self.attempts: dict[int, int] = {}
        self.addr = ""

    def setup(self) -> None:
        self.addr = self.start_lighthouse(advertise="127.0.0.1", bind_host="127.0.0.1")
        self.run_id = "local-" + time.strftime("%Y%m%d-%H%M%S")
        self.attach_logs()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.cfg.tasks):
            self._start(i, 0)
        spares = f" and {self.cfg.spares} spare(s)" if self.cfg.spares else ""
        self.say(
            f"started {self.cfg.replicas} replicas{spares} (python -m ftslurm.replica job, "
            "DEVICE=cpu)"
        )

    def _start(self, replica: int, attempt: int) -> None:
        from ftslurm.runner import spawn

        env = {
            **_replica_env(self.cfg, self.addr),
            "FTSLURM_REPLICA_ID": str(replica),
            "FTSLURM_ATTEMPT": str(attempt),
            "FTSLURM_RUN_ID": self.run_id,
            "MASTER_ADDR": "127.0.0.1",
        }
        if self.cfg.spares:  # slots: the task index, the slot is claimed (slots.py)
            env.update(FT_SPARES=str(self.cfg.spares), FTSLURM_TASK=str(replica))
        proc = spawn(
            [sys.executable, "-m", "ftslurm.replica", "job"],
            log_path=self.logs[replica].path,
            extra_env=env,
            detach=True,
        )
        self.procs[replica] = proc.pid
        self.attempts[replica] = attempt
        (self.run_dir / f"replica_{replica}.pid").write_text(f"{proc.pid}\n")

    def _kill(self, replica: int) -> list[int]:
        pid = self.procs.pop(replica, None)
        if pid is None:
            return []
        tree = procs.process_tree(pid)
        procs.kill_pids(tree, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # our child: reap it
        # torchrun's worker is in a session of its own and is not our child: a killed process
        # freeing a few GiB stays "alive" ~0.1 s; the demo ends with nothing of it left
        with contextlib.suppress(WaitTimeout):  # one still there after 10 s: the story goes on
            procs.wait_gone(lambda: any(procs.pid_alive(p) for p in tree), timeout=10.0)
        (self.run_dir / f"replica_{replica}.pid").unlink(missing_ok=True)
        return tree

    def fail(self, replica: int, mode: str) -> None:  # noqa: ARG002 (kill: validated)
        tree = self._kill(replica)
        self.record("kill", replica, None, f"SIGKILL to {len(tree)} processes (ftslurm demo)")
        self.say(f"replica {replica} killed: SIGKILL to its {len(tree)} processes")

    def restore(self, replica: int, mode: str = "") -> None:  # noqa: ARG002 - one way here
        attempt = self.attempts.get(replica, 0) + 1
        self._start(replica, attempt)
        self.record("restart", replica, None, f"attempt {attempt} (ftslurm demo)")
        self.say(f"replica {replica} started again (attempt {attempt}), as a requeue would")

    def fail_all(self) -> None:
        """SIGKILL every replica's process tree in one go (no replica outlives another)."""
        trees = {r: procs.process_tree(pid) for r, pid in self.procs.items()}
        every = [p for tree in trees.values() for p in tree]
        procs.kill_pids(every, signal.SIGKILL)
        for replica in trees:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.procs.pop(replica), 0)  # our child: reap it
            (self.run_dir / f"replica_{replica}.pid").unlink(missing_ok=True)
        with contextlib.suppress(WaitTimeout):  # one still there after 10 s: the story goes on
            procs.wait_gone(lambda: any(procs.pid_alive(p) for p in every), timeout=10.0)
        for replica, tree in trees.items():
            self.record("kill", replica, None,
                        f"SIGKILL to {len(tree)} processes, every replica at once (ftslurm demo)")
        self.say(f"every replica killed at once (SIGKILL to {sum(map(len, trees.values()))} "
                 "processes): no peer left to heal from")  # fmt: skip

    def restore_all(self) -> None:
        for replica in range(self.cfg.tasks):
            self.restore(replica)

    def teardown(self) -> None:
        for replica in list(self.procs):
            self._kill(replica)
        self.say("replicas stopped")
        self.stop_lighthouse()


def run_demo(cfg: DemoConfig, say: Say) -> Path:
    """Run the story; returns the run directory. Cleans up in every case."""
    cfg.validate()
    backend: Backend = (SlurmBackend if cfg.resolved_backend() == "slurm" else LocalBackend)(
        cfg, say
    )
    t0 = time.monotonic()
    stamp = lambda: f"[{time.monotonic() - t0:6.1f} s]"  # noqa: E731
    tsay: Say = lambda m: say(f"{stamp()} {m}")  # noqa: E731
    backend.say = tsay
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        backend.setup()
        tsay(f"logs: {backend.run_dir}/")
        _story(backend, cfg, tsay)
    except WaitTimeout as e:
        raise UserError(f"demo stopped: {e}; logs in {backend.run_dir}") from e
    finally:
        signal.signal(signal.SIGTERM, old_term)
        tsay("cleaning up ...")
        backend.teardown()
    return backend.run_dir


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def _story(b: Backend, cfg: DemoConfig, say: Say) -> None:
    n = cfg.replicas
    say(f"waiting for all {n} replicas to join one quorum (model build + imports: ~30 s) ...")
    wait_for(lambda: b.quorum_size() == n, cfg.timeout, interval=0.5, what=f"a quorum of {n}")
    b.poll()
    say(f"quorum of {n}: replicas {', '.join(str(i) for i in range(n))} train together")
    t_quorum = time.monotonic()
    if cfg.spares:
        _wait_spares(b, cfg, say)
    turn = None
    for k in range(cfg.failures):
        if turn is not None:  # --every: no sooner than that after the previous one's turn
            time.sleep(max(0.0, turn + cfg.every - time.monotonic()))
        turn = time.monotonic()
        (_one_failure_with_spare if cfg.spares else _one_failure)(b, cfg, k, say)
    if cfg.all_fail:
        _all_fail(b, cfg, say)
    if (rest := t_quorum + cfg.min_run_s - time.monotonic()) > 0:
        say(f"training on for {rest:.0f} s more (min_run_s {cfg.min_run_s:g})")
        time.sleep(rest)
    base = min(x.last_step for x in b.poll() if x.last_step >= 0)
    wait_for(
        lambda: min(x.last_step for x in _holders(b)) >= base + 3, cfg.timeout, interval=0.5,
        what="a few more steps on every replica",
    )  # fmt: skip
    say(f"every replica is at training step >= {base + 3}: the story is told, stopping")


def _how(cfg: DemoConfig, k: int) -> str:
    """' (kill)' where the modes were chosen (the default story's words stay as they were)."""
    return f" ({cfg.mode(k)})" if cfg.modes else ""


def _one_failure(b: Backend, cfg: DemoConfig, k: int, say: Say) -> None:
    """Fail replica `target`, show the survivors training alone, bring it back, see it heal."""
    n = cfg.replicas
    target = 1 + k % (n - 1)
    survivor = b.logs[0]
    base = b.poll()[0].last_step
    wait_for(
        lambda: b.poll()[0].last_step >= base + cfg.steps_between, cfg.timeout, interval=0.5,
        what=f"{cfg.steps_between} more steps",
    )  # fmt: skip
    step = survivor.last_step
    log = b.logs[target]
    launches_before, heals_before = log.launches, log.heals
    say(f"failure {k + 1}/{cfg.failures}{_how(cfg, k)}: taking replica {target} down at "
        f"training step {step}")  # fmt: skip
    t_fail = time.monotonic()

    seen: list[str] = []

    def alone_or_back() -> bool:
        """The survivors committed without it; or it was restarted in place and healed first
        (a warm restart rejoins the next quorum: then there is no degraded stretch)."""
        b.poll()
        if b.quorum_size() == n - 1 and survivor.last_step >= step + 2:
            seen.append("alone")
        elif log.launches > launches_before and log.launch_healed is not None:
            seen.append("back")
        return bool(seen)

    [(_, t_alone)] = wait_while(
        lambda: b.fail(target, cfg.mode(k)),
        [(alone_or_back, "the survivors to commit without it")], cfg.timeout,
    )  # fmt: skip
    if seen[0] == "alone":
        say(
            f"survivors train on without replica {target}: "
            f"training step {step} -> {survivor.last_step} "
            f"({n - 1}/{n} replicas, {t_alone - t_fail:.1f} s after the failure)"
        )
    else:
        say(f"replica {target} restarted in place and healed {t_alone - t_fail:.1f} s after "
            "the failure, before the survivors had committed without it")  # fmt: skip
    time.sleep(max(0.0, cfg.down_for - (time.monotonic() - t_fail)))
    b.restore(target, cfg.mode(k))
    t_back = time.monotonic()

    def healed() -> bool:
        """Restarted (requeued by Slurm, or in place by its launcher: a new banner) and
        healed; or, after a silent failure that ended before the watchdog or Slurm acted,
        healed in place (the same attempt went on: it committed nothing of the step it stood
        still in, and its next quorum healed it)."""
        b.poll()
        if log.launches > launches_before:
            return log.launch_healed is not None
        return failure_modes.MODES[cfg.mode(k)].silent and log.heals > heals_before

    wait_for(healed, cfg.timeout, interval=0.1, what=f"replica {target} to heal")
    how = ("started again" if log.launches > launches_before
           else "continued (it was stopped, not restarted)")
    say(
        f"replica {target} (attempt {log.attempt}) healed from a peer at torchft step "
        f"{log.last_healed_step}, {time.monotonic() - t_back:.1f} s after it was {how} "
        "(torchft steps count outer syncs, as in `ftslurm report`)"
    )
    wait_for(lambda: b.quorum_size() == n and b.poll() and log.commits_in_attempt > 0,
             cfg.timeout, interval=0.1, what="full quorum and a healed commit")  # fmt: skip
    full = time.monotonic() - t_fail
    cfg.measured.append({"failure": k + 1, "spares": 0, "mode": cfg.mode(k),
                         "full_strength_s": round(full, 2)})  # fmt: skip
    say(f"quorum of {n} again: full strength {full:.1f} s after the failure (the restarted "
        "replica healed and committed with all)")  # fmt: skip


# ---------------------------------------------------------------- every replica at once


def _checkpoints(b: Backend) -> list[int]:
    """The complete model checkpoints' steps in the run's checkpoint folder (the dump folder's
    `checkpoint`, or CHECKPOINT_FOLDER), a seed checkpoint (step 0) left out."""
    from ftslurm.replica.worker import ft_checkpoints

    given = knobs.environ().CHECKPOINT_FOLDER
    folder = Path(given) if given else b.run_dir / "checkpoint"
    return sorted(s for s, ok in ft_checkpoints.scan(folder).items() if ok and s > 0)


def _all_fail(b: Backend, cfg: DemoConfig, say: Say) -> None:
    """Every replica lost at once after a model checkpoint, every one started again: each
    resumes from the checkpoint (model, optimizer, step, data position), not from step 1; the
    steps trained past it are lost (at most the interval) and trained again."""
    n = cfg.replicas
    say(f"waiting for a model checkpoint (every {ALL_FAIL_INTERVAL} steps) and a step past it "
        "on every replica ...")  # fmt: skip

    def past_a_checkpoint() -> int | None:
        done, logs = _checkpoints(b), b.poll()
        return done[-1] if done and min(x.last_step for x in logs) > done[-1] else None

    ckpt = wait_for(past_a_checkpoint, cfg.timeout, interval=0.2,
                    what="a model checkpoint and a step past it")  # fmt: skip
    before = [x.attempt for x in b.logs]
    say(f"checkpoint step-{ckpt} written; replicas at training steps "
        f"{', '.join(str(x.last_step) for x in b.logs)}: taking every replica down at once")
    t_fail = time.monotonic()
    b.fail_all()
    last = [x.last_step for x in b.poll()]  # what each trained before the outage
    time.sleep(max(0.0, cfg.down_for - (time.monotonic() - t_fail)))
    b.restore_all()

    def resumed() -> bool:
        return all(x.attempt > a and x.first_step is not None
                   for x, a in zip(b.poll(), before, strict=True))  # fmt: skip

    wait_for(resumed, cfg.timeout, interval=0.2, what="every replica to train again")
    for i, x in enumerate(b.logs):
        model = x.resumed[0] if x.resumed else -1
        where = (f"checkpoint step-{model} (model, optimizer, step and its data position "
                 f"step-{x.resumed[1]})" if x.resumed and model > 0 else "no checkpoint")
        if x.first_step == max(model, 0) + 1:
            say(f"replica {i} (attempt {x.attempt}) resumed from {where}: first step "
                f"{x.first_step}, not 1")  # fmt: skip
        else:  # back after a peer had resumed and trained on: it takes the peer's state
            say(f"replica {i} (attempt {x.attempt}) loaded {where}, came back after a peer "
                f"had resumed from it and healed from that peer: first step {x.first_step}")
    say(f"steps lost: {max(0, max(last) - max(ckpt, 0))} (trained to step {max(last)} before "
        f"the outage, trained again from step {ckpt + 1}; at most the interval, "
        f"{ALL_FAIL_INTERVAL})")  # fmt: skip
    wait_for(lambda: b.quorum_size() == n, cfg.timeout, interval=0.2, what=f"a quorum of {n}")
    say(f"quorum of {n} again {time.monotonic() - t_fail:.1f} s after the outage; `ftslurm "
        "report` lists each restart and its lost steps")  # fmt: skip


# ---------------------------------------------------------------- with warm spares


def _slot_root(b: Backend) -> Path:
    from ftslurm.replica import slots

    return slots.slots_dir(b.run_dir)


def _holder(b: Backend, slot: int) -> tuple[int, int]:
    """(task, epoch) holding `slot` now."""
    from ftslurm.replica import slots

    c = slots.current(_slot_root(b), slot)
    return (slot, 0) if c is None else (c.task, c.epoch)


def _holders(b: Backend) -> list[ReplicaLog]:
    """The logs of the tasks that hold a slot now (all of them without spares)."""
    b.poll()
    if not b.cfg.spares:
        return b.logs
    return [b.logs[_holder(b, s)[0]] for s in range(b.cfg.replicas)]


def _warm(log: ReplicaLog, task: int) -> bool:
    try:
        text = log.path.read_bytes()
    except OSError:
        return False
    last = text.rfind(logvocab.SPARE_BANNER)
    if last < text.rfind(logvocab.BANNER):  # a spare that claimed a slot since: not a spare now
        return False
    return last >= 0 and f"spare (task {task}): warm".encode() in text[last:]


def _wait_spares(b: Backend, cfg: DemoConfig, say: Say) -> list[int]:
    """Wait until every task that holds no slot waits warm; the spare tasks."""
    held = {_holder(b, s)[0] for s in range(cfg.replicas)}
    spares = [t for t in range(cfg.tasks) if t not in held]
    wait_for(lambda: all(_warm(b.logs[t], t) for t in spares), cfg.timeout, interval=0.5,
             what="the spares to wait warm")  # fmt: skip
    say(f"spare task(s) {', '.join(map(str, spares))} wait warm: torch, torchft and torchtitan "
        "imported, torchrun and torch.distributed up, stopped just before torchft's Manager")
    return spares


def _one_failure_with_spare(b: Backend, cfg: DemoConfig, k: int, say: Say) -> None:
    """Fail the task holding slot `target`; a warm spare claims the slot and heals; the failed
    task comes back as a spare. Says the time to full strength: failure -> the replacement
    committed a step with the whole group."""
    n = cfg.replicas
    target = 1 + k % (n - 1)
    task, epoch = _holder(b, target)
    survivor = b.logs[_holder(b, 0)[0]]
    base = survivor.last_step
    wait_for(
        lambda: b.poll() and survivor.last_step >= base + cfg.steps_between, cfg.timeout,
        interval=0.5, what=f"{cfg.steps_between} more steps",
    )  # fmt: skip
    step = survivor.last_step
    say(f"failure {k + 1}/{cfg.failures}{_how(cfg, k)}: taking replica {target} (array task "
        f"{task}) down at training step {step}")  # fmt: skip
    t_fail = time.monotonic()
    claim: list[tuple[int, int]] = []

    def claimed() -> tuple[int, int] | None:
        h = _holder(b, target)
        if h[1] > epoch:
            claim.append(h)
            return h
        return None

    def full() -> bool:
        log = b.logs[claim[-1][0]]
        b.poll()
        return (log.claim_healed is not None and log.commits_since_claim > 0
                and b.quorum_size() == n)  # fmt: skip

    # watched while the failure runs: a node-down blocks for --down-for
    (new, t_claim), (_, t_full) = wait_while(
        lambda: b.fail(task, cfg.mode(k)),
        [(claimed, f"a spare to claim slot {target}"),
         (full, f"replica {target} to heal and commit")], cfg.timeout,
    )  # fmt: skip
    say(f"spare task {new[0]} claimed slot {target} (fencing epoch {new[1]}) "
        f"{t_claim - t_fail:.1f} s after the failure: it trains as replica {target} from now "
        "on, with its data shard")  # fmt: skip
    log = b.logs[new[0]]
    cfg.measured.append({"failure": k + 1, "spares": cfg.spares, "mode": cfg.mode(k),
                         "full_strength_s": round(t_full - t_fail, 2),
                         "claim_s": round(t_claim - t_fail, 2)})  # fmt: skip
    say(f"replica {target} (now task {new[0]}) healed from a peer at torchft step "
        f"{log.claim_healed} and committed with all {n}: full strength "
        f"{t_full - t_fail:.1f} s after the failure (claim -> healed commit "
        f"{t_full - t_claim:.1f} s)")  # fmt: skip
    b.restore(task, cfg.mode(k))
    wait_for(lambda: _warm(b.logs[task], task), cfg.timeout, interval=0.5,
             what=f"task {task} back as a spare")  # fmt: skip
    say(f"task {task} came back, found slot {target} taken and waits warm as a spare")
