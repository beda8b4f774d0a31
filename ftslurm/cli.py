"""The `ftslurm` command line: a thin click layer.

Sub-commands are imported lazily (only the one that runs is imported) so `ftslurm --help`
stays fast and never imports torch. Each command lives in `ftslurm/commands/<name>.py`.
Library code raises `UserError` / `CommandError`; `main` turns them into a one-line message
and a non-zero exit code (2 for user mistakes), never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from ftslurm import __version__, stdout_pipe
from ftslurm.errors import UserError

# name -> (module:attribute, one-line help shown by `ftslurm --help` without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "cluster": (
        "ftslurm.commands.cluster:cluster",
        "Start/stop a real Slurm cluster on this machine.",
    ),
    "submit": (
        "ftslurm.commands.submit:submit",
        "Submit an sbatch script (creates its log folder first).",
    ),
    "lighthouse": (
        "ftslurm.commands.lighthouse:lighthouse",
        "Run torchft's Lighthouse as a managed daemon.",
    ),
    "simulate-failure": (
        "ftslurm.commands.failure:simulate_failure",
        "Break a replica (node down, kill, requeue); it heals.",
    ),
    "status": ("ftslurm.commands.status:status", "One row per replica of an FT job array."),
    "logs": ("ftslurm.commands.logs:logs", "Tail replica logs merged in time order."),
    "report": (
        "ftslurm.commands.report:report",
        "Timeline of quorum changes, failures, recoveries.",
    ),
    "metrics": ("ftslurm.commands.metrics:metrics", "Serve Prometheus metrics of a run."),
    "demo": ("ftslurm.commands.demo:demo", "The whole fault-tolerance story on this machine."),
    "doctor": (
        "ftslurm.commands.doctor:doctor",
        "Check a cluster set-up; each problem with its fix.",
    ),
    "assets": (
        "ftslurm.commands.assets:assets",
        "Download the tokenizer / make tiny local assets.",
    ),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        if ctx.resilient_parsing or _listing_help():
            # `ftslurm --help`: show the short help without importing the module.
            return click.Command(cmd_name, help=COMMANDS[cmd_name][1])
        module_name, attr = COMMANDS[cmd_name][0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    # Both wrapped before click's own EPIPE handling (which exits 1), see ftslurm.stdout_pipe:
    # `ftslurm --help` prints from make_context, every sub-command from invoke.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _quiet_exit_if_reader_gone():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _quiet_exit_if_reader_gone():
            return super().invoke(ctx)


@contextlib.contextmanager
def _quiet_exit_if_reader_gone() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        if not stdout_pipe.reader_gone():
            raise
        stdout_pipe.detach()
        raise click.exceptions.Exit(stdout_pipe.code_if_cut()) from None


def _command_path(args: list[str]) -> str:
    """`ftslurm lighthouse start` for `ftslurm lighthouse start --bind`: click raises "Option
    '--bind' requires an argument" without a context, so the help to name is found here."""
    cmd: click.Command = cli
    path = [click.utils._detect_program_name()]  # as click names it: `python -m ftslurm`
    for arg in args:
        if not isinstance(cmd, click.Group) or arg.startswith("-"):
            break
        sub = cmd.get_command(click.Context(cmd), arg)
        if sub is None:
            break
        cmd = sub
        path.append(arg)
    return " ".join(path)


def _listing_help() -> bool:
    args = sys.argv[1:]
    return bool(args) and args[0] in ("--help", "-h")


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="ftslurm")
def cli() -> None:
    """Fault-tolerant torchtitan + torchft training on Slurm.

    \b
    Typical session on a login node:
      ftslurm lighthouse start               # prints TORCHFT_LIGHTHOUSE=...
      ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh
      ftslurm status                         # one row per replica
      sudo ftslurm simulate-failure --replica 1 --down-for 30 --wait-recovered
      ftslurm report outputs/torchft/tft-<job>  # the timeline

    On one machine without a GPU cluster: `ftslurm demo`.
    """


def main() -> None:
    """Console-script entry point: user errors end in one line and exit code 2; output
    piped into a reader that stops early (`| head`) ends quietly with 0."""
    from ftslurm.runner import CommandError
    from ftslurm.textsafe import printable

    try:
        # standalone_mode=False returns (not raises) the code of ctx.exit(n)
        code = cli.main(standalone_mode=False) or 0
        with _quiet_exit_if_reader_gone():
            sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe is noise
        sys.exit(code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `ftslurm lighthouse`: its help, as click
            e.show()
            sys.exit(2)
        # one line (click prints three: usage, a hint, the error), naming where help is
        where = e.ctx.command_path if e.ctx is not None else _command_path(sys.argv[1:])
        msg = e.format_message()
        sep = " " if msg.endswith((".", "?", "!")) else ". "
        click.echo(f"Error: {printable(msg)}{sep}See `{where} --help`.", err=True)
        sys.exit(2)
    except click.ClickException as e:
        e.show()
        sys.exit(2 if e.exit_code in (1, 2) else e.exit_code)
    except UserError as e:
        # a message may quote a file name, a log line or a state file's text: shown, not done
        click.echo(f"Error: {printable(str(e), newlines=True)}", err=True)
        sys.exit(e.exit_code)
    except CommandError as e:
        click.echo(f"Error: {printable(e.one_line(), newlines=True)}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
