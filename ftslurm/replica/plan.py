"""Pure planning: environment knobs -> the exact command one replica (or one classic job) runs.

No I/O, no torch, no subprocesses: everything here is a function of the env mapping it is
given (plus the project root and the node's hostname / head node passed in), so the sbatch
scripts can be checked with a dry run and the argv can be tested against golden lists.

Knobs (environment variables; defaults in brackets):

    FTSLURM_PRESET          llama3_8b_ft | llama3_8b_diloco | debug_cpu | llama3_8b (classic)
                            [llama3_8b_ft for FT jobs, llama3_8b for classic; debug_cpu on cpu]
    DEVICE                  cuda | cpu [cuda; cpu implies the debug_cpu preset]
    STEPS                   training steps [1000 on cuda, 200 on cpu]
    GPUS_PER_NODE           ranks per node = dp_shard degree inside the node [8 on cuda, 1 on cpu]
    PROCESS_GROUP           torchft's cross-replica process group [nccl on cuda, gloo on cpu]
    FT_MODE                 per-step | diloco [from the preset: 8B ft = per-step, others diloco]
    SYNC_STEPS              DiLoCo inner steps between outer syncs [from the TOML]
    NUM_FRAGMENTS           DiLoCo model fragments [from the TOML]
    PG_TIMEOUT_S            cross-replica process-group timeout in seconds, 1..86400 [TOML]
    CHECKPOINT_FOLDER       torchtitan checkpoint folder [<dump folder>/checkpoint]
    TORCHFT_LIGHTHOUSE      Lighthouse address [http://login-0:29510]
    TORCHFT_QUORUM_RETRIES  quorum retries before a replica crashes, so replicas survive a
                            Lighthouse restart [3]
    FT_MAX_REQUEUES         self-requeues after a crash (counted by SLURM_RESTART_COUNT) [5]
    WANDB_API_KEY           W&B logging on replica 0 only when set (never printed)
    FTSLURM_REPLICA_ID / SLURM_ARRAY_TASK_ID       replica index
    FTSLURM_GROUP_SIZE / SLURM_ARRAY_TASK_COUNT    number of replicas
    FTSLURM_ATTEMPT / SLURM_RESTART_COUNT          attempt number [0]
    FTSLURM_RUN_ID / SLURM_ARRAY_JOB_ID            names the run folder tft-<id> [local]
    FTSLURM_DUMP_FOLDER     torchtitan dump folder [<outputs>/torchft/tft-<run id>]
    FTSLURM_OUTPUTS         outputs folder [<project>/outputs]
    FTSLURM_EXTRA_ARGS      extra torchtitan arguments, shell-quoted, appended last
    FTSLURM_TORCHRUN        torchrun executable [torchrun]
    RDZV_PORT               classic mode: c10d rendezvous port on the head node [29500]
    FTSLURM_SINGLE_NODE=1   classic mode on this machine only: no srun, no head node lookup,
                            one torchrun with its rendezvous on localhost (bench/gpu_overhead.py
                            runs the classic baseline this way on a machine without Slurm)
    FTSLURM_DRY_RUN=1       print banner, env and command; run nothing
    FTSLURM_CHECKSUM_EVERY  parameter checksum every N committed steps [1 on cpu, 50 on
                            cuda; 0 = off] (checksum.py)
    FTSLURM_CHECKSUM_ASYNC  hash on a background thread from a host copy [1 on cuda, 0 on cpu];
                            on cuda the copy is one pinned buffer of the rank's shard,
                            page-locked at the first step (11.2 GB: ~8 s once on an H100)
    FTSLURM_FIX_ASYNC_QUORUM / FTSLURM_FIX_OPTIMIZER_STATE / FTSLURM_FIX_UNSHARDED_ALLREDUCE /
    FTSLURM_FIX_HEAL_TIMEOUT / FTSLURM_FIX_FT_CHECKPOINT_RETENTION
                            =0 turns a fix off (fixes.py) [all on]
    FTSLURM_HEAL_TIMEOUT_S  how long a survivor waits for a healing peer's checkpoint download,
                            in seconds, 1..86400 [600; torchft's own is 60] (fixes.py)
"""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm.errors import UserError
from ftslurm.logvocab import banner  # noqa: F401 (moved: the log vocabulary writes and reads it)

