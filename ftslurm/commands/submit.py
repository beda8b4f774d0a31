"""`ftslurm submit [SBATCH OPTIONS] SCRIPT [ARGS]`: the command line of the submit service
(`ftslurm.submission`), which checks, makes the log folders and runs sbatch."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ftslurm import knobs
from ftslurm.commands.params import Count, knob_option, replicas
from ftslurm.errors import UserError

# the service's names that this command's users and tests know it by
from ftslurm.submission import LAUNCHER_KNOBS as LAUNCHER_KNOBS
from ftslurm.submission import array_size as array_size
from ftslurm.submission import export_also as export_also
from ftslurm.submission import export_names as export_names
from ftslurm.submission import launcher_signal_margin as launcher_signal_margin
from ftslurm.submission import split_brain_warning as split_brain_warning


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
@knob_option(
    "--time-limit-signal", "time_limit_signal", metavar="SECONDS",
    type=Count(1, knobs.SIGNAL_MAX_S), knob=knobs.TIME_LIMIT_SIGNAL, default=None,
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
    from click.core import ParameterSource

    from ftslurm import submission

    if "-h" in argv[: _script_index(list(argv))]:
        click.echo(ctx.get_help())
        return
    options, script, script_args = split_submit_args(list(argv))
    from_env = ctx.get_parameter_source("time_limit_signal") == ParameterSource.ENVIRONMENT
    request = submission.SubmitRequest(
        script, options, script_args, spares=spares, time_limit_signal=time_limit_signal,
        time_limit_signal_from_env=from_env,
    )  # fmt: skip
    done = submission.submit(request, say=lambda line: click.echo(line, err=True))
    log_dir = done.log_dir
    if as_json:
        shown = str(log_dir) if log_dir else None
        click.echo(json.dumps({"job_id": done.job_id, "log_dir": shown}))
        return
    click.echo(f"Submitted batch job {done.job_id}")
    if log_dir:
        click.echo(f"logs: {log_dir}/ (follow with: ftslurm logs --job {done.job_id} -f)", err=True)
