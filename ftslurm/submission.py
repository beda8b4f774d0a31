"""The one way a job reaches Slurm: a `SubmitRequest` in, the job id and its log folder out.

`ftslurm submit`, `ftslurm demo` and the Python API all submit through `submit`, so a job gets
the same environment (the outputs folder, this interpreter, the knobs), the same device
options, the same time-limit signal and the same checks whichever way it was sent. `plan`
says what `submit` would run without running it. The script's `#SBATCH` lines are read here
only (`header_lines`, `last_directive`), as sbatch reads them. sbatch itself runs through
`ftslurm.slurm.client`, the only caller of Slurm's tools.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import knobs, logvocab, paths, safefile
from ftslurm.errors import UserError

Say = Callable[[str], None]

# getopt takes any unambiguous prefix of a long option: --exp, --expo, --expor, --export
_EXPORT_OPTION = re.compile(r"--exp(o(r(t)?)?)?$")
# knobs read on the nodes besides FTSLURM_*; passed by name under a restricting --export
LAUNCHER_KNOBS = tuple(k.name for k in knobs.public("job") if not k.name.startswith("FTSLURM_"))

# sbatch reads #SBATCH lines only before the first command: a script may be large (a data
# blob after `exit`), its header never is
HEADER_MAX_BYTES = 1 << 20
# one `#SBATCH` line: the option and its value (`--opt=V`, `--opt V`, `-o V`, `-oV`)
_DIRECTIVE = re.compile(r"#SBATCH\s+(-[^\s=]+)(?:[=\s]\s*(\S+))?")

# sbatch's --signal=[{R|B}:]<sig_num>[@sig_time]; sig_time defaults to 60 s
_SIGNAL_SPEC = re.compile(
    r"(?:(?P<flags>[RB]{1,2}):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<at>[0-9]{1,30}))?"
)
_USR1 = ("USR1", "SIGUSR1", "10")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The script's #SBATCH lines


def header_lines(script: str | Path) -> list[str]:
    """The script's header lines (before its first command), from at most its first
    HEADER_MAX_BYTES; [] when it cannot be read."""
    try:
        with open(script, "rb") as f:
            head = f.read(HEADER_MAX_BYTES)
    except OSError:
        return []
    lines = head.decode(errors="replace").splitlines()
    if len(head) == HEADER_MAX_BYTES and not head.endswith(b"\n"):
        lines = lines[:-1]  # cut off mid-line
    header = []
    for line in lines[1:]:
        if line.strip() and not line.lstrip().startswith("#"):
            break  # the first command
        header.append(line)
    return header


def directives(lines: Sequence[str]) -> list[tuple[str, str | None]]:
    """(option, value) of each `#SBATCH` line among `lines`, in order; a short option's value
    may be glued to it (`-a0-1`), as getopt reads it. The one parser of `#SBATCH` lines."""
    found = []
    for line in lines:
        m = _DIRECTIVE.match(line)
        if not m:
            continue
        option, value = m.group(1), m.group(2)
        if value is None and re.fullmatch(r"-[A-Za-z].+", option):
            option, value = option[:2], option[2:]
        found.append((option, value))
    return found


def last_directive(script: str | Path, option: str) -> str | None:
    """The value of the last `#SBATCH <option>` of the script's header (`option`: a regex of
    the option's spellings), as sbatch takes the last one."""
    found = None
    for name, value in directives(header_lines(script)):
        if value is not None and re.fullmatch(option, name):
            found = value
    return found


def _array_in(script: str | Path) -> bool:
    """An `#SBATCH --array` / `-a` line in the script's header."""
    return any(re.fullmatch(r"--array|-a", name) for name, _ in directives(header_lines(script)))


# --------------------------------------------------------------------------------------------
# sbatch's options


def _last_option(options: Sequence[str], long: str, short: str) -> str | None:
    """The value of the last `--long=V`, `--long V`, `-s V` or `-sV` among sbatch's options."""
    found = None
    for i, o in enumerate(options):
        if o.startswith(long + "="):
            found = o.split("=", 1)[1]
        elif o in (long, short) and i + 1 < len(options):
            found = options[i + 1]
        elif o.startswith(short) and len(o) > 2:
            found = o[2:].lstrip("=")
    return found