DEFAULT_LIGHTHOUSE = "http://login-0:29510"
DEFAULT_QUORUM_RETRIES = 3
DEFAULT_MAX_REQUEUES = 5
DEFAULT_RDZV_PORT = 29500
HEAL_TIMEOUT_VAR = "FTSLURM_HEAL_TIMEOUT_S"
DEFAULT_HEAL_TIMEOUT_S = 600  # an 8B heal (~12 GB per rank) at 25 Gbit/s per node: ~30 s
TRAIN_MODULE = "ftslurm.replica.train"
CONFIG_DIR = Path("slurm") / "configs"
FT_MODES = ("per-step", "diloco")

# Env names that must never be printed, whatever happens.
SECRET_ENV = ("WANDB_API_KEY", "HF_TOKEN")


@dataclass(frozen=True)
class Preset:
    """A TOML config plus the defaults that go with it."""

    toml: str
    device: str
    ft_mode: str | None  # None: a classic (non-FT) preset
    steps: int


PRESETS: dict[str, Preset] = {
    "llama3_8b_ft": Preset("llama3_8b_ft.toml", "cuda", "per-step", 1000),
    "llama3_8b_diloco": Preset("llama3_8b_diloco.toml", "cuda", "diloco", 1000),
    "debug_cpu": Preset("debug_cpu.toml", "cpu", "diloco", 200),
    "llama3_8b": Preset("llama3_8b.toml", "cuda", None, 1000),
}


@dataclass(frozen=True)
class Plan:
    """What one launcher invocation runs: argv, the env it adds, and facts for the banner."""

    kind: str  # "ft" or "classic"
    argv: list[str]
    env: dict[str, str]
    preset: str
    device: str
    replica_id: int
    group_size: int
    attempt: int
    run_id: str
    dump_folder: str
    ft_mode: str | None
    max_requeues: int
    array_job_id: str | None = None
    notes: list[str] = field(default_factory=list)
    # torchrun is the launcher's own child (no srun in between), so its workers can check that
    # the launcher is still their ancestor; with srun they run on other nodes, where it is not
    torchrun_is_child: bool = True

    def command_line(self) -> str:
        """The command as one copy-pasteable shell line (env additions first)."""
        return shlex.join(self.argv)

    def describe(self) -> str:
        """Dry-run text: the env the command gets and the command itself, secrets never shown."""
        lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines.append(self.command_line())
        return "\n".join(lines + [f"# {n}" for n in self.notes])


NO_MODEL_CHECKPOINTS_NOTE = (
    "model checkpoints are off (every preset): a failed replica heals from a live peer, but if "
    "every replica fails at once, training starts again from initial weights at step 1 while "
    "each replica's data goes on where it stopped; FTSLURM_EXTRA_ARGS='--checkpoint.enable' "
    "saves one every checkpoint.interval steps"
)


def model_checkpoints_on(tt_args: list[str]) -> bool:
    """Whether torchtitan will save model checkpoints: every preset TOML says `enable =
    false`, and torchtitan's flags `--checkpoint.enable` / `--checkpoint.no-enable` (the last
    one wins) are the way to change it."""
    on = False
    for arg in tt_args:
        if arg == "--checkpoint.enable":
            on = True
        elif arg in ("--checkpoint.no-enable", "--checkpoint.no_enable"):
            on = False
    return on


MAX_PG_TIMEOUT_S = 86400
PORT_RANGE = "is not a port (1 to 65535)"


def _seconds(env: Mapping[str, str], name: str, default: int, example: int) -> int:
    """A timeout knob in seconds, 1 s to a day: a typo (ms for s) would let a hung peer stall
    a replica for days."""
    too_long = (f"is more than a day ({MAX_PG_TIMEOUT_S} s); it is in seconds "
                f"(e.g. {name}={example})")  # fmt: skip
    return _int(env, [name], default, name, 1, (MAX_PG_TIMEOUT_S, too_long))


def _int(
    env: Mapping[str, str],
    names: Sequence[str],
    default: int | None,
    what: str,
    minimum: int | None = None,
    maximum: tuple[int, str] | None = None,
) -> int:
    """The first of `names` set in `env` as an int, else `default`. `maximum`: (bound, what
    the error says of a larger value), e.g. (65535, PORT_RANGE)."""
    for name in names:
        raw = env.get(name, "").strip()
        if raw:
            try:
                value = int(raw)
            except ValueError:
                raise UserError(
                    f"{name}={raw!r} is not an integer; set {what} as a whole number"
                ) from None
            if minimum is not None and value < minimum:
                raise UserError(f"{name}={value} must be at least {minimum}")
            if maximum is not None and value > maximum[0]:
                raise UserError(f"{name}={value} {maximum[1]}")
            return value
    if default is None:
        raise UserError(
            f"{what} is unknown: run inside a Slurm job array or set {' / '.join(names)}"
        )
    return default


