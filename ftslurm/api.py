"""Python API: submit the FT job array (and the classic job) from Python with `submitit`.

    import ftslurm
    from ftslurm import lighthouse
    lh = lighthouse.start(advertise="login-0")                  # or an address string
    run = ftslurm.submit_ft_array(replicas=2, config={"DEVICE": "cpu", "STEPS": "50"},
                                  lighthouse=lh, partition="debug")
    run.states()            # {0: 'RUNNING', 1: 'PENDING'}
    run.replicas[1].log_path  # outputs/torchft/tft-<job>/tft-<job>_1.out (`ftslurm report`)
    run.cancel()

What runs where. submitit pickles a callable (`ReplicaTask`) into `outputs/submitit/` and
writes one sbatch array file (one node and one task per array task), which ftslurm's submit
service (`ftslurm.submission`, as `ftslurm submit`) hands to sbatch. On the node, submitit
unpickles it with the submitting interpreter's path (`sys.executable`: a venv on the shared
filesystem), and it runs the sbatch script's launcher, `ftslurm.replica.launcher.job.main`,
appending
to the file the script writes (`outputs/torchft/tft-<job>/tft-<job>_<i>.out`), so the
launcher's banner starts every attempt and `ftslurm report` / `status` / `logs` read an API
run like a script run. submitit's own logs stay in `outputs/submitit/`, where the report does
not take them for replicas. The launcher runs in the batch step (`use_srun=False`), as in the
script: the classic launcher calls `srun` itself, and Slurm's cancel/requeue signals reach the
launcher, which forwards them to torchrun.

Requeue semantics (why not submitit's). submitit requeues a job only from its USR2 handler,
and usefully only for `Checkpointable` callables that resume from their own checkpoint. An FT
replica heals from a live peer instead, so the array keeps Slurm's `--requeue`, as the script
does: a node that goes DOWN puts its task back in the queue (submitit's pickle is still there,
so the requeued task runs the same callable and logs its next attempt in the same file); a
crashed training process is requeued by the launcher itself (FT_MAX_REQUEUES); USR2 is
ignored (no checkpoint to take, and its default would end the replica). Slurm's time limit
is met as in the script: `--signal=B:USR1@<FTSLURM_TIME_LIMIT_SIGNAL_S>` to the batch shell,
which `exec`s submitit's runner, so the launcher in it saves a final checkpoint and requeues.

sbatch, state and cancel go through `ftslurm.slurm.client`. States come from `squeue`:
submitit's come from `sacct`, which clusters without accounting (the local cluster) lack.
"""

from __future__ import annotations

import contextlib
import operator
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftslurm import knobs as knoblib
from ftslurm import logvocab, paths, submission
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from ftslurm.resources import CLASSIC_JOB_NAME, CPU_NODE, FT_JOB_NAME, GPU_NODE
from ftslurm.slurm import client

SUBMITIT_DIRNAME = "submitit"
# Any of these from the caller sizes the job's memory (instead of the scripts' --mem=0).
_MEMORY_OPTIONS = frozenset({"mem", "mem_gb", "mem_per_cpu", "mem_per_gpu"})
FINISHED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                   "BOOT_FAIL", "DEADLINE", "PREEMPTED")  # fmt: skip


# --------------------------------------------------------------------------------------------
# What runs on the node (pickled by submitit; must stay importable and cheap to pickle)


