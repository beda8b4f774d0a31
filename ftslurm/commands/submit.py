"""`ftslurm submit [SBATCH OPTIONS] SCRIPT [ARGS]`: sbatch, with the log folder made first."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click

from ftslurm.errors import UserError


def device_overrides(env: dict[str, str], script: str = "") -> list[str]:
    """sbatch options implied by the device (DEVICE, or FTSLURM_PRESET=debug_cpu) that moves a
    job to CPU nodes. For this project's two scripts every knob is checked here as the
    launcher will check it on each node (the API does the same): a typo fails now, not after
    the queue wait."""
    from ftslurm import paths
    from ftslurm.replica import plan as planlib

    name = Path(script).name
    if name == paths.FT_SCRIPT:
        device = planlib.preflight_ft(env, paths.project_root()).device
    elif name == paths.CLASSIC_SCRIPT:
        device = planlib.preflight_classic(env, paths.project_root()).device
    else:
        device = env.get("DEVICE", "").strip().lower()
    return planlib.sbatch_device_options(device)


def export_also(options: list[str], names: list[str]) -> list[str]:
    """`options` with `names` added to a restricting `--export=` (NONE, or a list without ALL):
    sbatch passes the job only the variables listed there, and the job needs ours (their
    values come from sbatch's environment). `--export=ALL[,...]` or none: unchanged."""
    out = []
    for o in options:
        if o.startswith("--export="):
            items = [v for v in o.split("=", 1)[1].split(",") if v]
            if "ALL" not in (v.upper() for v in items):
                kept = [v for v in items if v.upper() != "NONE"]
                listed = {v.split("=", 1)[0] for v in kept}
                o = "--export=" + ",".join([*kept, *(n for n in names if n not in listed)])
        out.append(o)
    return out


def _job_dir(options: list[str]) -> Path:
    """The job's working directory: --chdir / -D if given, else this one (sbatch's default)."""
    found = None
    for i, o in enumerate(options):
        if o.startswith("--chdir="):
            found = o.split("=", 1)[1]
        elif o in ("--chdir", "-D") and i + 1 < len(options):
            found = options[i + 1]
        elif o.startswith("-D") and len(o) > 2:
            found = o[2:].lstrip("=")
    return Path(found).expanduser() if found else Path.cwd()


def _array_in(script: str) -> bool:
    """An `#SBATCH --array` / `-a` line in the script's header (sbatch reads #SBATCH lines
    only before the first command), when the command line has none."""
    try:
        lines = Path(script).read_text(errors="replace").splitlines()
    except OSError:
        return False
    for line in lines[1:]:
        if line.strip() and not line.lstrip().startswith("#"):
            return False  # the first command: sbatch stops reading directives here
        if re.match(r"#SBATCH\s+(--array\b|-a)", line):
            return True
    return False


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


def split_submit_args(argv: list[str]) -> tuple[list[str], str, list[str]]:
    """Everything before the first argument that names an existing file is an sbatch option;
    that file is the script; the rest are the script's arguments."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-") and Path(arg).is_file():
            return argv[:i], arg, argv[i + 1 :]
    example = "ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh"
    named = [a for a in argv if not a.startswith("-")]
    if not named:
        raise UserError(f"no script given: {example}")
    raise UserError(
        f"no such script: {named[0]} (in {Path.cwd()}; sbatch options take the --opt=value "
        f"form): {example}"
    )


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--json", "as_json", is_flag=True, help="Print {job_id, log_dir} as JSON.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def submit(as_json: bool, argv: tuple[str, ...]) -> None:
    """Submit SCRIPT with sbatch, creating `outputs/torchft/` first.

    Options before SCRIPT go to sbatch unchanged (use the --opt=value form). Slurm does not
    create output directories, and a job whose output path is missing fails without requeue;
    this makes sure the scripts' log folder exists in the job's working directory (this one,
    or --chdir). The job gets
    FTSLURM_OUTPUTS (the outputs folder `ftslurm logs`/`status` read), so the replica logs
    land there from any submit directory. DEVICE=cpu (or FTSLURM_PRESET=debug_cpu) adds the
    sbatch options of a CPU node; the knobs (DEVICE, FTSLURM_PRESET, STEPS, TORCHFT_LIGHTHOUSE,
    ...) are checked before submitting.

    \b
    Examples:
      ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh
      ftslurm submit --nodes=2 llama3.1-8b-pretraining.sh
      DEVICE=cpu ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh   # local CPU
    """
    from ftslurm.slurm import client

    options, script, script_args = split_submit_args(list(argv))
    from ftslurm import paths

    overrides = device_overrides(dict(os.environ), script)
    # the scripts' Slurm --output folder (relative to the job's working dir) and the runs
    _make_dir(_job_dir(options) / "outputs" / "torchft",
              "submit from a folder you can write to, or give one with --chdir")
    runs = paths.torchft_runs_dir()
    _make_dir(runs, _outputs_fix())
    # the job writes its logs where `ftslurm logs/status/report` look, from any submit dir
    outputs = {"FTSLURM_OUTPUTS": str(paths.outputs_dir())}
    options = export_also(options, list(outputs))
    job_id = client.sbatch(script, [*overrides, *options], script_args, extra_env=outputs)
    is_array = any(o.startswith(("--array", "-a")) for o in options) or _array_in(script)
    log_dir = runs / f"tft-{job_id}" if is_array else None
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "log_dir": str(log_dir) if log_dir else None}))
        return
    click.echo(f"Submitted batch job {job_id}")
    if log_dir:
        click.echo(f"logs: {log_dir}/ (follow with: ftslurm logs --job {job_id} -f)", err=True)