def resolve_preset(env: Mapping[str, str], classic: bool = False) -> tuple[str, Preset, str]:
    """Pick the preset and the device; DEVICE=cpu alone means the debug_cpu preset."""
    device = env.get("DEVICE", "").strip().lower()
    name = env.get("FTSLURM_PRESET", "").strip()
    if device and device not in ("cuda", "cpu"):
        raise UserError(f"DEVICE={device!r} is not supported; use DEVICE=cuda or DEVICE=cpu")
    if not name:
        name = "debug_cpu" if device == "cpu" else ("llama3_8b" if classic else "llama3_8b_ft")
    if name not in PRESETS:
        raise UserError(
            f"FTSLURM_PRESET={name!r} is unknown; use one of {', '.join(sorted(PRESETS))}"
        )
    preset = PRESETS[name]
    device = device or preset.device
    if device != preset.device:
        raise UserError(
            f"preset {name} is for DEVICE={preset.device}, not DEVICE={device}; "
            f"unset FTSLURM_PRESET (DEVICE=cpu picks debug_cpu) or pick a {device} preset"
        )
    if classic and preset.ft_mode is not None and preset.device == "cuda":
        raise UserError(
            f"preset {name} is for the torchft script (llama3.1-8b-pretraining-torchft.sh); "
            "the classic script runs llama3_8b (unset FTSLURM_PRESET)"
        )
    if not classic and preset.ft_mode is None:
        raise UserError(
            f"preset {name} is for the classic script; use llama3_8b_ft or "
            "llama3_8b_diloco with the torchft script"
        )
    return name, preset, device


def _extra_args(env: Mapping[str, str]) -> list[str]:
    try:
        return shlex.split(env.get("FTSLURM_EXTRA_ARGS", ""))
    except ValueError as e:  # "No closing quotation", "No escaped character"
        raise UserError(
            f"FTSLURM_EXTRA_ARGS={env['FTSLURM_EXTRA_ARGS']!r} does not parse ({e}): quote "
            "it as for a shell, e.g. FTSLURM_EXTRA_ARGS='--training.steps=50'"
        ) from None


def lighthouse_address_problem(address: str) -> str | None:
    """What is wrong with the shape of a Lighthouse address (replicas would fail on it after
    the queue wait), or None. Shared by the launcher, `ftslurm doctor` and the API."""
    try:
        u = urllib.parse.urlsplit(address)
        port = u.port
    except ValueError as e:  # "Port could not be cast to integer value as 'x'"
        return f"not an address ({e})"
    if u.scheme not in ("http", "https") or not u.hostname:
        return "not an address: it needs the form http://<host>:<port>"
    if port is None:
        return "no port: it needs the form http://<host>:<port>"
    if port == 0:
        return "port 0 is not a port to connect to: use the one the Lighthouse listens on"
    return None


def _run_id(env: Mapping[str, str]) -> str:
    return env.get("SLURM_ARRAY_JOB_ID") or env.get("FTSLURM_RUN_ID") or "local"


def _outputs(env: Mapping[str, str], root: Path) -> Path:
    return Path(env["FTSLURM_OUTPUTS"]) if env.get("FTSLURM_OUTPUTS") else root / "outputs"


def local_assets(root: Path) -> tuple[Path, Path]:
    """(tokenizer dir, dataset dir) that `ftslurm assets make-local` builds."""
    base = root / "assets" / "local"
    return base / "tokenizer", base / "dataset"


def hf_assets(root: Path) -> Path:
    """Where `ftslurm assets download` puts the Llama-3.1-8B tokenizer."""
    return root / "assets" / "hf" / "Llama-3.1-8B"


