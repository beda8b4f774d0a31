"""Every environment variable ftslurm reads (its "knobs"), in one typed registry.

Why one registry: knobs listed by hand in several places (plan.py, `ftslurm submit`, the
tests, both sbatch scripts, the README) drift apart, and booleans parsed in several ways
disagree (one parser would leave `FTSLURM_CHECKSUM_ASYNC=off` on). So every read goes
through `get` (one parser per type; a bad value is a `UserError` naming the knob); `check`,
which the launcher's plan calls, makes `ftslurm submit`, the Python API and the launcher
refuse a bad value in one line before the queue wait, not on every rank after it; and the
knob tables of the scripts and of docs/settings.md are rendered from here (`--write`;
tests/test_knobs.py fails when they drift).

Read once: `load(env)` parses every knob set in `env` into a frozen `Settings` (a bad value
is kept and raised, in the same one line, where the knob is read, so a command that never reads
it does not fail on it); `environ()` is this process's, parsed again only when os.environ
changes. Modules take a `Settings`, not `env`, past their public boundary.

Imports nothing heavy (the standard library and ftslurm.errors): the launcher, the training
worker, the CLI and ftslurm.paths (which reads its folders here) all read it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

from ftslurm.errors import UserError

Kind = Literal["int", "float", "bool", "choice", "str", "path"]
KINDS = get_args(Kind)
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
DAY_S = 86400
# the sbatch scripts whose headers list their knobs (rendered here); ftslurm.paths names them
# from here, as paths reads its folders through this registry
FT_SCRIPT = "llama3.1-8b-pretraining-torchft.sh"
CLASSIC_SCRIPT = "llama3.1-8b-pretraining.sh"
SCRIPTS = {"ft": FT_SCRIPT, "classic": CLASSIC_SCRIPT}
FT, CLASSIC, BOTH = ("ft",), ("classic",), ("ft", "classic")


MAX_REPLICAS = 10_000  # replicas (and spares) of one run: more is a typo, not a cluster
MAX_MS = DAY_S * 1000  # a duration in milliseconds: at most a day, as for seconds
# torchft's Manager heartbeats the Lighthouse every 100 ms (Manager(heartbeat_interval=
# timedelta(milliseconds=100)) in torchft/manager.py; ftslurm keeps that default). A heartbeat
# timeout under two intervals drops a live replica between two heartbeats: the floor of
# `ftslurm lighthouse start --heartbeat-timeout-ms` (lighthouse.config.check_heartbeat_timeout)
TORCHFT_HEARTBEAT_INTERVAL_MS = 100
HEARTBEAT_TIMEOUT_FLOOR_MS = 2 * TORCHFT_HEARTBEAT_INTERVAL_MS
INT64 = 2**63 - 1  # the largest value any knob is passed on as (Rust's and C's int64)
# the FT job's warning before the time limit, seconds (sbatch --signal=B:USR1@<s>, whose
# sig_time Slurm takes from 0 to 65535)
TIME_LIMIT_SIGNAL = "FTSLURM_TIME_LIMIT_SIGNAL_S"
SIGNAL_MAX_S = 65535
# ASCII decimal only: int() also takes "١٢٣" (Arabic-Indic digits), "٢", "1_0" and " +5 "
_INT = re.compile(r"[+-]?[0-9]{1,4000}")  # int() refuses over 4300 digits


def to_int(
    name: str, raw: str, minimum: int | None = None, maximum: int | None = None, too_big: str = ""
) -> int:
    """`raw` (the value of variable `name`) as an int within the bounds; the one int parser.
    Plain ASCII decimal digits only (no "٣", no "1_0"); without a `maximum` at most INT64, so
    no value passed on overflows a 64-bit reader. `too_big`: what the error says of a value
    above `maximum` (default: the bound)."""
    text = raw.strip()
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}... ({len(raw)} characters)"
    if not _INT.fullmatch(text):
        raise UserError(
            f"{name}={shown} is not an integer: expected a whole number"
            f"{_range_text(minimum, maximum)}"
        ) from None
    value = int(text)
    if minimum is not None and value < minimum:
        raise UserError(f"{name}={value if len(text) <= 40 else shown} must be at least {minimum}")
    high = INT64 if maximum is None else maximum
    if value > high:
        raise UserError(f"{name}={value if len(text) <= 40 else shown} "
                        f"{too_big or f'must be at most {high}'}")  # fmt: skip
    if value < -INT64:
        raise UserError(f"{name}={shown} must be at least {-INT64}")
    return value


def to_float(name: str, raw: str, minimum: float | None = None) -> float:
    """`raw` as a finite float >= `minimum`."""
    try:
        value = float(raw.strip())
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise UserError(f"{name}={raw!r} is not a number: expected one{_range_text(minimum)}")
    if minimum is not None and value < minimum:
        raise UserError(f"{name}={value:g} must be at least {minimum:g}")
    return value


def to_bool(name: str, raw: str) -> bool:
    """The one boolean parser: 1/0, true/false, yes/no, on/off, in any case."""
    word = raw.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise UserError(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def to_choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    """`raw` as one of `choices` (compared in lower case)."""
    word = raw.strip().lower()
    if word not in choices:
        use = [f"{name}={c}" for c in choices]
        alternatives = " or ".join([", ".join(use[:-1]), use[-1]] if len(use) > 1 else use)
        raise UserError(f"{name}={raw!r} is not supported; use {alternatives}")
    return word


def _range_text(minimum: float | None, maximum: float | None = None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    return f" <= {maximum}" if maximum is not None else ""


@dataclass(frozen=True)
class Knob:
    """One environment variable: its type, default, allowed values and what it does.

    `default` is the value on `DEVICE=cuda` (None: unset, or computed: `default_doc` says
    how); `cpu_default`, when not None, the value on `DEVICE=cpu`. `where`: "job" (read on
    the nodes by the launcher or the training worker: passed to the job and checked before
    submitting), "cli" (read by the `ftslurm` commands). `public=False`: a channel between
    ftslurm's own processes (set by the launcher, Slurm or `ftslurm lighthouse start`),
    listed here but not in the docs' tables and not checked before submitting."""

    name: str
    kind: Kind
    doc: str
    default: Any = None
    cpu_default: Any = None
    default_doc: str = ""
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    too_big: str = ""
    where: Literal["job", "cli"] = "job"
    scripts: tuple[str, ...] = BOTH
    public: bool = True
    secret: bool = False

    def parse(self, raw: str, name: str | None = None) -> Any:
        """`raw` (not blank) as this knob's type; errors name `name` (default: the knob's; a
        Slurm variable read by the same rules passes its own)."""
        name = name or self.name
        if self.kind == "int":
            return to_int(name, raw, self.minimum, self.maximum, self.too_big)
        if self.kind == "float":
            return to_float(name, raw, self.minimum)
        if self.kind == "bool":
            return to_bool(name, raw)
        if self.kind == "choice":
            return to_choice(name, raw, self.choices)
        return raw

    def default_for(self, device: str | None) -> Any:
        if self.cpu_default is None:
            return self.default
        if device is None:
            raise ValueError(f"{self.name}'s default depends on the device: pass it")
        return self.cpu_default if device == "cpu" else self.default


