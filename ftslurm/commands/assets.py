"""`ftslurm assets`: get the real tokenizer, or build tiny local assets for CPU runs."""

from __future__ import annotations

import os
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


@assets.command()
@click.option(
    "--token",
    default=None,
    help="Hugging Face token. Prefer $HF_TOKEN: a token on the command line is visible to every "
    "user of this machine in `ps` while the download runs. Never printed.",
)
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Target folder (default: assets/hf/Llama-3.1-8B of the checkout).",
)
def download(token: str | None, dest: Path | None) -> None:
    """Download the Llama-3.1-8B tokenizer (gated: accept the licence on huggingface.co).

    \b
    Example:
      HF_TOKEN=hf_... ftslurm assets download --dest /shared/assets/hf/Llama-3.1-8B
    """
    from ftslurm.replica import assets as lib
    from ftslurm.replica.plan import hf_assets

    if token:
        click.echo(
            "warning: --token is visible to every user of this machine in `ps`; "
            "next time: HF_TOKEN=hf_... ftslurm assets download",
            err=True,
        )
    dest = dest or hf_assets(paths.project_root())
    files = lib.download_tokenizer(dest, token or os.environ.get("HF_TOKEN"))
    for f in files:
        click.echo(f"downloaded {f}")


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