@dataclass(frozen=True)
class ReplicaTask:
    """The callable submitit runs on a node: the replica launcher, output in the run's log.

    `kind` is `job` (an FT replica) or `classic`; `knobs` are env knobs (ftslurm/knobs.py);
    they win over the node's environment (which Slurm exports from the submitting shell, and which
    carries the secrets: they are never pickled). `outputs` is the outputs folder.
    """

    kind: str
    knobs: dict[str, str]
    outputs: str

    def env(self, node_env: Mapping[str, str]) -> dict[str, str]:
        env = {**node_env, **self.knobs}
        if self.kind == "job":
            # the launcher's internal channels (replica id, group size, attempt, run id...):
            # Slurm's variables name the replica inside an array, and stale copies exported
            # from the submitting shell must not override them
            for name in knoblib.INTERNAL:
                env.pop(name, None)
            if not env.get("SLURM_ARRAY_JOB_ID"):
                # one replica is a plain job (submitit submits a single callable without
                # --array): name it as task 0 of a group of 1 (no self-requeue then)
                env.update(FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
                           FTSLURM_RUN_ID=env.get("SLURM_JOB_ID", "local"))  # fmt: skip
        return env

    def log_path(self, env: Mapping[str, str]) -> Path:
        """The file the sbatch script would append to for this job/task."""
        return _log_path(self.kind, Path(self.outputs), env)

    def __call__(self, replica: int = 0) -> int:
        from ftslurm.replica.launcher import job as launcher
        from ftslurm.runner import CommandError

        with contextlib.suppress(ValueError, AttributeError):  # not in the main thread
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        env = self.env(os.environ)
        log = self.log_path(env)
        log.parent.mkdir(parents=True, exist_ok=True)
        with _output_appended_to(log):
            task = env.get("SLURM_ARRAY_TASK_ID")
            if self.kind == "job" and task is not None and int(task) != replica:
                print(f"Error: submitit gave replica {replica} to array task {task}", flush=True)
                raise RuntimeError(f"replica {replica} != array task {task}")
            try:
                rc = launcher.main([self.kind], env)
            except (UserError, CommandError) as e:
                msg = e.one_line() if isinstance(e, CommandError) else str(e)
                print(f"Error: {msg}", file=sys.stderr, flush=True)
                raise RuntimeError(msg) from None
        if rc != 0:
            # an exception marks the submitit job FAILED (its result pickle says why)
            raise RuntimeError(f"launcher exited with code {rc}; see {log}")
        return rc


def _log_path(kind: str, outputs: Path, env: Mapping[str, str]) -> Path:
    if kind == "classic":
        return outputs / f"classic-{env.get('SLURM_JOB_ID', 'local')}.out"
    settings = knoblib.load(env)
    job = env.get("SLURM_ARRAY_JOB_ID") or settings.FTSLURM_RUN_ID
    task = env.get("SLURM_ARRAY_TASK_ID") or settings.FTSLURM_REPLICA_ID or 0
    return logvocab.replica_log(job, task, logvocab.run_dir(job, outputs))


@contextlib.contextmanager
def _output_appended_to(path: Path) -> Iterator[None]:
    """fds 1 and 2 (for child processes: torchrun) and sys.stdout/stderr (for this process,
    whoever replaced them) appended to `path`, then restored: submitit's closing lines go
    back to its own log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    stream = open(path, "a", buffering=1, errors="replace")  # noqa: SIM115
    try:
        os.dup2(stream.fileno(), 1)
        os.dup2(stream.fileno(), 2)
        sys.stdout = sys.stderr = stream
        yield
    finally:
        stream.flush()
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        stream.close()


# --------------------------------------------------------------------------------------------
# Handles


class ReplicaEnded(RuntimeError):
    """`FTArray.wait_until`: a replica finished (FAILED, CANCELLED, ...), so the state waited
    for will not come."""


@dataclass
class ReplicaHandle:
    """One replica (array task) of an FT run, or the classic job (`kind == "classic"`).

    `state` asks Slurm (squeue) each time; `log_path` is the launcher's log for this replica,
    appended by every attempt (what `ftslurm report` reads)."""

    job_id: str  # `<array job>_<task>` or `<job>`
    replica_id: int
    log_path: Path
    submitit_job: Any = field(repr=False, default=None)
    kind: str = "ft"

    @property
    def array_job_id(self) -> int:
        return int(self.job_id.split("_", 1)[0])

    @property
    def state(self) -> str:
        """Slurm's state (PENDING, RUNNING, COMPLETED, ...), or UNKNOWN once Slurm forgot it."""
        for j in client.current().jobs(self.array_job_id):
            if j.key == self.job_id or (j.array_task_id is None and str(j.job_id) == self.job_id):
                return j.state
        return self._state_from_submitit()

    def _state_from_submitit(self) -> str:
        # Slurm has purged the job (MinJobAge): submitit's result pickle tells how it ended
        job = self.submitit_job
        if job is None:
            return "UNKNOWN"
        result = Path(job.paths.result_pickle)
        if not result.exists():
            return "UNKNOWN"
        from submitit.core.utils import pickle_load

        try:
            outcome = pickle_load(result)[0]
        except Exception:  # noqa: BLE001 - an unreadable pickle is no state
            return "UNKNOWN"
        return "COMPLETED" if outcome == "success" else "FAILED"

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def cancel(self) -> None:
        client.current().scancel(self.job_id)

    def wait(self, timeout: float = 3600, interval: float = 2.0) -> str:
        """Wait until Slurm says this job finished; return its final state (UNKNOWN when
        Slurm has forgotten the job and submitit has no result). Raises
        `ftslurm.wait.WaitTimeout` after `timeout` s."""
        from ftslurm.wait import wait_for

        return wait_for(lambda: (s := self.state) in (*FINISHED_STATES, "UNKNOWN") and s,
                        timeout, interval, what=f"job {self.job_id} to finish")  # fmt: skip