def _seconds(name: str, doc: str, example: int, **kw: Any) -> Knob:
    """A timeout in seconds, 1 s to a day: a typo (ms for s) would let a hung peer stall a
    replica for days."""
    too_big = f"is more than a day ({DAY_S} s); it is in seconds (e.g. {name}={example})"
    return Knob(name, "int", doc, minimum=1, maximum=DAY_S, too_big=too_big, **kw)


def _fix(name: str, n: int, what: str) -> Knob:
    return Knob(name, "bool", f"fix {n} (fixes.py): {what}; 0: upstream's way", True,
                scripts=FT)  # fmt: skip


PRESETS = ("llama3_8b_ft", "llama3_8b_diloco", "debug_cpu", "llama3_8b", "tiny")  # plan.PRESETS
HEAL_TRANSPORTS = ("http", "http-chunked", "pg")  # transport.OPTIONS

KNOBS: dict[str, Knob] = {k.name: k for k in (
    # ---- read on the nodes (launcher, training worker) --------------------------------------
    Knob("DEVICE", "choice", "`cpu`: the debug model on CPU nodes", "cuda",
         choices=("cuda", "cpu"), default_doc="`cuda` (`cpu` with `FTSLURM_PRESET=debug_cpu`)"),
    Knob("FTSLURM_PRESET", "choice", "TOML and defaults",
         choices=PRESETS,
         default_doc="`llama3_8b_ft` (classic: `llama3_8b`; `DEVICE=cpu`: `debug_cpu`)"),
    Knob("STEPS", "int", "training steps", 1000, 200, minimum=1),
    Knob("GPUS_PER_NODE", "int", "ranks per node = FSDP degree in the node; 1 on cpu", 8, 1,
         minimum=1),
    Knob("PROCESS_GROUP", "choice", "torchft's cross-replica process group", "nccl", "gloo",
         choices=("nccl", "gloo"), scripts=FT),
    Knob("FT_MODE", "choice", "`per-step`: HSDP, a cross-replica all-reduce every step",
         choices=("per-step", "diloco"), scripts=FT,
         default_doc="from the preset"),
    Knob("SYNC_STEPS", "int", "DiLoCo: inner steps between outer syncs", minimum=1,
         default_doc="from the TOML", scripts=FT),
    Knob("NUM_FRAGMENTS", "int", "DiLoCo: model fragments, synced in turn", minimum=1,
         default_doc="from the TOML", scripts=FT),
    _seconds("PG_TIMEOUT_S", "cross-replica process-group timeout, seconds", 120,
             default_doc="from the TOML", scripts=FT),
    Knob("CHECKPOINT_FOLDER", "path", "torchtitan's checkpoint folder",
         default_doc="`<dump folder>/checkpoint`"),
    Knob(TIME_LIMIT_SIGNAL, "int", "seconds before Slurm's time limit at which the FT job gets "
         "USR1: each replica finishes its step, saves a final checkpoint and requeues; "
         "`ftslurm submit` (`--time-limit-signal`) passes it as `--signal=B:USR1@<s>` (with a "
         "bare `sbatch`, pass that yourself), the launcher logs it; it must cover a step and "
         "the save, and Slurm may signal up to 60 s early", 300, minimum=1,
         maximum=SIGNAL_MAX_S, too_big=f"is more than Slurm takes ({SIGNAL_MAX_S} s)",
         default_doc="`300` (the FT script's `#SBATCH --signal=B:USR1@300`)", scripts=FT),
    Knob("TORCHFT_LIGHTHOUSE", "str", "the address `ftslurm lighthouse start` prints",
         "http://login-0:29510", scripts=FT),
    Knob("TORCHFT_QUORUM_RETRIES", "int", "quorum retries: replicas outlive a Lighthouse "
         "restart", 3, minimum=0, scripts=FT),
    Knob("FT_MAX_REQUEUES", "int", "a lifetime cap on self-requeues (per "
         "`SLURM_RESTART_COUNT`), applied only when set: a multi-day run loses no replica to "
         "a failure a day; the rate cap `FT_MAX_FAILS` bounds a crash loop", 5, minimum=0,
         default_doc="unset: no lifetime cap", scripts=FT),
    Knob("FT_MAX_FAILS", "int", "a replica stops requeueing itself after this many failures "
         "within `FT_FAIL_WINDOW_MIN` (on any node): a crash loop fails every few minutes, a "
         "healthy replica far less than once an hour", 5, minimum=1, maximum=1000,
         scripts=FT),
    Knob("FT_FAIL_WINDOW_MIN", "int", "the window of `FT_MAX_FAILS` and `FT_NODE_MAX_FAILS`, "
         "minutes: 30 holds 5 restarts of an 8B replica (load, heal) with room to spare",
         30, minimum=1, maximum=DAY_S // 60, scripts=FT),
    Knob("FT_MAX_RESTARTS", "int", "a failed replica whose node is fine (still allocated, not "
         "down or drained) restarts its training in place, in the same allocation, up to this "
         "many times per allocation before it requeues through Slurm: no requeue hold, no "
         "new allocation (a kill on CPU: full strength in 4.55 s, 11.34 s through the "
         "requeue); 3 bounds the failed starts on a node no check caught before Slurm places "
         "the replica again; `FT_MAX_FAILS` and `FT_NODE_MAX_FAILS` still apply; 0: always "
         "requeue", 3, minimum=0, maximum=1000, scripts=FT),
    Knob("FT_WARM_RESTART", "bool", "once a replica trains, the run that would restart it in "
         "place is started ahead and waits warm (imports done, before torchft's Manager), so "
         "a restart in place skips torchrun and the imports (warm_restart.py); costs one idle "
         "copy of the replica's processes per node (on a GPU a CUDA context per rank: off "
         "there until measured)", False, cpu_default=True, scripts=FT),
    Knob("FT_NODE_MAX_FAILS", "int", "a node on which this array's replicas failed this often "
         "within `FT_FAIL_WINDOW_MIN`, over twice as often as on any other node, is drained "
         "(or avoided); 2: one failure is retried in place, a second moves the replica; "
         "below `FT_MAX_FAILS`, so a moved replica still has tries left; 0: never for failures",
         2, minimum=0, maximum=1000, scripts=FT),
    Knob("FTSLURM_BAD_NODES", "choice", "what a bad node (failed pre-flight check, "
         "`FT_NODE_MAX_FAILS`) gets: `drain` (`scontrol update State=DRAIN`; where Slurm "
         "refuses, `avoid`), `avoid` (the task's `ExcNodeList`), `off` (nothing)", "drain",
         choices=("drain", "avoid", "off"), scripts=FT),
    Knob("FTSLURM_PREFLIGHT", "bool", "the launcher checks the node before training "
         "(preflight.py: GPU count, `nvidia-smi`, ECC / row remaps, an allocation per GPU)",
         True, scripts=FT),
    Knob("FTSLURM_PREFLIGHT_FAIL", "str", "names a pre-flight check that fails on purpose "
         "(tests, drills): `cpu` on CPU nodes, or any check's name; `<check>@<node>` on that "
         "node only", default_doc="unset", scripts=FT),
    Knob("FTSLURM_LOG_FILTER", "bool", "torchft's quorum lines, repeated every step, are "
         "folded in the replica logs and the managed Lighthouse's (logfilter.py): the member "
         "list whole when the quorum changes, one short line otherwise (`ftslurm lighthouse "
         "start` reads it too); 0: every line as torchft writes it", True, scripts=FT),
    Knob("FT_SPARES", "int", "warm spares: of `--array=0-<N-1+S>`, the last S tasks wait "
         "warm and take a failed replica's slot", 0, minimum=0, maximum=MAX_REPLICAS,
         scripts=FT),
    _seconds("FTSLURM_SPARE_GRACE_S", "a spare takes a slot whose holder has not "
             "heartbeated this long after claiming it", 300, default=300, scripts=FT),
    Knob("WANDB_API_KEY", "str", "W&B logging (FT: from replica 0 only); never printed",
         default_doc="unset", secret=True),
    Knob("RDZV_PORT", "int", "c10d rendezvous port on the head node", 29500, minimum=1,
         maximum=65535, too_big="is not a port (1 to 65535)", scripts=CLASSIC),
    _seconds("FTSLURM_HEAL_TIMEOUT_S", "a survivor's wait for a healing peer's download "
             "(torchft: 60 s)", 900, default=600, scripts=FT),
    Knob("FTSLURM_HEAL_TRANSPORT", "choice", "how a healing replica gets a peer's state (fix 4): "
         "one HTTP stream, parallel ones, or the cross-replica process group (received in place)",
         "pg", choices=HEAL_TRANSPORTS, scripts=FT),
    Knob("FTSLURM_HEAL_CHUNKS", "int", "parallel requests of `FTSLURM_HEAL_TRANSPORT=http-chunked`",
         8, minimum=1, maximum=64, scripts=FT),
    Knob("FTSLURM_HEAL_MBPS", "int", "MB/s a heal moves per rank, an estimate: fix 6 adds twice "
         "the heal's time (state size / this) to the cross-replica timeout", 500, minimum=1,
         scripts=FT),
    Knob("FTSLURM_CHECKSUM_EVERY", "int", "parameter checksum every N committed steps; 0 = off",
         50, 1, minimum=0, scripts=FT),
    Knob("FTSLURM_CHECKSUM_ASYNC", "bool", "hash on a thread, from a pinned host copy", True,
         False, scripts=FT),
    _fix("FTSLURM_FIX_ASYNC_QUORUM", 1, "the quorum ends before forward starts"),
    _fix("FTSLURM_FIX_OPTIMIZER_STATE", 2, "a heal sends the live optimizer state"),
    _fix("FTSLURM_FIX_UNSHARDED_ALLREDUCE", 3, "1-rank replicas average gradients"),
    _fix("FTSLURM_FIX_HEAL_TIMEOUT", 4, "a heal may take `FTSLURM_HEAL_TIMEOUT_S`"),
    _fix("FTSLURM_FIX_FT_CHECKPOINT_RETENTION", 5, "one FT dataloader checkpoint kept"),
    _fix("FTSLURM_FIX_HEAL_TIMEOUT_FLOOR", 6, "a survivor's collectives outlast a peer's heal"),
    _fix("FTSLURM_FIX_RENDEZVOUS_NAMESPACE", 7, "a restarted Lighthouse's quorums connect"),
    _fix("FTSLURM_FIX_PEER_ABORT", 8, "a silent peer fails the survivors' step at once"),
    _fix("FTSLURM_FIX_CONSISTENT_RESUME", 9, "a restart's data position is the model "
         "checkpoint's step"),
    _fix("FTSLURM_FIX_GLOO_FSDP", 10, "replicas of several ranks on CPU: FSDP reduces with "
         "SUM over gloo"),
    _fix("FTSLURM_FIX_DILOCO_STATE", 11, "a DiLoCo resume from a checkpoint restores the outer "
         "optimizers and the sync schedule"),
    Knob("FTSLURM_HANG_TIMEOUT_S", "int", "the launcher's watchdog (watchdog.py) restarts a "
         "worker that is stopped while the Lighthouse lost its heartbeat, or that made no "
         "progress for this long in a long phase (its first steps, a wait on its peers, a "
         "checkpoint save, a heal; the worker raises it to 20 median steps or twice torchft's "
         "timeout); 0: no watchdog", 300, cpu_default=60, minimum=0, maximum=DAY_S, scripts=FT),
    Knob("FTSLURM_STALL_TIMEOUT_S", "float", "the watchdog's stall rule: a worker whose "
         "training thread made no progress in its compute for 3 median steps, and at least "
         "this long, is stalled (a CUDA call that never returns under a live heartbeat) and "
         "is restarted; 0: stalls only by FTSLURM_HANG_TIMEOUT_S", 30, cpu_default=5,
         minimum=0, maximum=DAY_S, scripts=FT),
    Knob("FTSLURM_EMULATE_SAVE_S", "float", "benches: each checkpoint save also holds the "
         "training thread this long (a GPU's slow save, emulated on CPU)", 0, minimum=0,
         maximum=3600, scripts=FT, public=False),
    Knob("FTSLURM_TINY_STEP_S", "float", "`FTSLURM_PRESET=tiny`: pause per step (paces many "
         "replicas on few cores)", 0.5, minimum=0, scripts=FT),
    Knob("FTSLURM_EARLY_FIRST_SYNC", "bool",
         "a restarted DiLoCo replica or spare syncs before any step", True, scripts=FT),
    Knob("FTSLURM_SKIP_TORCHRUN", "bool", "one rank per node: the launcher runs the training "
         "module itself, with torchrun's env (startup.py); 0: torchrun", True, scripts=FT),
    Knob("FTSLURM_LAZY_COMPILE", "bool", "torchtitan's import-time `torch.compile` calls "
         "are made on first use: no inductor at start (startup.py); 0: at import", True),
    Knob("FTSLURM_EXTRA_ARGS", "str", "torchtitan arguments, shell-quoted, appended last"),
    Knob("FTSLURM_DUMP_FOLDER", "path", "torchtitan's dump folder",
         default_doc="`<outputs>/torchft/tft-<job>`; classic: `<outputs>/classic-<job>`"),
    Knob("FTSLURM_OUTPUTS", "path", "the outputs folder: logs, runs, state (the CLI's too)",
         default_doc="`<checkout>/outputs`"),
    Knob("FTSLURM_PYTHON", "path", "interpreter the scripts exec on the nodes",
         default_doc="the submitting one (`ftslurm submit`); else `python3`"),
    Knob("FTSLURM_TORCHRUN", "path", "torchrun executable",
         default_doc="beside that interpreter, else `torchrun`"),
    Knob("FTSLURM_SINGLE_NODE", "bool", "no srun: one torchrun here, rendezvous on localhost",
         False, scripts=CLASSIC),
    Knob("FTSLURM_DRY_RUN", "bool", "print the exact command; run nothing", False),
    # ---- read by the ftslurm commands --------------------------------------------------------
    Knob("FTSLURM_PROJECT", "path", "the checkout the state folders are in", where="cli",
         default_doc="the package's checkout, else the current folder"),
    Knob("FTSLURM_CLUSTER_DIR", "path", "the local Slurm cluster's state", where="cli",
         default_doc="`<outputs>/cluster`"),
    Knob("FTSLURM_LIGHTHOUSE_DIR", "path", "the managed Lighthouse's state and log",
         where="cli", default_doc="`<outputs>/lighthouse`"),
    Knob("FTSLURM_EVENTS", "path", "the event log of injected failures", where="cli",
         default_doc="`<outputs>/events.jsonl`"),
    Knob("FTSLURM_LIGHTHOUSE_BIN", "path", "`ftslurm lighthouse start --binary`", where="cli",
         default_doc="torchft's Lighthouse, loaded directly"),
    Knob("FTSLURM_LIGHTHOUSE_SNAPSHOT_S", "float", "the managed Lighthouse's launcher reads "
         "its /status page this many seconds after the last read ended and keeps it for "
         "`lighthouse status`, `status` and `metrics` (with 1,024 replicas a read waits "
         "seconds behind torchft's quorum lock); each read costs the Lighthouse one render "
         "of the page under that lock; 0: no copy, every command reads the page itself",
         1.0, minimum=0, where="cli"),
    Knob("FTSLURM_LIGHTHOUSE_ADVERTISE", "str", "`ftslurm lighthouse start --advertise`",
         where="cli", default_doc="the bind address if specific, else this hostname"),
    Knob("FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS", "int",
         "`ftslurm lighthouse start --heartbeat-timeout-ms`: how long a silent replica stays "
         "in the quorum (detection time; too low drops live replicas)", where="cli",
         minimum=HEARTBEAT_TIMEOUT_FLOOR_MS, maximum=MAX_MS, default_doc="2000 (torchft's: 5000)"),
    Knob("FTSLURM_KILL_VIA", "choice", "how `ftslurm simulate-failure --mode kill` reaches the "
         "workers: by pid on the local cluster, else `srun` + `pkill`", "auto",
         choices=("auto", "srun", "local"), where="cli"),
    Knob("HF_TOKEN", "str", "Hugging Face token of `ftslurm assets download`; never printed",
         where="cli", default_doc="unset", secret=True),
    # ---- internal channels (set by Slurm, the launcher or `ftslurm lighthouse start`) ------
    Knob("FTSLURM_REPLICA_ID", "int", "replica index (else SLURM_ARRAY_TASK_ID)",
         maximum=2 * MAX_REPLICAS, public=False),
    Knob("FTSLURM_GROUP_SIZE", "int", "number of replicas (else SLURM_ARRAY_TASK_COUNT)",
         maximum=MAX_REPLICAS, public=False),
    Knob("FTSLURM_ATTEMPT", "int", "attempt number (else SLURM_RESTART_COUNT)", 0, minimum=0,
         public=False),
    Knob("FTSLURM_RESTART", "int", "restarts in place so far in this allocation (set by the "
         "launcher)", 0, minimum=0, maximum=1000, public=False),
    Knob("FTSLURM_RUN_ID", "str", "names the run folder tft-<id> outside a Slurm job", "local",
         public=False),
    Knob("FTSLURM_DEVICE", "choice", "the device the launcher resolved, for the workers",
         choices=("cuda", "cpu"), public=False),
    Knob("FTSLURM_FT_MODE", "choice", "the FT mode, for the workers (unset: classic)",
         choices=("per-step", "diloco"), public=False),
    Knob("FTSLURM_LAUNCHER_PID", "int", "workers check the launcher is their ancestor",
         public=False),
    Knob("FTSLURM_WORKER_STORE", "bool", "the worker hosts the store torchrun would "
         "(FTSLURM_SKIP_TORCHRUN)", False, public=False),
    Knob("FTSLURM_CONFIG_ERROR_FILE", "path", "where a worker notes refused options",
         public=False),
    Knob("FTSLURM_SLOTS_DIR", "path", "the run's slot claims (slots.py): set when FT_SPARES "
         "> 0", public=False),
    Knob("FTSLURM_TASK", "int", "the array task of this launcher (the slot may differ)",
         maximum=2 * MAX_REPLICAS, public=False),
    Knob("FTSLURM_SLOT_EPOCH", "int", "the fencing epoch of this replica's slot claim",
         minimum=0, maximum=10**18 - 1, public=False),
    Knob("FTSLURM_SPARE", "bool", "this worker waits warm for a slot (standby.py)", False,
         public=False),
    Knob("FTSLURM_ATTEMPT_GUARD", "bool", "a process removes an attempt's temporary folder "
         "once its launcher is gone, also after a SIGKILL (attempt_guard.py); 0: only a later "
         "attempt on the host does", True, public=False),
    Knob("FTSLURM_WARM_GO_FILE", "path", "where the launcher tells a warm next run to train "
         "(`go`) or to end (`stop`)", public=False),
    Knob("FTSLURM_SLOT_FILE", "path", "where local rank 0 tells the other ranks its slot",
         public=False),
    Knob("FTSLURM_FENCED_FILE", "path", "where a fenced worker tells the launcher",
         public=False),
    Knob("FTSLURM_TIME_LIMIT_FILE", "path", "where the launcher tells the worker that Slurm "
         "signalled the time limit (a final checkpoint, then a requeue)", public=False),
    Knob("FTSLURM_PROGRESS_FILE", "path", "where the worker tells the launcher's watchdog "
         "its progress (peer_watch.py)", public=False),
    Knob("FTSLURM_LIGHTHOUSE_LOG", "path", "the managed Lighthouse's log", where="cli",
         public=False),
    Knob("FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES", "int", "its log's rotation size", 0, minimum=0,
         where="cli", public=False),
    Knob("FTSLURM_LIGHTHOUSE_BINARY", "path", "the --binary its launcher runs", where="cli",
         public=False),
    Knob("FTSLURM_DAEMON", "str", "tags the processes of one daemon start (daemon.TAG_ENV)",
         where="cli", public=False),
)}  # fmt: skip

SECRETS = tuple(k.name for k in KNOBS.values() if k.secret)
INTERNAL = tuple(k.name for k in KNOBS.values() if not k.public)


def public(where: str | None = None) -> list[Knob]:
    """The public knobs, of one `where` ("job" or "cli") if given, in registry order."""
    return [k for k in KNOBS.values() if k.public and where in (None, k.where)]


def is_set(env: Mapping[str, str], name: str) -> bool:
    """A knob counts as set when its value is not blank (an empty export is unset)."""
    return bool(env.get(name, "").strip())


def get(env: Mapping[str, str], name: str, device: str | None = None) -> Any:
    """Knob `name` from `env`, parsed and checked (a `UserError` naming it otherwise), else
    its default (on `device`, for knobs whose default depends on it)."""
    knob = KNOBS[name]
    if is_set(env, name):
        return knob.parse(env[name])
    return knob.default_for(device)


def check(env: Mapping[str, str]) -> None:
    """Every public knob set in `env` parses and is in range: the first bad one is a
    `UserError` (one line, naming the knob and what it takes)."""
    for knob in public():
        if is_set(env, knob.name):
            knob.parse(env[knob.name])


KIND_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (float, int), "bool": (bool,), "choice": (str,), "str": (str,),
    "path": (str,),
}  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """The knobs of one environment, parsed once by `load`: `s["STEPS"]` or `s.STEPS` is the
    value as its knob's type (a name not in the registry is a KeyError / AttributeError, not a
    silent None), else its default on `device`.

    A bad value is kept, not raised, at load: it is raised (the same one-line `UserError`) where
    it is read, so `ftslurm status` does not fail on a knob only the launcher reads; `check`
    raises the first bad public one up front. `env` is
    the snapshot the values came from, for the variables that are not knobs (Slurm's)."""

    env: Mapping[str, str] = field(repr=False)  # may hold secrets (WANDB_API_KEY)
    device: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict, repr=False)  # value or UserError

    def __getitem__(self, name: str) -> Any:
        knob = KNOBS.get(name)
        if knob is None:
            raise KeyError(f"{name} is not a knob of ftslurm/knobs.py: register it there")
        if name in self.values:
            value = self.values[name]
            if isinstance(value, UserError):
                raise value
            return value
        return knob.default_for(self.device)

    def __getattr__(self, name: str) -> Any:
        if name in KNOBS:
            return self[name]
        raise AttributeError(f"{name} is not a knob of ftslurm/knobs.py nor a Settings field")

    def get(self, name: str, device: str | None = None) -> Any:
        """Knob `name`, its default on `device` (else this object's) when unset."""
        return self.on(device)[name] if device is not None else self[name]

    def is_set(self, name: str) -> bool:
        """Whether knob `name` is set (not blank: an empty export is unset)."""
        if name not in KNOBS:
            raise KeyError(f"{name} is not a knob of ftslurm/knobs.py: register it there")
        return name in self.values

    def raw(self, name: str) -> str:
        """The text knob `name` is set to (for a message quoting it, or passing it on as set)."""
        self.is_set(name)
        return self.env.get(name, "")

    def on(self, device: str | None) -> Settings:
        """The same settings with the defaults of `device` (knobs whose default depends on it)."""
        return self if device == self.device else replace(self, device=device)

    def check(self) -> None:
        """`check` on these settings: the first bad public knob, in registry order, raised."""
        for knob in public():
            value = self.values.get(knob.name)
            if isinstance(value, UserError):
                raise value