def _common_tt_args(
    env: Mapping[str, str], root: Path, preset: Preset, device: str, dump: str
) -> list[str]:
    args = [
        f"--job.config_file={root / CONFIG_DIR / preset.toml}",
        f"--job.dump_folder={dump}",
    ]
    if device == "cpu":
        tok, data = local_assets(root)
        args += [f"--model.hf_assets_path={tok}", f"--training.dataset_path={data}"]
    else:
        args.append(f"--model.hf_assets_path={hf_assets(root)}")
    args.append(f"--training.steps={_int(env, ['STEPS'], preset.steps, 'STEPS', 1)}")
    if env.get("CHECKPOINT_FOLDER"):
        args.append(f"--checkpoint.folder={env['CHECKPOINT_FOLDER']}")
    return args


def _gpus(env: Mapping[str, str], device: str) -> int:
    gpus = _int(env, ["GPUS_PER_NODE"], 8 if device == "cuda" else 1, "GPUS_PER_NODE")
    if gpus < 1:
        raise UserError(f"GPUS_PER_NODE={gpus} must be at least 1")
    if device == "cpu" and gpus != 1:
        raise UserError(
            "DEVICE=cpu runs one rank per replica (FSDP's reduce-scatter needs PREMUL_SUM, "
            "which gloo lacks); unset GPUS_PER_NODE or set GPUS_PER_NODE=1"
        )
    return gpus