@dataclass
class FTArray:
    """A submitted FT job array: one `ReplicaHandle` per replica."""

    job_id: int
    replicas: list[ReplicaHandle]
    log_dir: Path  # outputs/torchft/tft-<job>: `ftslurm report <log_dir>`
    lighthouse: str
    submitit_folder: Path
    spares: int = 0  # warm spares: the last `spares` handles start as spares (FT_SPARES)

    def states(self) -> dict[int, str]:
        """{replica id: Slurm state} from one squeue call."""
        return self._snapshot()[0]

    def _snapshot(self) -> tuple[dict[int, str], set[int]]:
        """The states and the replicas held by Slurm (`scontrol release`), one squeue call."""
        from ftslurm.slurm.parse import is_held

        by_task = {j.array_task_id: j for j in client.current().jobs(self.job_id)}
        held = {t for t, j in by_task.items() if t is not None and is_held(j)}
        if len(self.replicas) == 1 and not by_task.get(0):
            return {0: self.replicas[0].state}, held
        states = {r.replica_id: (j.state if (j := by_task.get(r.replica_id)) else None)
                  or r._state_from_submitit() for r in self.replicas}  # fmt: skip
        return states, held

    def wait_until(
        self,
        state: str = "RUNNING",
        timeout: float = 300,
        interval: float = 1.0,
        ended_grace: float = 10.0,
    ) -> dict[int, str]:
        """Wait until every replica is in `state` (a Slurm job state, any case); return the
        states. Raises `ReplicaEnded` as soon as a replica has stayed in a final state other
        than `state` (FAILED, CANCELLED, ..., or UNKNOWN: forgotten by Slurm) or is held
        (requeued held, JobHeldUser, REQUEUE_HOLD: until someone runs `scontrol release`) for
        `ended_grace` s -- a requeue passes through such states briefly -- and
        `ftslurm.wait.WaitTimeout` after `timeout` s."""
        from ftslurm.slurm.parse import JOB_STATES
        from ftslurm.wait import wait_for

        want = state.strip().upper() if isinstance(state, str) else ""
        if want not in JOB_STATES:
            raise UserError(f"{state!r} is not a Slurm job state; e.g. RUNNING, COMPLETED")
        ended_since: dict[int, float] = {}

        def reached() -> dict[int, str] | None:
            states, held = self._snapshot()
            now = time.monotonic()
            for rid, s in states.items():
                # UNKNOWN: Slurm has forgotten the job (and submitit has no result): gone too
                if (s in (*FINISHED_STATES, "UNKNOWN") or rid in held) and s != want:
                    if now - ended_since.setdefault(rid, now) >= ended_grace:
                        why = (f"held ({s}): it will not be {want} until released (scontrol "
                               f"release {self.job_id}_{rid})" if rid in held
                               else f"{s}: it will not be {want}")  # fmt: skip
                        raise ReplicaEnded(f"replica {rid} of job {self.job_id} is {why}")
                else:
                    ended_since.pop(rid, None)
            return states if all(v == want for v in states.values()) else None

        return wait_for(reached, timeout, interval=interval, what=f"all replicas {want}")

    def cancel(self) -> None:
        """scancel the whole array (every replica)."""
        client.current().scancel(str(self.job_id))


# --------------------------------------------------------------------------------------------
# Submission