def array_size(options: Sequence[str]) -> int | None:
    """Tasks of a plain `--array=A-B` / `--array=A,B,C` (a `%` limit is ignored); None for
    other forms (steps `A-B:S`) or no --array."""
    value = _last_option(options, "--array", "-a")
    if value is None:
        return None
    n = 0
    for part in value.split("%", 1)[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        n += int(m[2]) - int(m[1]) + 1 if m[2] else 1
    return n


def _chdir(options: Sequence[str]) -> Path | None:
    """The job's working directory given with --chdir / -D; None: sbatch's own folder."""
    found = _last_option(options, "--chdir", "-D")
    return Path(found).expanduser() if found else None


def _export_on_command_line(options: Sequence[str]) -> tuple[str | None, set[int]]:
    """The last --export value given (`--export=V` or `--export V`) and the argv words that
    give any."""
    value, words = None, set()
    i = 0
    while i < len(options):
        name, eq, v = options[i].partition("=")
        if _EXPORT_OPTION.match(name):
            if eq:
                value, words = v, words | {i}
            elif i + 1 < len(options):
                value, words = options[i + 1], words | {i, i + 1}
                i += 1
        i += 1
    return value, words


def export_also(
    options: list[str], names: list[str], env: Mapping[str, str] | None = None, script: str = ""
) -> tuple[list[str], list[str]]:
    """Under a restricting export (NONE, NIL, or a list without ALL; from the command line,
    else $SBATCH_EXPORT, else the script's #SBATCH line, sbatch's order) sbatch passes the
    job only the variables listed, and the job needs `names` (the outputs folder, the knobs
    checked here): the options with one `--export=` that adds them by name (values from
    sbatch's environment), and the names added. Otherwise `options` unchanged."""
    value, words = _export_on_command_line(options)
    if value is None:
        value = (env or {}).get("SBATCH_EXPORT") or (
            last_directive(script, r"--exp(?:o(?:r(?:t)?)?)?") if script else None
        )
    items = [v for v in (value or "").split(",") if v]
    if value is None or any(v.upper() == "ALL" for v in items):
        return options, []
    kept = [v for v in items if v.upper() not in ("NONE", "NIL")]
    listed = {v.split("=", 1)[0] for v in kept}
    by_name = {n.split("=", 1)[0]: n for n in names}  # a later NAME=value wins over NAME
    added = [n for k, n in by_name.items() if k not in listed]
    rest = [o for i, o in enumerate(options) if i not in words]
    return [*rest, "--export=" + ",".join([*kept, *added])], added


def export_names(env: Mapping[str, str]) -> list[str]:
    """What the job needs from this environment: FTSLURM_OUTPUTS and the knobs that are set."""
    ours = [k for k in env if k.startswith("FTSLURM_") and env[k]]
    return ["FTSLURM_OUTPUTS", *sorted(ours), *(k for k in LAUNCHER_KNOBS if env.get(k))]


# --------------------------------------------------------------------------------------------
# The time-limit signal


def time_limit_signal_spec(margin: int) -> str:
    """`--signal`'s value that warns the launcher `margin` s before the time limit: USR1 to
    the batch shell, which the FT script replaced with the launcher (`exec`)."""
    return f"B:USR1@{margin}"


def launcher_signal_margin(spec: str) -> int | None:
    """Seconds before the time limit at which `--signal=<spec>` reaches the launcher: it
    must be USR1 to the batch shell (`B:`), which the FT script replaced with the launcher;
    None for any other signal or target (the launcher then gets no warning)."""
    m = _SIGNAL_SPEC.fullmatch(spec.strip())
    if not m or "B" not in (m["flags"] or "") or m["sig"].upper() not in _USR1:
        return None
    return int(m["at"]) if m["at"] is not None else 60


def _signal_option(options: Sequence[str]) -> str | None:
    """The value of the last `--signal=V` / `--signal V` among sbatch's options."""
    found = None
    for i, o in enumerate(options):
        if o.startswith("--signal="):
            found = o.split("=", 1)[1]
        elif o == "--signal" and i + 1 < len(options):
            found = options[i + 1]
    return found


def _signal_spec(given: str | None, env: Mapping[str, str],
                 script: str) -> tuple[str, str] | None:  # fmt: skip
    """The `--signal` value sbatch will use and where it comes from (sbatch's order: the
    command line, $SBATCH_SIGNAL, the script's #SBATCH line); None when there is none."""
    if given:
        return given, f"--signal={given}"
    if env.get("SBATCH_SIGNAL"):
        return env["SBATCH_SIGNAL"], f"SBATCH_SIGNAL={env['SBATCH_SIGNAL']}"
    line = last_directive(script, r"--signal")
    return (line, f"{script}'s #SBATCH --signal={line}") if line is not None else None


def check_signal_margin(margin: int, where: str) -> None:
    """The margin a `--signal` gives the launcher is passed on as FTSLURM_TIME_LIMIT_SIGNAL_S:
    it must be in that knob's range here, before the queue wait, or every task of the job
    fails on it once it starts. `where`: the --signal and where it came from."""
    knob = knobs.KNOBS[knobs.TIME_LIMIT_SIGNAL]
    try:
        knob.parse(str(margin))
    except UserError:
        raise UserError(
            f"{where}: USR1 {margin} s before the time limit is out of range; the launcher "
            f"takes {knob.minimum} to {knob.maximum} s ({knobs.TIME_LIMIT_SIGNAL}): e.g. "
            f"--signal={time_limit_signal_spec(knob.default)}"
        ) from None


def _time_limit_signal(req: SubmitRequest, options: list[str], env: Mapping[str, str],
                       say: Say) -> tuple[list[str], int | None]:  # fmt: skip
    """The sbatch options with `--signal=B:USR1@<margin>` added when asked for, and the
    margin the launcher will get (sbatch's order: the command line, $SBATCH_SIGNAL, the
    script's #SBATCH line), or None when no USR1 reaches it (said with `say`)."""
    margin, from_env, script = req.time_limit_signal, req.time_limit_signal_from_env, req.script
    given = _signal_option(options)
    if margin is not None and Path(script).name == paths.CLASSIC_SCRIPT:
        if from_env:  # a knob of the FT script's, exported for both
            return options, None
        raise UserError(f"--time-limit-signal is for {paths.FT_SCRIPT}: the classic job takes "
                        "no final checkpoint and would die of the signal")  # fmt: skip
    if margin is not None and given is not None and not from_env:
        raise UserError(f"--time-limit-signal {margin} and --signal={given}: give the margin "
                        f"once (--time-limit-signal {margin} is --signal=B:USR1@{margin})")
    if margin is not None and given is None:
        return [*options, f"--signal={time_limit_signal_spec(margin)}"], margin
    source = _signal_spec(given, env, script)
    if source is None:
        return options, None
    spec, where = source
    found = launcher_signal_margin(spec)
    if found is not None:
        check_signal_margin(found, where)
    if found is None and Path(script).name == paths.FT_SCRIPT:
        say(f"warning: --signal={spec} sends the batch shell (the launcher) no USR1: "
            "at the time limit no final checkpoint is taken and nothing requeues; "
            "use --time-limit-signal SECONDS (--signal=B:USR1@SECONDS)")
    return options, found


# --------------------------------------------------------------------------------------------
# Checks


def check_spares(options: Sequence[str], spares: int) -> None:
    """FT_SPARES=S needs an array of more than S tasks (N replicas + S spares)."""
    n = array_size(options)
    if spares and n is not None and n <= spares:
        raise UserError(
            f"--spares {spares} with an array of {n} task(s) leaves no replica to train: "
            f"use --array=0-<N-1+{spares}> (N replicas plus {spares} spare(s))"
        )


def split_brain_warning(replicas: int | None, min_replicas: int | None, address: str) -> str:
    """The warning for a Lighthouse whose --min-replicas is below `safe_min_replicas` (more
    than half of 3 or more replicas); '' when it is not, or when unknown.

    Why: the Lighthouse issues a quorum to whoever asks once `min_replicas` have, so
    replicas that ask apart (after a Lighthouse restart) can get two quorums and train apart:
    on the local Slurm at 8 replicas and min-replicas 1, a requeued replica got a quorum of
    its own and never healed (docs/benchmarks-cpu.md, "Scale"). torchft's advice: a
    min_replicas of at least a majority."""
    from ftslurm.lighthouse.config import safe_min_replicas

    if replicas is None or min_replicas is None:
        return ""
    majority = safe_min_replicas(replicas)
    if min_replicas >= majority:
        return ""
    return (
        f"warning: the Lighthouse at {address} issues a quorum to {min_replicas} replica(s) "
        f"(--min-replicas {min_replicas}) and this array has {replicas}: replicas that ask "
        "apart, as after a Lighthouse restart, can get two quorums and train apart. For a "
        f"majority: ftslurm lighthouse restart --min-replicas {majority}"
    )


# above this many replicas a quorum round of the Lighthouse takes seconds (O(N^2) under one
# lock: 0.4 s at 256, 4-5 s at 1,024 on 2 cores; docs/scale.md)
LARGE_ARRAY = 256
LARGE_HEARTBEAT_TIMEOUT_MS = 5000
LARGE_JOIN_TIMEOUT_MS = 60000


def large_array_warning(replicas: int | None, config: Mapping[str, object], address: str) -> str:
    """The warning for an array of more than LARGE_ARRAY replicas against a Lighthouse whose
    heartbeat or join timeout is below what such an array needs; '' otherwise.

    Why (bench/lighthouse_scale.py, docs/scale.md): at 1,024 replicas a round takes 4-5 s of
    the Lighthouse; a loaded login node then gets heartbeats late (live replicas dropped at
    2000 ms, none at 5000 ms), and a round longer than the join timeout splits the array (a
    quorum of half of it, the rest left out until the next round)."""
    if replicas is None or replicas <= LARGE_ARRAY:
        return ""
    hb, join = (v if type(v) is int else 0 for v in (config.get("heartbeat_timeout_ms"),
                                                       config.get("join_timeout_ms")))
    low = [f"--{name} {value}" for name, value, need in (
        ("heartbeat-timeout-ms", hb, LARGE_HEARTBEAT_TIMEOUT_MS),
        ("join-timeout-ms", join, LARGE_JOIN_TIMEOUT_MS)) if 0 < value < need]
    if not low:
        return ""
    return (
        f"warning: the Lighthouse at {address} runs with {' and '.join(low)} and this array has "
        f"{replicas} replicas: a quorum round then takes seconds, live replicas can be dropped "
        "and the array split (docs/scale.md). For a large array: ftslurm lighthouse restart "
        f"--heartbeat-timeout-ms {max(hb, LARGE_HEARTBEAT_TIMEOUT_MS)} --join-timeout-ms "
        f"{max(join, LARGE_JOIN_TIMEOUT_MS)}"
    )  # fmt: skip


def _warn_split_brain(options: Sequence[str], spares: int, settings: knobs.Settings,
                      say: Say) -> None:  # fmt: skip
    """`split_brain_warning` and `large_array_warning`, for the managed Lighthouse when
    TORCHFT_LIGHTHOUSE names it (another Lighthouse's options are not known here); from its
    state file."""
    n = array_size(options)
    if n is None or not settings.is_set("TORCHFT_LIGHTHOUSE"):
        return
    from ftslurm.lighthouse import lifecycle

    wanted = settings.TORCHFT_LIGHTHOUSE.rstrip("/")
    st = lifecycle.status(probe=False)
    if not st.running or (st.address or "").rstrip("/") != wanted:
        return
    config = st.config or {}
    for warning in (split_brain_warning(n - spares, config.get("min_replicas"), wanted),
                    large_array_warning(n - spares, config, wanted)):  # fmt: skip
        if warning:
            say(warning)


def _check_job_dir(path: Path) -> None:
    """The job's working directory (--chdir) must be there: Slurm runs a job whose --chdir is
    missing in /tmp instead, and creating the log folder in it would make a mistyped path."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise UserError(f"--chdir {path} {what}: give the folder the job runs in")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"--chdir {path} is not writable: the job writes its logs there")


@dataclass(frozen=True)
class LogDir:
    """A log folder made before sbatch: `path`, whose folders from `top` (the outputs folder)
    down are checked as root (`check_log_dir`); `fix`: what to change when it cannot be made."""

    path: Path
    top: Path
    fix: str

    @classmethod
    def under(cls, base: Path, relative: str | Path, fix: str) -> LogDir:
        """`base / relative`, checked from the first folder of `relative` down."""
        rel = Path(relative)
        top = base / rel.parts[0] if rel.parts and not rel.is_absolute() else base / rel
        return cls(base / rel, top, fix)

    def checked(self) -> list[Path]:
        """`top` and each folder below it down to `path`."""
        below = self.path.relative_to(self.top).parts
        return [self.top, *(self.top.joinpath(*below[: i + 1]) for i in range(len(below)))]


def check_log_dir(folder: LogDir) -> None:
    """As root, refuse a log folder (or a folder of it below the outputs folder) that is a
    symbolic link, belongs to another user or others can write (`safefile.untrusted_dir`,
    as the launcher checks its failure records): `ftslurm submit --chdir` into another
    user's folder would create the log folders through a link planted there (`outputs ->
    /etc`), and root's job would then write its logs where the link points."""
    if os.geteuid() != 0:
        return
    for path in folder.checked():
        try:
            mode = os.lstat(path).st_mode
        except OSError:  # missing (made next, checked again), or below a file (mkdir says)
            return
        if not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            return  # a file in the way: mkdir's error says so, with the fix
        if (why := safefile.untrusted_dir(path)) is not None:
            raise UserError(f"refusing to use {path} as a log folder as root: {why}; remove "
                            "it, or submit as its owner (as root, ftslurm writes no logs "
                            "through a link or into a folder another user controls)")


def _make_dir(folder: LogDir) -> None:
    """Make `folder`, checked (as root) before it is made or used and once it is there (a
    name swapped in meanwhile is refused before sbatch runs)."""
    check_log_dir(folder)
    try:
        folder.path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file in the way, no permission, read-only file system
        raise UserError(f"cannot create the log folder {folder.path} ({e.strerror}): "
                        f"{folder.fix}") from None
    check_log_dir(folder)


def _outputs_fix(settings: knobs.Settings) -> str:
    """What to change when the outputs folder cannot be made: the variable, or its value."""
    if settings.is_set("FTSLURM_OUTPUTS"):
        return (f"FTSLURM_OUTPUTS={settings.raw('FTSLURM_OUTPUTS')} is set; point it at a folder "
                "you can write to")
    return "set FTSLURM_OUTPUTS to a folder you can write to"


# --------------------------------------------------------------------------------------------
# The request and its submission


@dataclass(frozen=True)
class SubmitRequest:
    """What to submit.

    `sbatch_options`: sbatch's options as a user gives them (the last of each counts);
    `array`: an `--array` value added to them (e.g. `0-3`); `spares`: warm spares
    (FT_SPARES), None: $FT_SPARES; `knobs`: variables the job gets besides the submitting
    environment (`env`, None: this process's); `device_options`: the sbatch options of the
    device, None: derived from DEVICE / FTSLURM_PRESET (and every knob checked, for this
    project's scripts); `time_limit_signal`: the margin of `--signal=B:USR1@<s>`, None: the
    script's or sbatch's own `--signal`; `time_limit_signal_from_env`: that margin came from
    FTSLURM_TIME_LIMIT_SIGNAL_S, not an option (an explicit `--signal` then wins);
    `workdir`: where sbatch runs (the job's working directory unless --chdir); `outputs`:
    the outputs folder (None: `paths.outputs_dir()`); `slurm_output_dir`: the folder of the
    script's Slurm `--output`, relative to the job's working directory, made before sbatch
    (Slurm does not make it, and a job whose output folder is missing fails unrequeued);
    None: the script's own (the API's submitit file writes into submitit's folder)."""

    script: str
    sbatch_options: Sequence[str] = ()
    script_args: Sequence[str] = ()
    array: str | None = None
    spares: int | None = None
    knobs: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    device_options: Sequence[str] | None = None
    time_limit_signal: int | None = None
    time_limit_signal_from_env: bool = False
    workdir: Path | None = None
    outputs: Path | None = None
    slurm_output_dir: str | None = "outputs/torchft"
    timeout: float | None = None

    def cli_line(self, shown: Sequence[str] = ()) -> str:
        """The request as the `ftslurm submit` command that makes it, with the knobs named in
        `shown` before it (a plan prints this; the others travel the same way, unprinted)."""
        env = [f"{k}={shlex.quote(self.knobs[k])}" for k in shown if k in self.knobs]
        spares = ["--spares", str(self.spares)] if self.spares else []
        margin = [] if self.time_limit_signal is None or self.time_limit_signal_from_env else [
            "--time-limit-signal", str(self.time_limit_signal)]  # fmt: skip
        array = [f"--array={self.array}"] if self.array else []
        words = [*spares, *margin, *array, *self.sbatch_options, self.script, *self.script_args]
        return " ".join([*env, "ftslurm", "submit", *map(shlex.quote, words)])


@dataclass(frozen=True)
class SbatchPlan:
    """What `submit` runs: `argv` (the sbatch command) in `cwd`, with `job_env` added to the
    environment (the job inherits it), after making `folders`."""

    argv: list[str]
    job_env: dict[str, str]
    cwd: Path | None
    folders: list[LogDir]
    script: str
    options: list[str]
    script_args: list[str]
    is_array: bool
    outputs: Path
    timeout: float | None
    env: Mapping[str, str] | None  # sbatch's environment before `job_env`; None: this process's


@dataclass(frozen=True)
class Submitted:
    """A submitted job: its id and the folder its replica logs go to (None: not an array,
    so the FT script's layout does not apply)."""

    job_id: int
    log_dir: Path | None


def plan(req: SubmitRequest, say: Say = _stderr) -> SbatchPlan:
    """What `submit(req)` will run, after the checks (a UserError for what the user must
    fix; warnings go to `say`). Nothing is made or submitted."""
    from ftslurm.resources import device_overrides
    from ftslurm.slurm import args

    env = {**(os.environ if req.env is None else req.env), **req.knobs}
    settings = knobs.load(env)
    options = [*req.sbatch_options, *([f"--array={req.array}"] if req.array else [])]
    overrides = (device_overrides(env, req.script) if req.device_options is None
                 else list(req.device_options))  # fmt: skip
    job_dir = _chdir(options)
    if job_dir is not None:
        _check_job_dir(job_dir)
    outputs = paths.outputs_dir() if req.outputs is None else req.outputs
    # the runs, and the scripts' Slurm --output folder (relative to the job's working dir)
    runs = paths.torchft_runs_dir(outputs)
    folders = [LogDir(runs, outputs, _outputs_fix(settings))]
    if req.slurm_output_dir is not None:
        folders.insert(0, LogDir.under(
            job_dir or req.workdir or Path.cwd(), req.slurm_output_dir,
            "submit from a folder you can write to, or give one with --chdir"))  # fmt: skip
    for folder in folders:  # refused now, not once sbatch is about to run
        check_log_dir(folder)
    # the job writes its logs where `ftslurm logs/status/report` look, from any submit dir,
    # and runs this environment's interpreter
    job_env = {**req.knobs, "FTSLURM_OUTPUTS": str(outputs),
               "FTSLURM_PYTHON": paths.job_python(env)}  # fmt: skip
    if req.spares is not None:
        job_env["FT_SPARES"] = str(req.spares)
    spares = req.spares if req.spares is not None else settings.FT_SPARES
    check_spares(options, spares)
    _warn_split_brain(options, spares, settings, say)
    options, margin = _time_limit_signal(req, options, env, say)
    if margin is not None:  # the launcher logs it: Slurm does not tell the job
        job_env[knobs.TIME_LIMIT_SIGNAL] = str(margin)
    sent = _with_exports(overrides, options, {**env, **job_env}, req.script, say)
    is_array = any(o.startswith(("--array", "-a")) for o in options) or _array_in(req.script)
    return SbatchPlan(args.sbatch_cmd(req.script, sent, req.script_args), job_env, req.workdir,
                      folders, req.script, sent, list(req.script_args), is_array, outputs,
                      req.timeout, req.env)  # fmt: skip


def _with_exports(overrides: list[str], options: list[str], env: Mapping[str, str],
                  script: str, say: Say) -> list[str]:  # fmt: skip
    """The device options, then the user's (the last --export counts), with what the job
    needs from `env` (sbatch's) added to a restricting export (said with `say`): the
    outputs folder, the knobs set, and the device options' own `DEVICE=cpu`."""
    ours = [v for o in overrides if o.startswith("--export=")
            for v in o.split("=", 1)[1].split(",") if "=" in v]  # fmt: skip
    names = [*export_names(env), *ours]
    sent, added = export_also([*overrides, *options], names, env, script)
    if added:
        say(f"sbatch --export restricts the job's environment: also passing {', '.join(added)}")
    return sent


def run(p: SbatchPlan) -> Submitted:
    """Make the plan's folders, then run its sbatch (through the Slurm client)."""
    from ftslurm.slurm import client

    for folder in p.folders:
        _make_dir(folder)
    slurm = client.current(env=p.env, timeout=p.timeout or client.TIMEOUT_S)
    job_id = slurm.sbatch(p.script, p.options, p.script_args, cwd=p.cwd, extra_env=p.job_env)
    return Submitted(job_id, logvocab.run_dir(job_id, p.outputs) if p.is_array else None)


def submit(req: SubmitRequest, say: Say = _stderr) -> Submitted:
    """Check, make the log folders, submit: the job id and its log folder."""
    return run(plan(req, say))
