"""`ftslurm submit [SBATCH OPTIONS] SCRIPT [ARGS]`: sbatch, with the log folder made first."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ftslurm.errors import UserError


def device_overrides(env: dict[str, str]) -> list[str]:
    """sbatch options implied by DEVICE (the one variable that moves a job to CPU nodes)."""
    from ftslurm.replica.plan import sbatch_device_options

    return sbatch_device_options(env.get("DEVICE", "").strip().lower())


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
    this makes sure the scripts' log folder exists in the submit directory.

    \b
    Examples:
      ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh
      ftslurm submit --nodes=2 llama3.1-8b-pretraining.sh
      DEVICE=cpu ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh   # local CPU
    """
    from ftslurm.slurm import client

    options, script, script_args = split_submit_args(list(argv))
    from ftslurm import paths

    # the scripts' Slurm --output folder (relative to the submit dir) and the run folders
    (Path.cwd() / "outputs" / "torchft").mkdir(parents=True, exist_ok=True)
    runs = paths.torchft_runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    job_id = client.sbatch(script, [*device_overrides(dict(os.environ)), *options], script_args)
    is_array = any(o.startswith(("--array", "-a")) for o in options)
    log_dir = runs / f"tft-{job_id}" if is_array else None
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "log_dir": str(log_dir) if log_dir else None}))
        return
    click.echo(f"Submitted batch job {job_id}")
    if log_dir:
        click.echo(f"logs: {log_dir}/ (follow with: ftslurm logs --job {job_id} -f)", err=True)