def load(env: Mapping[str, str] | Settings | None = None, device: str | None = None) -> Settings:
    """The settings of `env` (a Settings is returned as it is, on `device` if given; None: this
    process's, `environ()`): every knob set in it parsed here, once."""
    if isinstance(env, Settings):
        return env.on(device) if device is not None else env
    if env is None:
        return environ().on(device)
    snapshot = dict(env)
    for known in _LOADED:  # the launcher passes one environment through many functions
        if known.env == snapshot:
            return known.on(device)
    values: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        if is_set(snapshot, name):
            try:
                values[name] = knob.parse(snapshot[name])
            except UserError as e:
                values[name] = e
    loaded = Settings(MappingProxyType(snapshot), None, MappingProxyType(values))
    _LOADED[:] = [loaded, *_LOADED[: _KEEP_LOADED - 1]]
    return loaded.on(device)


# The settings of the newest environments loaded, newest first: an environment equal to one of
# them (compared whole, so a value is never stale) is not parsed again. A launcher's attempt
# passes one environment dict to a dozen functions that each read a knob or two; each parsed
# all of the registry again before.
_KEEP_LOADED = 8
_LOADED: list[Settings] = []


def environ() -> Settings:
    """This process's settings, loaded from os.environ once and again only when it changed (a
    test's monkeypatch, click's CliRunner(env=...), a worker setting MASTER_PORT): the values
    are never stale, and parsed once per environment (`load`'s cache)."""
    return load(os.environ)