def _count(name: str, value: Any) -> None:
    """A whole number >= 1, else a UserError (`"2"` or `2.0` would fail later, deep inside)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)  # int, numpy integers; not "2", 2.0 or True
    except TypeError:
        raise UserError(f"{name}={value!r}: need a whole number (an int), at least 1") from None
    if value < 1:
        raise UserError(f"{name}={value}: need at least 1")


def _knobs(config: str | Mapping[str, str] | None) -> dict[str, str]:
    """`config`: a preset name (FTSLURM_PRESET) or a mapping of the knobs read on the nodes
    (ftslurm/knobs.py); their values are checked with the plan (preflight)."""
    if config is None:
        return {}
    if isinstance(config, str):
        return {"FTSLURM_PRESET": config}
    given = {str(k): str(v) for k, v in config.items()}
    secrets = [k for k in given if k in knoblib.SECRETS]
    if secrets:
        raise UserError(
            f"{', '.join(secrets)} must not be in config (it would be pickled to disk): export "
            "it in the submitting shell; Slurm passes the environment on to the job"
        )
    known = {k.name for k in knoblib.public("job")}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise UserError(
            f"config has {', '.join(unknown)}: not a knob read on the nodes (`python -m "
            "ftslurm.knobs --markdown` lists them); export other variables in the submitting "
            "shell: Slurm passes the environment on to the job"
        )
    return given


def _lighthouse_address(lighthouse: Any, env: Mapping[str, str]) -> str:
    if lighthouse is None:
        return knoblib.load(env).TORCHFT_LIGHTHOUSE
    address = getattr(lighthouse, "address", lighthouse)
    problem = (
        planlib.lighthouse_address_problem(address) if isinstance(address, str) else "not text"
    )
    if problem:
        raise UserError(
            f"lighthouse={lighthouse!r}: {problem}; give the address replicas use "
            "(http://HOST:PORT) or what ftslurm.lighthouse.start() returned"
        )
    return address


def partition_time_limit(partition: str | None) -> int:
    """The partition's time limit in minutes (0 = none): a replica should run as long as the
    partition allows. submitit always writes --time (default 5 min), so we pass this one."""
    limits, default = client.current().partition_limits()
    key = partition or default
    if key not in limits:
        raise UserError(
            f"partition {key!r} not found (sinfo lists {', '.join(sorted(limits)) or 'none'})"
        )
    return limits[key]


def executor_parameters(
    device: str, gpus_per_node: int, nodes: int = 1, requeue: bool = True, **slurm_options: Any
) -> dict[str, Any]:
    """submitit Slurm parameters for one replica (or the classic job's `nodes`) on `device`.

    Mirrors the scripts' #SBATCH lines (and `ftslurm submit`'s DEVICE=cpu overrides):
    GPU: one task per node with all its GPUs, 128 CPUs, the node exclusive with all its
    memory (unless the caller sizes memory: mem_gb, mem_per_cpu, ...);
    CPU: no GPUs, 1 CPU (what `sbatch_device_options('cpu')` asks for).
    `slurm_options` (submitit names: partition, timeout_min, mem_gb, account, qos, ...)
    win; `slurm_additional_parameters` / `slurm_setup` are accepted with or without the
    `slurm_` prefix. `--requeue` is added for FT replicas (requeue=True): it is what
    requeues a replica whose node went DOWN.
    """
    params: dict[str, Any] = {
        "nodes": nodes,
        "ntasks_per_node": 1,
        "use_srun": False,
        "stderr_to_stdout": True,
    }
    if device == "cpu":
        node = CPU_NODE
        params.update(gpus_per_node=node.gpus_per_task, cpus_per_task=node.cpus_per_task)
    else:  # the GPUs the plan uses (GPUS_PER_NODE), the node's CPUs, the node to itself
        node = GPU_NODE
        params.update(gpus_per_node=gpus_per_node, cpus_per_task=node.cpus_per_task,
                      exclusive=node.exclusive)  # fmt: skip
    extra = {}
    for key, value in slurm_options.items():
        name = key.removeprefix("slurm_")
        if name == "additional_parameters":
            extra.update(value or {})
        else:
            params[name] = value
    sized = _MEMORY_OPTIONS & {k.replace("-", "_") for k in [*params, *extra]}
    if node.mem_gb is not None and not sized:
        # --exclusive gives every CPU and GPU but only the memory asked for (sbatch(1)):
        # mem_gb=0 (--mem=0GB) asks for all of it, as the scripts' `#SBATCH --mem=0`
        params["mem_gb"] = node.mem_gb
    params["additional_parameters"] = {**extra, "requeue": True} if requeue else extra
    return params


def _executor(folder: Path, params: dict[str, Any]):
    try:
        import submitit
    except ImportError:
        raise UserError("the Python API needs submitit: pip install 'ftslurm[api]'") from None
    if shutil.which("srun") is None or shutil.which("sbatch") is None:
        raise UserError(
            "`srun`/`sbatch` not found: submit from a Slurm login node, or start the local "
            "cluster with `sudo ftslurm cluster up`"
        )
    folder.mkdir(parents=True, exist_ok=True)
    # python: submitit's default, sys.executable (its array path ignores any other anyway)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    try:
        # AutoExecutor's names (timeout_min, mem_gb, tasks_per_node) -> sbatch's (time, mem, ...)
        ex.update_parameters(**ex._convert_parameters(params))
    except ValueError as e:
        first = str(e).splitlines()[0]
        raise UserError(f"{first} (see submitit.SlurmExecutor parameters)") from None
    return ex


def _submit(ex: Any, task: ReplicaTask, count: int) -> list[Any]:
    """submitit's pickles and sbatch file, submitted by ftslurm's submit service (the job's
    environment, the time-limit margin, sbatch through the Slurm client) instead of by
    submitit: `count` callables (one array task each when more than one) -> their jobs.

    The file `exec`s submitit's runner, as the FT script `exec`s the launcher: Slurm's
    `--signal=B:USR1@<s>` goes to the batch shell only, and the launcher must be it to take
    the final checkpoint."""
    import uuid

    from submitit.core import utils
    from submitit.slurm.slurm import SlurmJob, _make_sbatch_string

    from ftslurm.runner import CommandError

    folder = utils.JobPaths.get_first_id_independent_folder(ex.folder)
    folder.mkdir(parents=True, exist_ok=True)
    pickles = []
    for args in [(i,) for i in range(count)] if count > 1 else [()]:
        delayed = utils.DelayedSubmission(task, *args)
        delayed.set_timeout(ex.parameters.get("time", 5), ex.max_num_timeout)
        pickles.append(folder / f"{uuid.uuid4().hex}.pkl")
        delayed.dump(pickles[-1])
    params = {**ex.parameters, **({"map_count": count} if count > 1 else {})}
    script = folder / f".submission_file_{uuid.uuid4().hex}.sh"
    script.write_text(_make_sbatch_string(command=f"exec {ex._submitit_command_str}",
                                          folder=ex.folder, **params))  # fmt: skip
    request = submission.SubmitRequest(str(script), device_options=(), outputs=Path(task.outputs),
                                       slurm_output_dir=None)  # fmt: skip
    try:
        job_id = submission.submit(request).job_id
    except CommandError as e:
        last = (e.stderr.strip().splitlines() or [e.one_line()])[-1]
        raise UserError(f"sbatch refused the job: {last}") from None
    tasks = list(range(ex._num_tasks()))
    SlurmJob(folder=ex.folder, job_id=str(job_id), tasks=tasks).paths.move_temporary_file(
        script, "submission_file", keep_as_symlink=True)  # fmt: skip
    ids = [f"{job_id}_{i}" for i in range(count)] if count > 1 else [str(job_id)]
    jobs = [SlurmJob(folder=ex.folder, job_id=jid, tasks=tasks) for jid in ids]
    for job, pickle in zip(jobs, pickles, strict=True):
        job.paths.move_temporary_file(pickle, "submitted_pickle")
    return jobs


def _nproc(plan: planlib.Plan) -> int:
    """Ranks per node = GPUs per node the plan uses (GPUS_PER_NODE): torchrun's
    --nproc_per_node; a plan without torchrun (one rank run by the launcher itself,
    FTSLURM_SKIP_TORCHRUN, or the tiny worker) has one."""
    given = planlib.flag_values(plan.argv, "--nproc_per_node")
    return int(given[-1]) if given else 1


def _launch(task: ReplicaTask, plan: planlib.Plan, nodes: int, count: int,
            slurm_options: dict[str, Any]) -> list[Any]:  # fmt: skip
    """Submit `count` copies of `task` as the preflight `plan` sized them; the submitit jobs.
    FT replicas (`kind` job) get `--requeue`, the classic job does not."""
    task.knobs["DEVICE"] = plan.device  # the node's resources and the launcher agree
    ft = task.kind == "job"
    slurm_options.setdefault("job_name", FT_JOB_NAME if ft else CLASSIC_JOB_NAME)
    if "timeout_min" not in slurm_options and "time" not in slurm_options:
        slurm_options["time"] = partition_time_limit(slurm_options.get("partition"))
    params = executor_parameters(plan.device, _nproc(plan), nodes, ft, **slurm_options)
    if ft:  # the FT script's time-limit signal, unless the caller gave a --signal
        margin = knoblib.load({**os.environ, **task.knobs})[knoblib.TIME_LIMIT_SIGNAL]
        params["additional_parameters"].setdefault(
            "signal", submission.time_limit_signal_spec(margin))  # fmt: skip
    return _submit(_executor(Path(task.outputs) / SUBMITIT_DIRNAME, params), task, count)


def submit_ft_array(
    replicas: int = 2,
    config: str | Mapping[str, str] | None = None,
    lighthouse: Any = None,
    *,
    outputs: str | Path | None = None,
    spares: int = 0,
    **slurm_options: Any,
) -> FTArray:
    """Submit `replicas` FT replicas as one requeueable Slurm job array through submitit.

    config: a preset name (`llama3_8b_ft`, `llama3_8b_diloco`, `debug_cpu`) or a mapping of
    the launcher's env knobs (`{"DEVICE": "cpu", "STEPS": "100", "FT_MODE": "diloco"}`; see
    ftslurm/knobs.py); secrets are refused (export them instead).
    lighthouse: `http://host:port`, or the `LighthouseInfo` that `ftslurm.lighthouse.start`
    returned; default $TORCHFT_LIGHTHOUSE, else http://login-0:29510.
    outputs: the outputs folder (default `ftslurm.paths.outputs_dir()`, on the shared FS).
    spares: warm spares (FT_SPARES): the array gets `replicas + spares` tasks; the last
    `spares` wait warm and take the slot of a replica that leaves (ftslurm/replica/slots.py).
    slurm_options: submitit's Slurm parameters (partition, timeout_min, account, qos,
    mem_gb, slurm_additional_parameters, slurm_setup, ...).

    The knobs are checked here (a bad DEVICE or preset is a UserError before anything is
    submitted). Returns once sbatch accepted the array.
    """
    _count("replicas", replicas)
    if not isinstance(spares, int) or isinstance(spares, bool) or spares < 0:
        raise UserError(f"spares={spares!r}: give a whole number >= 0")
    out = Path(outputs).resolve() if outputs else paths.outputs_dir()
    knobs = _knobs(config)
    if spares:
        knobs["FT_SPARES"] = str(spares)
    elif (given := knoblib.load(knobs)).is_set("FT_SPARES"):  # the array grows by as many tasks
        spares = given.FT_SPARES
    knobs["TORCHFT_LIGHTHOUSE"] = _lighthouse_address(lighthouse, {**os.environ, **knobs})
    knobs["FTSLURM_OUTPUTS"] = str(out)
    task = ReplicaTask("job", knobs, str(out))
    plan = planlib.preflight_ft(task.env(os.environ), paths.project_root(), replicas)  # as a node
    jobs = _launch(task, plan, 1, replicas + spares, slurm_options)
    array_id = int(str(jobs[0].job_id).split("_", 1)[0])
    handles = []
    for i, j in enumerate(jobs):
        jid = str(j.job_id)
        env = ({"SLURM_ARRAY_JOB_ID": str(array_id), "SLURM_ARRAY_TASK_ID": str(i)}
               if "_" in jid else {"FTSLURM_RUN_ID": jid, "FTSLURM_REPLICA_ID": "0"})  # fmt: skip
        handles.append(ReplicaHandle(jid, i, _log_path("job", out, env), j))
    return FTArray(array_id, handles, logvocab.run_dir(array_id, out),
                   knobs["TORCHFT_LIGHTHOUSE"], out / SUBMITIT_DIRNAME, spares)  # fmt: skip


def submit_classic(
    nodes: int = 2,
    config: str | Mapping[str, str] | None = None,
    *,
    outputs: str | Path | None = None,
    **slurm_options: Any,
) -> ReplicaHandle:
    """Submit the classic (non-FT) job on `nodes` nodes through submitit: the same launcher
    as `llama3.1-8b-pretraining.sh` (`ftslurm.replica.launcher.job.main(["classic"], env)`), which
    `srun`s one torchrun per node; its output goes to `<outputs>/classic-<job>.out`.

    No `--requeue` (as in the script): any node failure ends the torchrun group; that is the
    baseline the FT array improves on. Returns a `ReplicaHandle` (kind "classic", replica 0).
    """
    _count("nodes", nodes)
    out = Path(outputs).resolve() if outputs else paths.outputs_dir()
    knobs = _knobs(config)
    knobs["FTSLURM_OUTPUTS"] = str(out)
    plan = planlib.preflight_classic({**os.environ, **knobs}, paths.project_root(), nodes)
    (job,) = _launch(ReplicaTask("classic", knobs, str(out)), plan, nodes, 1, slurm_options)
    jid = str(job.job_id)
    return ReplicaHandle(jid, 0, _log_path("classic", out, {"SLURM_JOB_ID": jid}), job,
                         kind="classic")  # fmt: skip