def _cpu_env(env: Mapping[str, str]) -> dict[str, str]:
    return {
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def build_ft_plan(env: Mapping[str, str], root: Path, torchrun: Sequence[str] = ()) -> Plan:
    """The command one fault-tolerant replica runs: torchrun on this node only, with torchft
    joining the replicas through the Lighthouse (no cross-node rendezvous)."""
    name, preset, device = resolve_preset(env)
    replica_id = _int(env, ["FTSLURM_REPLICA_ID", "SLURM_ARRAY_TASK_ID"], None, "replica id")
    group_size = _int(env, ["FTSLURM_GROUP_SIZE", "SLURM_ARRAY_TASK_COUNT"], None, "group size")
    if not 0 <= replica_id < group_size:
        raise UserError(
            f"replica id {replica_id} is outside 0..{group_size - 1}; "
            "submit with --array=0-<N-1> or fix FTSLURM_REPLICA_ID / FTSLURM_GROUP_SIZE"
        )
    attempt = _int(env, ["FTSLURM_ATTEMPT", "SLURM_RESTART_COUNT"], 0, "attempt", 0)
    gpus = _gpus(env, device)
    run_id = _run_id(env)
    dump = env.get("FTSLURM_DUMP_FOLDER") or str(_outputs(env, root) / "torchft" / f"tft-{run_id}")

    ft_mode = (env.get("FT_MODE") or preset.ft_mode or "per-step").strip().lower()
    if ft_mode not in FT_MODES:
        raise UserError(f"FT_MODE={ft_mode!r} is unknown; use FT_MODE=per-step or FT_MODE=diloco")
    pg = (env.get("PROCESS_GROUP") or ("nccl" if device == "cuda" else "gloo")).strip().lower()
    if pg not in ("nccl", "gloo"):
        raise UserError(f"PROCESS_GROUP={pg!r} is unknown; use nccl (GPU) or gloo (CPU)")

    tt = _common_tt_args(env, root, preset, device, dump)
    tt += [
        # HSDP: FSDP inside the node, torchft across nodes
        f"--parallelism.data_parallel_shard_degree={gpus}",
        "--fault_tolerance.enable",
        f"--fault_tolerance.replica_id={replica_id}",
        f"--fault_tolerance.group_size={group_size}",
        f"--fault_tolerance.process_group={pg}",
    ]
    if env.get("FT_MODE") and ft_mode != preset.ft_mode:
        tt.append(
            "--fault_tolerance.semi_sync_method=" + ("diloco" if ft_mode == "diloco" else "None")
        )
    if ft_mode == "diloco":
        if env.get("SYNC_STEPS", "").strip():
            sync = _int(env, ["SYNC_STEPS"], 0, "SYNC_STEPS", 1)
            tt.append(f"--fault_tolerance.sync_steps={sync}")
        if env.get("NUM_FRAGMENTS", "").strip():
            n = _int(env, ["NUM_FRAGMENTS"], 1, "NUM_FRAGMENTS", 1)
            tt.append(f"--fault_tolerance.num_fragments={n}")
    if env.get("PG_TIMEOUT_S", "").strip():
        ms = _seconds(env, "PG_TIMEOUT_S", 0, 120) * 1000
        tt.append(f"--fault_tolerance.process_group_timeout_ms={ms}")
    heal_timeout = _seconds(env, HEAL_TIMEOUT_VAR, DEFAULT_HEAL_TIMEOUT_S, 900)
    notes = []
    if env.get("WANDB_API_KEY"):
        if replica_id == 0:
            tt.append("--metrics.enable_wandb")
        else:
            notes.append("W&B logs on replica 0 only")
    tt += _extra_args(env)
    if not model_checkpoints_on(tt):
        notes.append(NO_MODEL_CHECKPOINTS_NOTE)

    lighthouse = env.get("TORCHFT_LIGHTHOUSE") or DEFAULT_LIGHTHOUSE
    problem = lighthouse_address_problem(lighthouse)
    if problem:
        raise UserError(
            f"TORCHFT_LIGHTHOUSE={lighthouse!r}: {problem}; export the line `ftslurm "
            "lighthouse start` prints"
        )
    argv = list(torchrun or [env.get("FTSLURM_TORCHRUN") or "torchrun"])
    argv += [
        "--nnodes=1",
        f"--nproc_per_node={gpus}",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0",
        f"--rdzv_id=tft_{run_id}_{replica_id}",
        "-m",
        TRAIN_MODULE,
        *tt,
    ]
    child_env = {
        "TORCHFT_LIGHTHOUSE": lighthouse,
        "TORCHFT_QUORUM_RETRIES": env.get("TORCHFT_QUORUM_RETRIES") or str(DEFAULT_QUORUM_RETRIES),
        "FTSLURM_DEVICE": device,
        "FTSLURM_FT_MODE": ft_mode,
        "FTSLURM_REPLICA_ID": str(replica_id),
        "FTSLURM_GROUP_SIZE": str(group_size),
        "FTSLURM_ATTEMPT": str(attempt),
        HEAL_TIMEOUT_VAR: str(heal_timeout),
    }
    if device == "cpu":
        child_env.update(_cpu_env(env))
    return Plan(
        kind="ft",
        argv=argv,
        env=_no_secrets(child_env),
        preset=name,
        device=device,
        replica_id=replica_id,
        group_size=group_size,
        attempt=attempt,
        run_id=run_id,
        dump_folder=dump,
        ft_mode=ft_mode,
        max_requeues=_int(env, ["FT_MAX_REQUEUES"], DEFAULT_MAX_REQUEUES, "FT_MAX_REQUEUES", 0),
        array_job_id=env.get("SLURM_ARRAY_JOB_ID"),
        notes=notes,
    )


def single_node(env: Mapping[str, str]) -> bool:
    """FTSLURM_SINGLE_NODE=1: the classic job runs on this machine alone, without srun."""
    return env.get("FTSLURM_SINGLE_NODE", "").strip().lower() in ("1", "true", "yes", "on")


def preflight_ft(env: Mapping[str, str], root: Path, group_size: int = 1) -> Plan:
    """The plan replica 0 of a `group_size` array would build, before submitting: every knob
    checked on the login node as each node's launcher will (`ftslurm submit`, the API)."""
    probe = {**env, "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": str(group_size)}
    return build_ft_plan(probe, root)


def preflight_classic(env: Mapping[str, str], root: Path, nodes: int = 1) -> Plan:
    """The classic job's plan before submitting (see preflight_ft)."""
    return build_classic_plan({**env, "SLURM_NNODES": str(nodes)}, root, "head")


def _srun_cpus(env: Mapping[str, str]) -> list[str]:
    """The job's --cpus-per-task, passed on to srun by hand: since Slurm 22.05 srun no longer
    inherits it from sbatch (SLURM_CPUS_PER_TASK is ignored), so a step would get one CPU per
    task and torchrun's 8 ranks and their data loaders would share it. Nothing when the job
    did not ask (srun's default is then the job's own)."""
    cpus = env.get("SLURM_CPUS_PER_TASK", "").strip()
    return [f"--cpus-per-task={cpus}"] if cpus.isdigit() and int(cpus) > 0 else []


def build_classic_plan(
    env: Mapping[str, str], root: Path, head_node: str, torchrun: Sequence[str] = ()
) -> Plan:
    """The classic (non-FT) job: `srun` one torchrun per node, rendezvous on the head node.

    Any node failure kills the whole job; that is the baseline the FT script improves on.
    With FTSLURM_SINGLE_NODE=1 the same torchrun command runs on this machine only (no srun,
    rendezvous on localhost), so a one-machine benchmark runs the very launcher path.
    """
    name, preset, device = resolve_preset(env, classic=True)
    local = single_node(env)
    nnodes = (
        1 if local else _int(env, ["SLURM_NNODES", "SLURM_JOB_NUM_NODES"], None, "number of nodes")
    )
    gpus = _gpus(env, device)
    run_id = env.get("SLURM_JOB_ID") or env.get("FTSLURM_RUN_ID") or "local"
    dump = env.get("FTSLURM_DUMP_FOLDER") or str(_outputs(env, root) / f"classic-{run_id}")
    port = _int(env, ["RDZV_PORT"], DEFAULT_RDZV_PORT, "RDZV_PORT", 1, (65535, PORT_RANGE))
    tt = _common_tt_args(env, root, preset, device, dump)
    if device == "cpu":
        # One gloo rank per node: FSDP across nodes would need PREMUL_SUM (not in gloo), so
        # the nodes replicate (DDP) instead, and FT stays off as in the GPU baseline.
        tt += [
            f"--parallelism.data_parallel_replicate_degree={nnodes}",
            "--parallelism.data_parallel_shard_degree=1",
            "--fault_tolerance.no-enable",
        ]
    tt += _extra_args(env)
    if env.get("WANDB_API_KEY"):
        tt.append("--metrics.enable_wandb")
    srun = [
        "srun",
        f"--nodes={nnodes}",
        f"--ntasks={nnodes}",
        "--ntasks-per-node=1",
        *_srun_cpus(env),
        "--kill-on-bad-exit=1",
    ]
    argv = [
        *([] if local else srun),
        *(torchrun or [env.get("FTSLURM_TORCHRUN") or "torchrun"]),
        f"--nnodes={nnodes}",
        f"--nproc_per_node={gpus}",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0" if local else f"--rdzv_endpoint={head_node}:{port}",
        f"--rdzv_id=classic_{run_id}",
        "-m",
        TRAIN_MODULE,
        *tt,
    ]
    child_env = {"FTSLURM_DEVICE": device}
    if device == "cpu":
        child_env.update(_cpu_env(env))
    return Plan(
        kind="classic",
        argv=argv,
        torchrun_is_child=local,
        env=_no_secrets(child_env),
        preset=name,
        device=device,
        replica_id=0,
        group_size=1,
        attempt=_int(env, ["SLURM_RESTART_COUNT"], 0, "attempt"),
        run_id=run_id,
        dump_folder=dump,
        ft_mode=None,
        max_requeues=0,
    )


def _no_secrets(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in SECRET_ENV}


def sbatch_device_options(device: str) -> list[str]:
    """sbatch options that turn the scripts' GPU #SBATCH lines into a CPU-node request.

    The scripts carry the GPU settings (--gpus-per-task=8 --cpus-per-task=128 --exclusive) so a
    plain `sbatch` works on GPU nodes; on a CPU cluster (CPUs=1 per node, no GRES) these
    command-line options override them (command line beats #SBATCH), and DEVICE=cpu reaches
    the job. Verified with Slurm 22.05: `--gpus-per-task=0` is accepted without a gpu GRES.
    """
    if device == "cpu":
        return ["--gpus-per-task=0", "--cpus-per-task=1", "--export=ALL,DEVICE=cpu"]
    return []


def requeue_target(plan: Plan, env: Mapping[str, str]) -> str | None:
    """`<array job>_<task>` for `scontrol requeue`, or None outside a Slurm job array."""
    task = env.get("SLURM_ARRAY_TASK_ID")
    if not plan.array_job_id or task is None:
        return None
    return f"{plan.array_job_id}_{task}"


def should_requeue(
    plan: Plan, returncode: int, cancelled: bool, refused: str | None = None
) -> tuple[bool, str]:
    """Decide whether a finished attempt brings itself back, and say why (for the log).
    `refused`: torchtitan refused its options (config_error.py), so every attempt would too."""
    if returncode == 0:
        return False, "training finished"
    if cancelled:
        return False, "stopped by a signal from Slurm or the user; Slurm decides what is next"
    if refused:
        return False, "torchtitan refused its options: every attempt would fail the same way"
    if plan.attempt >= plan.max_requeues:
        return False, (
            f"attempt {plan.attempt} reached FT_MAX_REQUEUES={plan.max_requeues}; "
            "raise FT_MAX_REQUEUES to allow more restarts"
        )
    code = returncode if returncode >= 0 else 128 - returncode
    return True, f"training exited with code {code}"