# --------------------------------------------------------------------------------------------
# The tables in the scripts' headers and docs/settings.md, rendered from the registry

SETTINGS_PAGE = "docs/settings.md"
_HOW = "generated from ftslurm/knobs.py by `python -m ftslurm.knobs --write`"
PAGE_BEGIN = f"<!-- knobs: {_HOW}; edit them there -->"
PAGE_END = "<!-- end of knobs -->"
SCRIPT_BEGIN = "# Knobs ("
BOOLEANS = "booleans take 1/0, true/false, yes/no or on/off"


def _description(knob: Knob, script: str | None = None) -> str:
    """What the knob does and takes; in docs/settings.md (no `script`) also its range and which
    script reads it."""
    notes = []
    if knob.kind == "choice":
        values = [f"`{c}`" for c in knob.choices]
        notes.append(" or ".join([", ".join(values[:-1]), values[-1]]))
    elif knob.kind in ("int", "float") and script is None:
        notes.append(_range_text(knob.minimum, knob.maximum).strip())
    if script is None and knob.where == "job" and knob.scripts != BOTH:
        notes.append("FT script only" if knob.scripts == FT else "classic script only")
    return f"{knob.doc} ({'; '.join(notes)})" if notes else knob.doc


def _default(knob: Knob) -> str:
    """The default in Markdown: constants as code, computed ones as `default_doc` says."""
    if knob.default_doc:
        return knob.default_doc

    def code(v: Any) -> str:
        return f"`{int(v) if isinstance(v, bool) else v}`"

    if knob.default is None:
        return ""
    if knob.cpu_default is None:
        return code(knob.default)
    return f"{code(knob.default)} ({code(knob.cpu_default)} with `DEVICE=cpu`)"


