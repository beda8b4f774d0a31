"""`ftslurm assets`: get the real tokenizer, or build tiny local assets for CPU runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ftslurm import paths


@click.group()
def assets() -> None:
    """Tokenizer and dataset files the training needs.

    \b
    Examples:
      ftslurm assets make-local                      # CPU runs: no network, a few seconds
      HF_TOKEN=hf_... ftslurm assets download        # GPU runs: the Llama-3.1-8B tokenizer
    """


def _refuse_token(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """`--token X` is refused, not taken: a command line is readable by every user of the
    machine (`ps`, /proc/<pid>/cmdline) for as long as the process runs."""
    if value is not None:
        raise click.UsageError(
            "--token is not taken: a token on the command line is visible to every user of "
            "this machine in `ps`; use HF_TOKEN=hf_... ftslurm assets download, or "
            "--token-file FILE (`-`: standard input)",
            ctx,
        )


@assets.command()
@click.option("--token", hidden=True, expose_value=False, is_eager=True, callback=_refuse_token)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    help="Read the Hugging Face token from this file (`-`: standard input). Never printed.",
)
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Target folder (default: assets/hf/Llama-3.1-8B of the checkout).",
)
def download(token_file: Path | None, dest: Path | None) -> None:
    """Download the Llama-3.1-8B tokenizer (gated: accept the licence on huggingface.co).
    The token: $HF_TOKEN, or --token-file FILE (`-` reads standard input).

    \b
    Examples:
      HF_TOKEN=hf_... ftslurm assets download --dest /shared/assets/hf/Llama-3.1-8B
      ftslurm assets download --token-file ~/.hf_token
    """
    from ftslurm.replica import assets as lib
    from ftslurm.replica.plan import hf_assets

    token = _read_token(token_file) if token_file else os.environ.get("HF_TOKEN")
    dest = dest or hf_assets(paths.project_root())
    files = lib.download_tokenizer(dest, token)
    for f in files:
        click.echo(f"downloaded {f}")


TOKEN_MAX = 4096  # a Hugging Face token is under 100 characters


def _read_token(path: Path) -> str:
    """The token in `path` (`-`: standard input), first line, stripped; never echoed."""
    try:
        if str(path) == "-":
            text = sys.stdin.readline(TOKEN_MAX + 1)
        else:
            with path.open(encoding="utf-8") as f:
                text = f.read(TOKEN_MAX + 1)
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or type(e).__name__
        raise click.UsageError(f"--token-file {path}: cannot read it ({why})") from None
    lines = text.strip().splitlines()
    if len(text) > TOKEN_MAX or not lines or not lines[0].strip():
        raise click.UsageError(f"--token-file {path}: expected one line holding the token")
    return lines[0].strip()


@assets.command("make-local")
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Target folder (default: assets/local of the checkout).",
)
def make_local(dest: Path | None) -> None:
    """Build a byte-level BPE tokenizer (vocab 2000) and a JSON-lines dataset from this
    Python's standard-library sources: no network, same files every time.

    \b
    Example:
      ftslurm assets make-local     # -> assets/local/{tokenizer,dataset}
    """
    from ftslurm.replica import assets as lib
    from ftslurm.replica.plan import local_assets

    base = dest or local_assets(paths.project_root())[0].parent
    tok, data = lib.make_local(base)
    click.echo(f"tokenizer: {tok}")
    click.echo(f"dataset:   {data}")
