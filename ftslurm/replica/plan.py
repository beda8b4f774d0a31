"""Pure planning: environment knobs -> the exact command one replica (or one classic job) runs.

No I/O, no torch, no subprocesses: everything here is a function of the env mapping it is
given (plus the project root and the node's hostname / head node passed in), so the sbatch
scripts can be checked with a dry run and the argv can be tested against golden lists.

The knobs (environment variables), their types, defaults and ranges are in one registry,
ftslurm/knobs.py (`python -m ftslurm.knobs --markdown` prints them). The public functions take
the env (or its `knobs.Settings`) and load it once; the helpers take the `Settings`, whose
`check` refuses a bad value before anything is built. Slurm's own variables (not knobs) are
read from `settings.env`, the same snapshot.
"""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import knobs, logvocab, stacks
from ftslurm.errors import UserError
from ftslurm.knobs import Settings

Env = Mapping[str, str] | Settings  # what the public functions take: loaded once at their top

TRAIN_MODULE = "ftslurm.replica.worker.train"
CONFIG_DIR = Path("slurm") / "configs"


@dataclass(frozen=True)
class Preset:
    """A TOML config plus the defaults that go with it (STEPS and the others that depend on
    the device come from the knob registry)."""

    toml: str
    device: str
    ft_mode: str | None  # None: a classic (non-FT) preset
    # "torchtitan": torchrun + the training module; "tiny": tiny.py, one process, no torchrun
    worker: str = "torchtitan"


PRESETS: dict[str, Preset] = {  # the names are FTSLURM_PRESET's choices in ftslurm/knobs.py
    "llama3_8b_ft": Preset("llama3_8b_ft.toml", "cuda", "per-step"),
    "llama3_8b_diloco": Preset("llama3_8b_diloco.toml", "cuda", "diloco"),
    "debug_cpu": Preset("debug_cpu.toml", "cpu", "diloco"),
    "llama3_8b": Preset("llama3_8b.toml", "cuda", None),
    # a real torchft Manager and gloo process group around a tiny model: 64 replicas on 2 cores
    "tiny": Preset("", "cpu", "per-step", worker="tiny"),
}
TINY_MODULE = "ftslurm.replica.worker.tiny"


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
    ft_mode: str | None
    max_requeues: int
    # the launcher's settings this plan was built from (loaded once, knobs.load): what the
    # launcher reads of the knobs for this plan's attempts; `env` is the child's output
    settings: Settings = field(compare=False, repr=False)
    array_job_id: str | None = None
    # the rate cap: at most `max_fails` failures within `fail_window_s` (FT_MAX_FAILS,
    # FT_FAIL_WINDOW_MIN); the lifetime cap `max_requeues` only when FT_MAX_REQUEUES is set
    max_fails: int = 5
    fail_window_s: float = 1800.0
    lifetime_cap: bool = False
    notes: list[str] = field(default_factory=list)
    # torchrun is the launcher's own child (no srun in between), so its workers can check that
    # the launcher is still their ancestor; with srun they run on other nodes, where it is not
    torchrun_is_child: bool = True
    # a run with warm spares (FT_SPARES, slots.py): the array task, whether it waits as a spare
    # (replica_id is then a placeholder until it claims a slot), its slot claim's epoch
    task: int | None = None
    spare: bool = False
    slot_epoch: int | None = None

    def command_line(self) -> str:
        """The command as one copy-pasteable shell line (env additions first)."""
        return shlex.join(self.argv)

    def describe(self) -> str:
        """Dry-run text: the env the command gets and the command itself, secrets never shown."""
        lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines.append(self.command_line())
        return "\n".join(lines + [f"# {n}" for n in self.notes])


