"""`ftslurm submit [SBATCH OPTIONS] SCRIPT [ARGS]`: sbatch, with the log folder made first."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import click

from ftslurm import knobs, paths
from ftslurm.commands.params import Count, replicas
from ftslurm.errors import UserError
from ftslurm.resources import device_overrides

# getopt takes any unambiguous prefix of a long option: --exp, --expo, --expor, --export
_EXPORT_OPTION = re.compile(r"--exp(o(r(t)?)?)?$")
# knobs read on the nodes besides FTSLURM_*; passed by name under a restricting --export
LAUNCHER_KNOBS = tuple(k.name for k in knobs.public("job") if not k.name.startswith("FTSLURM_"))


def _export_on_command_line(options: list[str]) -> tuple[str | None, set[int]]:
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


def _last_directive(script: str, option: str) -> str | None:
    """The value of the last `#SBATCH <option>` of the script's header (`option`: a regex of
    the option's spellings)."""
    found = None
    for line in _directives(script):
        if m := re.match(rf"#SBATCH\s+{option}[=\s]\s*(\S+)", line):
            found = m.group(1)
    return found


def _export_in_script(script: str) -> str | None:
    """The last `#SBATCH --export=` of the script's header."""
    return _last_directive(script, r"--exp(?:o(?:r(?:t)?)?)?")


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
        value = (env or {}).get("SBATCH_EXPORT") or _export_in_script(script)
    items = [v for v in (value or "").split(",") if v]
    if value is None or any(v.upper() == "ALL" for v in items):
        return options, []
    kept = [v for v in items if v.upper() not in ("NONE", "NIL")]
    listed = {v.split("=", 1)[0] for v in kept}
    by_name = {n.split("=", 1)[0]: n for n in names}  # a later NAME=value wins over NAME
    added = [n for k, n in by_name.items() if k not in listed]
    rest = [o for i, o in enumerate(options) if i not in words]
    return [*rest, "--export=" + ",".join([*kept, *added])], added


def _with_exports(
    overrides: list[str], options: list[str], outputs: dict[str, str], script: str
) -> list[str]:
    """The device options, then the user's (the last --export counts), with what the job
    needs added to a restricting export (said on stderr): the outputs folder, the knobs set
    here, and the device options' own `DEVICE=cpu`."""
    ours = [v for o in overrides if o.startswith("--export=")
            for v in o.split("=", 1)[1].split(",") if "=" in v]  # fmt: skip
    names = [*export_names({**os.environ, **outputs}), *ours]
    sent, added = export_also([*overrides, *options], names, dict(os.environ), script)
    if added:
        click.echo("sbatch --export restricts the job's environment: also passing "
                   f"{', '.join(added)}", err=True)  # fmt: skip
    return sent


def export_names(env: Mapping[str, str]) -> list[str]:
    """What the job needs from this environment: FTSLURM_OUTPUTS and the knobs that are set."""
    ours = [k for k in env if k.startswith("FTSLURM_") and env[k]]
    return ["FTSLURM_OUTPUTS", *sorted(ours), *(k for k in LAUNCHER_KNOBS if env.get(k))]


def array_size(options: list[str]) -> int | None:
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


def _check_spares(options: list[str], spares: int) -> None:
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


def _warn_split_brain(options: list[str], spares: int) -> None:
    """`split_brain_warning` on stderr, for the managed Lighthouse when TORCHFT_LIGHTHOUSE
    names it (another Lighthouse's options are not known here); from its state file."""
    n = array_size(options)
    if n is None or not knobs.is_set(os.environ, "TORCHFT_LIGHTHOUSE"):
        return
    from ftslurm.lighthouse import lifecycle

    wanted = knobs.get(os.environ, "TORCHFT_LIGHTHOUSE").rstrip("/")
    st = lifecycle.status(probe=False)
    if not st.running or (st.address or "").rstrip("/") != wanted:
        return
    warning = split_brain_warning(n - spares, (st.config or {}).get("min_replicas"), wanted)
    if warning:
        click.echo(warning, err=True)


def _chdir(options: list[str]) -> Path | None:
    """The job's working directory given with --chdir / -D; None: this one (sbatch's
    default)."""
    found = _last_option(options, "--chdir", "-D")
    return Path(found).expanduser() if found else None


def _last_option(options: list[str], long: str, short: str) -> str | None:
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


# sbatch's --signal=[{R|B}:]<sig_num>[@sig_time]; sig_time defaults to 60 s
_SIGNAL_SPEC = re.compile(
    r"(?:(?P<flags>[RB]{1,2}):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<at>[0-9]{1,6}))?"
)
_USR1 = ("USR1", "SIGUSR1", "10")