def markdown() -> str:
    """The knob tables of docs/settings.md (variable | default | description) between their
    markers."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    def table(knobs: list[Knob]) -> list[str]:
        rows = ["| variable | default | description |", "|---|---|---|"]
        return rows + [f"| `{k.name}` | {cell(_default(k))} | {cell(_description(k))} |"
                       for k in knobs]  # fmt: skip

    lines = [PAGE_BEGIN, f"Read on the nodes (export them before `ftslurm submit` or `sbatch`; "
             f"{BOOLEANS}):", "", *table(public("job")), "", "Read by the `ftslurm` commands:",
             "", *table(public("cli")), PAGE_END]  # fmt: skip
    return "\n".join(lines) + "\n"


def shell_comment(script: str) -> str:
    """The knob list of a script's header comment ("ft" or "classic"), through the `#` line
    that ends it; lines wrapped at 100 characters."""
    knobs = [k for k in public("job") if script in k.scripts]
    indent = "#   " + " " * (max(len(k.name) for k in knobs) + 2)
    lines = [f"{SCRIPT_BEGIN}environment variables exported to the job; {BOOLEANS};",
             f"# {_HOW}):"]  # fmt: skip
    for k in knobs:
        default = _default(k)
        text = f"{_description(k, script)}{f' [{default}]' if default else ''}".replace("`", "")
        first = f"#   {k.name:<{len(indent) - 4}}{text}"
        lines += textwrap.wrap(first, 100, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join([*lines, "#"]) + "\n"


def _replace(text: str, begin: str, end: str, block: str) -> str:
    """`text` with the lines from the one starting with `begin` through the one equal to
    `end` replaced by `block`."""
    pattern = re.compile(rf"^{re.escape(begin)}.*?^{re.escape(end)}\n", re.MULTILINE | re.DOTALL)
    new, count = pattern.subn(lambda _: block, text, count=1)
    if count != 1:
        raise UserError(f"no knob block ({begin!r} ... {end!r}) to replace")
    return new


def rendered(root: Path) -> dict[Path, str]:
    """Each generated file's text with its knob block as the registry renders it now."""
    out = {}
    page = root / SETTINGS_PAGE
    out[page] = _replace(page.read_text(), PAGE_BEGIN, PAGE_END, markdown())
    for script, name in SCRIPTS.items():
        path = root / name
        out[path] = _replace(path.read_text(), SCRIPT_BEGIN, "#", shell_comment(script))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftslurm.knobs", description=__doc__.split(
        "\n", 1)[0])  # fmt: skip
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="the knob tables of docs/settings.md")
    what.add_argument("--shell-comment", choices=sorted(SCRIPTS), help="a script's knob list")
    what.add_argument("--write", action="store_true",
                      help="rewrite the knob blocks of docs/settings.md and both scripts")
    a = parser.parse_args(argv)
    if a.markdown:
        sys.stdout.write(markdown())
    elif a.shell_comment:
        sys.stdout.write(shell_comment(a.shell_comment))
    else:
        # the checkout whose knobs.py this is (FTSLURM_PROJECT, else the package's parent);
        # not paths.project_root(): paths reads its folders here, so this may not import it
        project = environ()["FTSLURM_PROJECT"]
        root = Path(project).resolve() if project else Path(__file__).resolve().parent.parent
        try:
            for path, text in rendered(root).items():
                if path.read_text() != text:
                    path.write_text(text)
                    print(f"rewrote the knobs of {path}")
        except (OSError, UnicodeDecodeError, UserError) as e:
            # outside a checkout (an installed package, another folder) there is no docs/settings.md
            why = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror else e
            print(f"Error: cannot rewrite the knob blocks under {root} ({why}); run it in the "
                  "checkout (or set FTSLURM_PROJECT to it)", file=sys.stderr)  # fmt: skip
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