NO_MODEL_CHECKPOINTS_NOTE = (
    "model checkpoints are off (--checkpoint.no-enable): a failed replica heals from a live "
    "peer, but if every replica fails at once, training starts again from initial weights at "
    "step 1, and Slurm's time limit ends the run without a final checkpoint"
)


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Values of torchtitan's `flag` in the forms its parser (tyro) takes: `--a.b_c=V`,
    `--a.b_c V`, and the same with `-` for `_` (`--a.b-c=V`)."""
    want = "--" + flag[2:].replace("-", "_")
    out = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if not name.startswith("--") or "--" + name[2:].replace("-", "_") != want:
            continue
        if eq:
            out.append(value)
        elif i + 1 < len(argv):
            out.append(argv[i + 1])
    return out


def model_checkpoints_on(tt_args: list[str], default: bool = True) -> bool:
    """Whether torchtitan will save model checkpoints: every preset TOML says `enable = true`
    (`default`), and torchtitan's flags `--checkpoint.enable` / `--checkpoint.no-enable` (the
    last one wins) are the way to change it."""
    on = default
    for arg in tt_args:
        if arg == "--checkpoint.enable":
            on = True
        elif arg in ("--checkpoint.no-enable", "--checkpoint.no_enable"):
            on = False
    return on


def _first_int(s: Settings, names: Sequence[str], default: int | None, what: str) -> int:
    """The first of `names` set (the launcher's own knob, then the Slurm variable that says
    the same), read by the rules of the knob `names[0]` if it is one; else `default`."""
    rules = knobs.KNOBS.get(names[0])
    for name in names:
        if name in knobs.KNOBS:
            if s.is_set(name):
                return s[name]
        elif knobs.is_set(s.env, name):
            return rules.parse(s.env[name], name) if rules else knobs.to_int(name, s.env[name])
    if default is None:
        raise UserError(
            f"{what} is unknown: run inside a Slurm job array or set {' / '.join(names)}"
        )
    return default


def resolve_preset(env: Env, classic: bool = False) -> tuple[str, Preset, str]:
    """Pick the preset and the device; DEVICE=cpu alone means the debug_cpu preset."""
    s = knobs.load(env)
    device = s.DEVICE if s.is_set("DEVICE") else None
    name = s.FTSLURM_PRESET
    if not name:
        name = "debug_cpu" if device == "cpu" else ("llama3_8b" if classic else "llama3_8b_ft")
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


def _extra_args(s: Settings) -> list[str]:
    try:
        return shlex.split(s.FTSLURM_EXTRA_ARGS or "")
    except ValueError as e:  # "No closing quotation", "No escaped character"
        raise UserError(
            f"FTSLURM_EXTRA_ARGS={s.raw('FTSLURM_EXTRA_ARGS')!r} does not parse ({e}): quote "
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


def _outputs(s: Settings, root: Path) -> Path:
    return Path(s.FTSLURM_OUTPUTS or root / "outputs")


def outputs_folder(env: Env, root: Path) -> Path:
    """The outputs folder the job writes into (FTSLURM_OUTPUTS, else `<root>/outputs`)."""
    return _outputs(knobs.load(env), root)


def _dump(s: Settings, default: Path) -> str:
    return s.FTSLURM_DUMP_FOLDER or str(default)


def local_assets(root: Path) -> tuple[Path, Path]:
    """(tokenizer dir, dataset dir) that `ftslurm assets make-local` builds."""
    base = root / "assets" / "local"
    return base / "tokenizer", base / "dataset"


def hf_assets(root: Path) -> Path:
    """Where `ftslurm assets download` puts the Llama-3.1-8B tokenizer."""
    return root / "assets" / "hf" / "Llama-3.1-8B"


def config_args(root: Path, preset: Preset, stack: stacks.Stack) -> list[str]:
    """How torchtitan is told the preset: its TOML (0.2), or ftslurm's config function of the
    same name (0.3: `--module`, `--config`; worker/titan03/config_registry.py)."""
    if stack.config == "module":
        return ["--module", stacks.CONFIG_MODULE, "--config", Path(preset.toml).stem]
    return [f"--job.config_file={root / CONFIG_DIR / preset.toml}"]


def _common_tt_args(s: Settings, root: Path, preset: Preset, device: str, dump: str,
                    stack: stacks.Stack) -> list[str]:  # fmt: skip
    args = [*config_args(root, preset, stack), f"{stack.dump_flag}={dump}"]
    if device == "cpu":
        tok, data = local_assets(root)
        args += [f"{stack.assets_flag}={tok}", f"{stack.dataset_path_flag}={data}"]
    else:
        args.append(f"{stack.assets_flag}={hf_assets(root)}")
    args.append(f"--training.steps={s.get('STEPS', device)}")
    if folder := s.CHECKPOINT_FOLDER:
        args.append(f"--checkpoint.folder={folder}")
    return args


def _gpus(s: Settings, device: str, classic: bool = False) -> int:
    """Ranks per node. On CPU an FT replica may have several (FSDP over gloo: fix 10 in
    fixes.py makes its reduce-scatter a SUM); the classic CPU job runs one rank per node,
    the nodes replicating (DDP) as its GPU baseline's nodes do."""
    gpus = s.get("GPUS_PER_NODE", device)
    if classic and device == "cpu" and gpus != 1:
        raise UserError(
            "the classic script on DEVICE=cpu runs one rank per node (the nodes replicate); "
            "unset GPUS_PER_NODE or set GPUS_PER_NODE=1"
        )
    return gpus