def _signal_option(options: list[str]) -> str | None:
    """The value of the last `--signal=V` / `--signal V` among sbatch's options."""
    found = None
    for i, o in enumerate(options):
        if o.startswith("--signal="):
            found = o.split("=", 1)[1]
        elif o == "--signal" and i + 1 < len(options):
            found = options[i + 1]
    return found


def _signal_in_script(script: str) -> str | None:
    """The last `#SBATCH --signal` of the script's header."""
    return _last_directive(script, r"--signal")


def launcher_signal_margin(spec: str) -> int | None:
    """Seconds before the time limit at which `--signal=<spec>` reaches the launcher: it
    must be USR1 to the batch shell (`B:`), which the FT script replaced with the launcher;
    None for any other signal or target (the launcher then gets no warning)."""
    m = _SIGNAL_SPEC.fullmatch(spec.strip())
    if not m or "B" not in (m["flags"] or "") or m["sig"].upper() not in _USR1:
        return None
    return int(m["at"]) if m["at"] is not None else 60


def _time_limit_signal(ctx: click.Context, margin: int | None, options: list[str],
                       script: str) -> tuple[list[str], int | None]:  # fmt: skip
    """The sbatch options with `--signal=B:USR1@<margin>` added when asked for, and the
    margin the launcher will get (sbatch's order: the command line, $SBATCH_SIGNAL, the
    script's #SBATCH line), or None when no USR1 reaches it (said on stderr)."""
    from click.core import ParameterSource

    given = _signal_option(options)
    from_env = ctx.get_parameter_source("time_limit_signal") == ParameterSource.ENVIRONMENT
    if margin is not None and Path(script).name == paths.CLASSIC_SCRIPT:
        if from_env:  # a knob of the FT script's, exported for both
            return options, None
        raise UserError(f"--time-limit-signal is for {paths.FT_SCRIPT}: the classic job takes "
                        "no final checkpoint and would die of the signal")  # fmt: skip
    if margin is not None and given is not None and not from_env:
        raise UserError(f"--time-limit-signal {margin} and --signal={given}: give the margin "
                        f"once (--time-limit-signal {margin} is --signal=B:USR1@{margin})")
    if margin is not None and given is None:
        return [*options, f"--signal=B:USR1@{margin}"], margin
    spec = given or os.environ.get("SBATCH_SIGNAL") or _signal_in_script(script)
    if spec is None:
        return options, None
    found = launcher_signal_margin(spec)
    if found is None and Path(script).name == paths.FT_SCRIPT:
        click.echo(f"warning: --signal={spec} sends the batch shell (the launcher) no USR1: "
                   "at the time limit no final checkpoint is taken and nothing requeues; "
                   "use --time-limit-signal SECONDS (--signal=B:USR1@SECONDS)", err=True)
    return options, found


# sbatch reads #SBATCH lines only before the first command: a script may be large (a data
# blob after `exit`), its header never is
HEADER_MAX_BYTES = 1 << 20


def _directives(script: str) -> list[str]:
    """The script's header lines, from at most its first HEADER_MAX_BYTES."""
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


def _array_in(script: str) -> bool:
    """An `#SBATCH --array` / `-a` line in the script's header, when the command line has
    none."""
    return any(re.match(r"#SBATCH\s+(--array\b|-a)", line) for line in _directives(script))


def _check_job_dir(path: Path) -> None:
    """The job's working directory (--chdir) must be there: Slurm runs a job whose --chdir is
    missing in /tmp instead, and creating the log folder in it would make a mistyped path."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise UserError(f"--chdir {path} {what}: give the folder the job runs in")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"--chdir {path} is not writable: the job writes its logs there")


def _make_dir(path: Path, fix: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file in the way, no permission, read-only file system
        raise UserError(f"cannot create the log folder {path} ({e.strerror}): {fix}") from None


def _outputs_fix() -> str:
    """What to change when the outputs folder cannot be made: the variable, or its value."""
    set_to = os.environ.get("FTSLURM_OUTPUTS")
    if set_to:
        return f"FTSLURM_OUTPUTS={set_to} is set; point it at a folder you can write to"
    return "set FTSLURM_OUTPUTS to a folder you can write to"


def _script_index(argv: list[str]) -> int:
    """Where the script is in argv: the first argument that names an existing file (len(argv)
    when none does)."""
    return next(
        (i for i, a in enumerate(argv) if not a.startswith("-") and Path(a).is_file()), len(argv)
    )


def split_submit_args(argv: list[str]) -> tuple[list[str], str, list[str]]:
    """Everything before the first argument that names an existing file is an sbatch option;
    that file is the script; the rest are the script's arguments."""
    i = _script_index(argv)
    if i < len(argv):
        return argv[:i], argv[i], argv[i + 1 :]
    example = "ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh"
    named = [a for a in argv if not a.startswith("-")]
    if not named:
        raise UserError(f"no script given: {example}")
    raise UserError(
        f"no such script: {named[0]} (in {Path.cwd()}; sbatch options take the --opt=value "
        f"form): {example}"
    )


@click.command(
    # no `-h` here: click reads `-D/home/x` or `-pshort` as a cluster of one-letter flags, and
    # the `h` in it printed the help instead of submitting; a `-h` of its own is handled below
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                      "help_option_names": ["--help"]},
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print {job_id, log_dir} as JSON.")
@click.option(
    "--spares", type=replicas(0), default=None,
    help="Warm spares (FT_SPARES): of --array=0-<N-1+S>, the last S tasks wait warm and take "
    "a failed replica's slot [$FT_SPARES, else 0].",
)  # fmt: skip
@click.option(
    "--time-limit-signal", "time_limit_signal", metavar="SECONDS",
    type=Count(1, knobs.SIGNAL_MAX_S), envvar=knobs.TIME_LIMIT_SIGNAL, default=None,
    help="Seconds before the job's time limit at which Slurm signals the FT replicas (sbatch "
    "--signal=B:USR1@SECONDS): each finishes its step, saves a final checkpoint and requeues. "
    "It must cover a step and the save; Slurm may signal up to 60 s early. E.g. 600 "
    f"for a 10-minute warning  [${knobs.TIME_LIMIT_SIGNAL}, else 300: the FT script's "
    "#SBATCH --signal=B:USR1@300]",
)  # fmt: skip
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, as_json: bool, spares: int | None, time_limit_signal: int | None,
           argv: tuple[str, ...]) -> None:  # fmt: skip
    """Submit SCRIPT with sbatch, creating `outputs/torchft/` first.

    Options before SCRIPT go to sbatch unchanged (use the --opt=value form). Slurm does not
    create output directories, and a job whose output path is missing fails without requeue;
    this makes sure the scripts' log folder exists in the job's working directory (this one,
    or --chdir). The job gets
    FTSLURM_OUTPUTS (the outputs folder `ftslurm logs`/`status` read), so the replica logs
    land there from any submit directory, and FTSLURM_PYTHON (this interpreter, unless set),
    so the nodes run the environment that submitted. DEVICE=cpu (or
    FTSLURM_PRESET=debug_cpu) adds the sbatch options of a CPU node; the knobs (DEVICE,
    FTSLURM_PRESET, STEPS, TORCHFT_LIGHTHOUSE, ...) are checked before submitting.

    \b
    Examples:
      ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh
      ftslurm submit --nodes=2 llama3.1-8b-pretraining.sh
      DEVICE=cpu ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh   # local CPU
      ftslurm submit --spares 1 --array=0-2 llama3.1-8b-pretraining-torchft.sh  # 2 + 1 spare
      ftslurm submit --time-limit-signal 600 --array=0-1 llama3.1-8b-pretraining-torchft.sh
    """
    from ftslurm.slurm import client

    if "-h" in argv[: _script_index(list(argv))]:
        click.echo(ctx.get_help())
        return
    options, script, script_args = split_submit_args(list(argv))
    from ftslurm import logvocab

    overrides = device_overrides(dict(os.environ), script)
    job_dir = _chdir(options)
    if job_dir is not None:
        _check_job_dir(job_dir)
    # the scripts' Slurm --output folder (relative to the job's working dir) and the runs
    _make_dir(paths.torchft_runs_dir((job_dir or Path.cwd()) / "outputs"),
              "submit from a folder you can write to, or give one with --chdir")
    runs = paths.torchft_runs_dir()
    _make_dir(runs, _outputs_fix())
    # the job writes its logs where `ftslurm logs/status/report` look, from any submit dir,
    # and runs this environment's interpreter
    outputs = {"FTSLURM_OUTPUTS": str(paths.outputs_dir()), "FTSLURM_PYTHON": paths.job_python()}
    if spares is not None:
        outputs["FT_SPARES"] = str(spares)
    spare_count = spares if spares is not None else knobs.get(os.environ, "FT_SPARES")
    _check_spares(options, spare_count)
    _warn_split_brain(options, spare_count)
    options, margin = _time_limit_signal(ctx, time_limit_signal, options, script)
    if margin is not None:  # the launcher logs it: Slurm does not tell the job
        outputs[knobs.TIME_LIMIT_SIGNAL] = str(margin)
    sbatch_options = _with_exports(overrides, options, outputs, script)
    job_id = client.current().sbatch(script, sbatch_options, script_args, extra_env=outputs)
    is_array = any(o.startswith(("--array", "-a")) for o in options) or _array_in(script)
    log_dir = logvocab.run_dir(job_id) if is_array else None
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "log_dir": str(log_dir) if log_dir else None}))
        return
    click.echo(f"Submitted batch job {job_id}")
    if log_dir:
        click.echo(f"logs: {log_dir}/ (follow with: ftslurm logs --job {job_id} -f)", err=True)