def _cpu_env(s: Settings) -> dict[str, str]:
    return {
        "OMP_NUM_THREADS": s.env.get("OMP_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def _torchrun(s: Settings, torchrun: Sequence[str], nnodes: int, gpus: int,
              endpoint: str, rdzv_id: str, tt_args: list[str]) -> list[str]:  # fmt: skip
    """torchrun (`torchrun`, else FTSLURM_TORCHRUN, else the one on PATH) running the training
    module on `gpus` ranks of each of `nnodes` nodes, rendezvous at `endpoint`."""
    return [*(torchrun or [s.FTSLURM_TORCHRUN or "torchrun"]),
            f"--nnodes={nnodes}", f"--nproc_per_node={gpus}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}", f"--rdzv_id={rdzv_id}", "-m", TRAIN_MODULE,
            *tt_args]  # fmt: skip


def _tiny(s: Settings, device: str, pg: str, ft_mode: str) -> list[str]:
    """The tiny worker's command: the interpreter the script execs (FTSLURM_PYTHON), one
    process per replica, no torchrun (it would add a second interpreter that imports torch)."""
    if pg != "gloo" or ft_mode != "per-step":
        raise UserError(
            f"FTSLURM_PRESET=tiny runs per-step FT over gloo, not FT_MODE={ft_mode} / "
            f"PROCESS_GROUP={pg}; unset FT_MODE and PROCESS_GROUP"
        )
    python = s.FTSLURM_PYTHON or "python3"
    return [python, "-m", TINY_MODULE, f"--steps={s.get('STEPS', device)}"]


def run_folder(env: Env, root: Path) -> Path:
    """`<outputs>/torchft/tft-<job>`: the run's folder (logs, slot claims), as the script
    names it."""
    s = knobs.load(env)
    return logvocab.run_dir(_run_id(s, "SLURM_ARRAY_JOB_ID"), _outputs(s, root))


def _run_id(s: Settings, slurm: str) -> str:
    """The run's id: Slurm's job id (`slurm` names which), else FTSLURM_RUN_ID."""
    return s.env.get(slurm) or s.FTSLURM_RUN_ID


def slot_layout(env: Env) -> tuple[int, int, int] | None:
    """(array task, group size N, spares S) of a run with warm spares (FT_SPARES > 0), else
    None: `--array=0-<N-1+S>` trains N replicas; the group size is the array's size minus S."""
    s = knobs.load(env)
    s.check()
    spares = s.FT_SPARES
    if not spares:
        return None
    task = _first_int(s, ["FTSLURM_TASK", "SLURM_ARRAY_TASK_ID"], None, "array task")
    if s.is_set("FTSLURM_GROUP_SIZE"):  # SkyPilot: nodes - spares, said by the YAML
        group = s.FTSLURM_GROUP_SIZE
        total = group + spares
    else:
        total = _first_int(s, ["SLURM_ARRAY_TASK_COUNT"], None, "array size")
        group = total - spares
    if group < 1:
        raise UserError(
            f"FT_SPARES={spares} leaves no replica to train in an array of {total} task(s): "
            f"submit with --array=0-<N-1+{spares}> (N replicas plus {spares} spares)"
        )
    return task, group, spares


SLOT_ENV = ("FTSLURM_SLOTS_DIR", "FTSLURM_TASK", "FTSLURM_SPARE", "FTSLURM_SLOT_EPOCH")


# The environment torchrun 2.x gives its one worker with `--nnodes=1 --nproc_per_node=1
# --rdzv_endpoint=localhost:0` (printed from a real worker), minus what the worker sets
# itself: MASTER_PORT (the port of the store it hosts, train.py) and TORCHELASTIC_ERROR_FILE
# (only torchrun reads that file back). torchtitan reads RANK, LOCAL_RANK, WORLD_SIZE; torchft
# MASTER_ADDR/PORT, RANK, WORLD_SIZE; torch.distributed TORCHELASTIC_USE_AGENT_STORE (connect
# to the store as a client, as to torchrun's) and TORCHELASTIC_RUN_ID / RESTART_COUNT.
ONE_RANK_ENV = {
    "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
    "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "ROLE_RANK": "0",
    "ROLE_WORLD_SIZE": "1", "MASTER_ADDR": "localhost", "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}  # fmt: skip
# train.py: host the rendezvous store torchrun's agent would, and export its port
WORKER_STORE_ENV = "FTSLURM_WORKER_STORE"


def _one_rank(s: Settings, python: Sequence[str], rdzv_id: str,
              tt_args: list[str]) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The training module run by the launcher itself, without torchrun: the argv and the
    env torchrun would have given its single worker (`-u`: unbuffered, as torchrun runs it)."""
    argv = [*(python or [s.FTSLURM_PYTHON or "python3"]), "-u", "-m",
            TRAIN_MODULE, *tt_args]  # fmt: skip
    return argv, {**ONE_RANK_ENV, "TORCHELASTIC_RUN_ID": rdzv_id, WORKER_STORE_ENV: "1"}


def build_ft_plan(
    env: Env, root: Path, torchrun: Sequence[str] = (), python: Sequence[str] = (),
    stack: stacks.Stack | None = None,
) -> Plan:
    """The command one fault-tolerant replica runs: torchrun on this node only, with torchft
    joining the replicas through the Lighthouse (no cross-node rendezvous). One rank per node
    and FTSLURM_SKIP_TORCHRUN (default on): the training module under `python` (default
    FTSLURM_PYTHON, else python3) with torchrun's environment: one interpreter start and
    torchrun's rendezvous less per (re)start (1.4 s on CPU: docs/benchmarks-cpu.md).
    `stack`: the torchtitan stack whose flags the command uses (default: the installed one)."""
    s = knobs.load(env)
    s.check()
    stack = stack or stacks.installed()
    name, preset, device = resolve_preset(s)
    replica_id = _first_int(s, ["FTSLURM_REPLICA_ID", "SLURM_ARRAY_TASK_ID"], None, "replica id")
    group_size = _first_int(s, ["FTSLURM_GROUP_SIZE", "SLURM_ARRAY_TASK_COUNT"], None,
                            "group size")  # fmt: skip
    if not 0 <= replica_id < group_size:
        raise UserError(
            f"replica id {replica_id} is outside 0..{group_size - 1}; "
            "submit with --array=0-<N-1> or fix FTSLURM_REPLICA_ID / FTSLURM_GROUP_SIZE"
        )
    attempt = _first_int(s, ["FTSLURM_ATTEMPT", "SLURM_RESTART_COUNT"], 0, "attempt")
    gpus = _gpus(s, device)
    run_id = _run_id(s, "SLURM_ARRAY_JOB_ID")
    dump = _dump(s, logvocab.run_dir(run_id, _outputs(s, root)))
    ft_mode = s.FT_MODE or preset.ft_mode or "per-step"
    pg = s.get("PROCESS_GROUP", device)

    tt = _common_tt_args(s, root, preset, device, dump, stack)
    tt += [
        # HSDP: FSDP inside the node, torchft across nodes
        f"--parallelism.data_parallel_shard_degree={gpus}",
        "--fault_tolerance.enable",
        f"--fault_tolerance.replica_id={replica_id}",
        f"--fault_tolerance.group_size={group_size}",
        f"--fault_tolerance.process_group={pg}",
    ]
    if s.is_set("FT_MODE") and ft_mode != preset.ft_mode:
        tt.append(
            "--fault_tolerance.semi_sync_method=" + ("diloco" if ft_mode == "diloco" else "None")
        )
    if ft_mode == "diloco":
        if (sync := s.SYNC_STEPS) is not None:
            tt.append(f"--fault_tolerance.sync_steps={sync}")
        if (n := s.NUM_FRAGMENTS) is not None:
            tt.append(f"--fault_tolerance.num_fragments={n}")
    if (timeout_s := s.PG_TIMEOUT_S) is not None:
        tt.append(f"--fault_tolerance.process_group_timeout_ms={timeout_s * 1000}")
    heal_timeout = s.FTSLURM_HEAL_TIMEOUT_S
    notes = []
    if s.is_set("WANDB_API_KEY"):
        if replica_id == 0:
            tt.append("--metrics.enable_wandb")
        else:
            notes.append("W&B logs on replica 0 only")
    tt += _extra_args(s)
    if not model_checkpoints_on(tt):
        notes.append(NO_MODEL_CHECKPOINTS_NOTE)

    lighthouse = s.TORCHFT_LIGHTHOUSE
    problem = lighthouse_address_problem(lighthouse)
    if problem:
        raise UserError(
            f"TORCHFT_LIGHTHOUSE={lighthouse!r}: {problem}; export the line `ftslurm "
            "lighthouse start` prints"
        )
    task = s.FTSLURM_TASK if s.is_set("FTSLURM_TASK") else None
    spare = bool(s.FTSLURM_SPARE)
    rdzv_id = f"tft_{run_id}_{replica_id}" if task is None else f"tft_{run_id}_task{task}"
    child_env: dict[str, str] = {}
    if preset.worker == "tiny":
        if task is not None:
            raise UserError("FTSLURM_PRESET=tiny has no warm spares (they wait inside "
                            "torchtitan's trainer): unset FT_SPARES")  # fmt: skip
        if gpus != 1:
            raise UserError(f"FTSLURM_PRESET=tiny runs one process per replica, not "
                            f"GPUS_PER_NODE={gpus}: unset GPUS_PER_NODE")  # fmt: skip
        argv = _tiny(s, device, pg, ft_mode)
        notes = ["FTSLURM_PRESET=tiny: no torchtitan, torchrun or TOML; STEPS, "
                 "TORCHFT_LIGHTHOUSE and the checksum knobs apply"]  # fmt: skip
    elif gpus == 1 and s.FTSLURM_SKIP_TORCHRUN:
        argv, child_env = _one_rank(s, python, rdzv_id, tt)
    else:
        argv = _torchrun(s, torchrun, 1, gpus, "localhost:0", rdzv_id, tt)
    child_env |= {
        "TORCHFT_LIGHTHOUSE": lighthouse,
        "TORCHFT_QUORUM_RETRIES": str(s.TORCHFT_QUORUM_RETRIES),
        "FTSLURM_DEVICE": device,
        "FTSLURM_FT_MODE": ft_mode,
        "FTSLURM_REPLICA_ID": str(replica_id),
        "FTSLURM_GROUP_SIZE": str(group_size),
        "FTSLURM_ATTEMPT": str(attempt),
        "FTSLURM_HEAL_TIMEOUT_S": str(heal_timeout),
    }
    child_env.update({k: s.raw(k) for k in SLOT_ENV if s.is_set(k)})
    if device == "cpu":
        child_env.update(_cpu_env(s))
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
        ft_mode=ft_mode,
        max_requeues=s.FT_MAX_REQUEUES,
        settings=s,
        array_job_id=s.env.get("SLURM_ARRAY_JOB_ID"),
        max_fails=s.FT_MAX_FAILS,
        fail_window_s=60.0 * s.FT_FAIL_WINDOW_MIN,
        lifetime_cap=s.is_set("FT_MAX_REQUEUES"),
        notes=notes,
        task=task,
        spare=spare,
        slot_epoch=s.FTSLURM_SLOT_EPOCH if not spare else None,
    )


def preflight_ft(env: Env, root: Path, group_size: int = 1) -> Plan:
    """The plan replica 0 of a `group_size` array would build, before submitting: every knob
    checked on the login node as each node's launcher will (`ftslurm submit`, the API)."""
    probe = {**knobs.load(env).env, "FTSLURM_REPLICA_ID": "0",
             "FTSLURM_GROUP_SIZE": str(group_size)}  # fmt: skip
    return build_ft_plan(probe, root)


def preflight_classic(env: Env, root: Path, nodes: int = 1) -> Plan:
    """The classic job's plan before submitting (see preflight_ft)."""
    return build_classic_plan({**knobs.load(env).env, "SLURM_NNODES": str(nodes)}, root, "head")


def _srun_cpus(env: Mapping[str, str]) -> list[str]:
    """The job's --cpus-per-task, passed on to srun by hand: since Slurm 22.05 srun no longer
    inherits it from sbatch (SLURM_CPUS_PER_TASK is ignored), so a step would get one CPU per
    task and torchrun's 8 ranks and their data loaders would share it. Nothing when the job
    did not ask (srun's default is then the job's own)."""
    cpus = env.get("SLURM_CPUS_PER_TASK", "").strip()
    return [f"--cpus-per-task={cpus}"] if cpus.isdigit() and int(cpus) > 0 else []


def build_classic_plan(env: Env, root: Path, head_node: str, torchrun: Sequence[str] = (),
                       stack: stacks.Stack | None = None) -> Plan:  # fmt: skip
    """The classic (non-FT) job: `srun` one torchrun per node, rendezvous on the head node.

    Any node failure kills the whole job; that is the baseline the FT script improves on.
    With FTSLURM_SINGLE_NODE=1 the same torchrun command runs on this machine only (no srun,
    rendezvous on localhost), so a one-machine benchmark runs the very launcher path.
    """
    s = knobs.load(env)
    s.check()
    stack = stack or stacks.installed()
    name, preset, device = resolve_preset(s, classic=True)
    local = s.FTSLURM_SINGLE_NODE  # this machine alone, without srun
    nnodes = (
        1
        if local
        else _first_int(s, ["SLURM_NNODES", "SLURM_JOB_NUM_NODES"], None, "number of nodes")
    )
    gpus = _gpus(s, device, classic=True)
    run_id = _run_id(s, "SLURM_JOB_ID")
    dump = _dump(s, _outputs(s, root) / f"classic-{run_id}")
    port = s.RDZV_PORT
    tt = _common_tt_args(s, root, preset, device, dump, stack)
    if device == "cpu":
        # One gloo rank per node: FSDP across nodes would need PREMUL_SUM (not in gloo), so
        # the nodes replicate (DDP) instead, and FT stays off as in the GPU baseline.
        tt += [
            f"--parallelism.data_parallel_replicate_degree={nnodes}",
            "--parallelism.data_parallel_shard_degree=1",
            "--fault_tolerance.no-enable",
        ]
    tt += _extra_args(s)
    if s.is_set("WANDB_API_KEY"):
        tt.append("--metrics.enable_wandb")
    srun = [
        "srun",
        f"--nodes={nnodes}",
        f"--ntasks={nnodes}",
        "--ntasks-per-node=1",
        *_srun_cpus(s.env),
        "--kill-on-bad-exit=1",
    ]
    endpoint = "localhost:0" if local else f"{head_node}:{port}"
    argv = [*([] if local else srun),
            *_torchrun(s, torchrun, nnodes, gpus, endpoint, f"classic_{run_id}", tt)]
    child_env = {"FTSLURM_DEVICE": device}
    if device == "cpu":
        child_env.update(_cpu_env(s))
    return Plan(
        kind="classic",
        argv=argv,
        torchrun_is_child=local,
        env=_no_secrets(child_env),
        preset=name,
        device=device,
        replica_id=0,
        group_size=1,
        attempt=_first_int(s, ["SLURM_RESTART_COUNT"], 0, "attempt"),
        run_id=run_id,
        ft_mode=None,
        max_requeues=0,
        settings=s,
    )


def _no_secrets(env: dict[str, str]) -> dict[str, str]:
    """`env` without the knobs that must never be printed, whatever happens."""
    return {k: v for k, v in env.items() if k not in knobs.SECRETS}


def requeue_target(plan: Plan) -> str | None:
    """`<array job>_<task>` for `scontrol requeue`, or None outside a Slurm job array."""
    task = plan.settings.env.get("SLURM_ARRAY_TASK_ID")
    if not plan.array_job_id or task is None:
        return None
    return f"{plan.array_job_id}_{task}"


def recent_failures(times: Sequence[float], now: float, window_s: float) -> int:
    """How many of the failure `times` (epoch seconds) fall within `window_s` before `now`."""
    return sum(1 for t in times if now - window_s <= t <= now + 1.0)


def should_requeue(
    plan: Plan, returncode: int, cancelled: bool, refused: str | None = None,
    failures: Sequence[float] = (), now: float | None = None,
) -> tuple[bool, str]:
    """Decide whether a finished attempt brings itself back, and say why (for the log).
    `refused`: torchtitan refused its options (config_error.py), so every attempt would too.
    `failures`: when this replica failed (epoch seconds, this failure included; the
    launcher's history survives requeues): the rate cap stops a crash loop (FT_MAX_FAILS
    within FT_FAIL_WINDOW_MIN) and lets a long run's rare failures come back however many
    there were; FT_MAX_REQUEUES caps the lifetime count only when it is set. The reason
    names the rule that stopped the replica."""
    if returncode == 0:
        return False, "training finished"
    if cancelled:
        return False, "stopped by a signal from Slurm or the user; Slurm decides what is next"
    if refused:
        return False, "torchtitan refused its options: every attempt would fail the same way"
    if plan.lifetime_cap and plan.attempt >= plan.max_requeues:
        return False, (
            f"lifetime rule: attempt {plan.attempt} reached FT_MAX_REQUEUES={plan.max_requeues} "
            "(set explicitly); raise or unset FT_MAX_REQUEUES to allow more restarts"
        )
    minutes = f"{plan.fail_window_s / 60:g}"
    at = now if now is not None else (failures[-1] if failures else 0.0)
    recent = recent_failures(failures, at, plan.fail_window_s)
    if recent >= plan.max_fails:
        return False, (
            f"rate rule: {recent} failures within FT_FAIL_WINDOW_MIN={minutes} minutes reached "
            f"FT_MAX_FAILS={plan.max_fails} (a crash loop); fix the cause and resubmit, or "
            "raise FT_MAX_FAILS"
        )
    code = returncode if returncode >= 0 else 128 - returncode
    if not failures:
        return True, f"training exited with code {code}"
    return True, (f"training exited with code {code} (failure {recent} of FT_MAX_FAILS="
                  f"{plan.max_fails} within {minutes} minutes)")  # fmt: skip
