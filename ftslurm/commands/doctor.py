"""`ftslurm doctor [--json] [--patches]`: check a cluster set-up; each problem with its fix
(or, with --patches, list the upstream attributes the training worker patches)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import click

from ftslurm import stdout_pipe


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option(
    "--patches", "list_patches", is_flag=True,
    help="Only list the torch/torchft/torchtitan attributes the training worker patches: "
    "owner, versions made for, upstream issue, switch, present here (exit 1 when one that "
    "is switched on is missing).",
)  # fmt: skip
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default=None,
    help="What the run will use [$DEVICE, else cuda].",
)
@click.option(
    "--lighthouse",
    metavar="URL",
    default=None,
    help="Lighthouse address to probe [$TORCHFT_LIGHTHOUSE, else http://login-0:29510].",
)
@click.option(
    "--assets",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Assets folder to look for the tokenizer in [<project>/assets, what the launcher uses].",
)
@click.option(
    "--replicas", type=click.IntRange(1), default=2, show_default=True,
    help="Replicas (= nodes) the run needs.",
)  # fmt: skip
def doctor(
    as_json: bool, list_patches: bool, device: str | None, lighthouse: str | None,
    assets: Path | None, replicas: int,
) -> None:  # fmt: skip
    """Check that an FT run can start here: each check passes, warns or fails, with the fix.

    \b
    Checks: Slurm client tools and the controller; partitions and idle nodes; GPUs per
    node (gres) vs the FT script's --gpus-per-task; the Lighthouse reached from a compute
    node (srun of a tiny HTTP probe); the tokenizer in assets/; Python packages vs
    requirements.txt; WANDB_API_KEY / HF_TOKEN (only "set" / "not set"); the shared
    filesystem (a file written here, read on a node); the replica addresses (the hostname
    and FQDN torchft advertises to other replicas resolve, IPv6 sockets work on a node).
    Exit code 1 when any check fails; exit code 2 with one line when torchtitan, torch or
    torchft is an unsupported build, or the managed Lighthouse runs another torchft.

    \b
    Examples:
      ftslurm doctor
      DEVICE=cpu TORCHFT_LIGHTHOUSE=http://login-0:29510 ftslurm doctor --json
      ftslurm doctor --replicas 4 --lighthouse http://login-0:29510
      ftslurm doctor --patches
    """
    from ftslurm import doctor as doc
    from ftslurm import versions
    from ftslurm.errors import UserError

    if list_patches:
        _patches(as_json, device)
        return

    if assets is not None:
        try:
            assets = assets.resolve()
        except (RuntimeError, OSError) as e:  # a symlink loop (OSError from Python 3.13)
            raise UserError(f"--assets {assets} is a symlink loop: give the assets folder") from e
    cfg = doc.DoctorConfig.from_env(
        dict(os.environ),
        device=device,
        lighthouse=lighthouse,
        lighthouse_from_env=True if lighthouse else None,
        assets=assets,
        replicas=replicas,
    )
    if cfg.device not in ("cuda", "cpu"):
        raise UserError(f"DEVICE={cfg.device!r} is not supported; use DEVICE=cuda or DEVICE=cpu")
    # an unsupported torchtitan / torch / torchft build fails deep in training: one line first
    problem = versions.stack_problem(versions.installed_versions(),
                                     doc.lighthouse_torchft_version())
    if problem:
        raise UserError(problem)
    checks = doc.run_checks(cfg)
    _answer(doc.ok(checks), as_json, lambda: doc.to_json(checks, cfg),
            lambda: doc.render_text(checks, cfg))  # fmt: skip


def _answer(ok: bool, as_json: bool, data: Callable[[], object],
            text: Callable[[], str]) -> None:  # fmt: skip
    """Print the JSON or the text; exit code 1 when not `ok` (also when a reader stops
    reading early: `doctor | head`)."""
    if not ok:
        stdout_pipe.exit_code_if_cut(1)
    click.echo(json.dumps(data(), indent=2) if as_json else text())
    if not ok:
        raise click.exceptions.Exit(1)


def _patches(as_json: bool, device: str | None) -> None:
    """`--patches`: the records, with the switches as this environment sets them."""
    from ftslurm import doctor as doc
    from ftslurm import knobs
    from ftslurm.replica import patches

    settings = knobs.load(dict(os.environ))
    device = device or settings.DEVICE
    rows = doc.patch_rows(patches.RECORDS, doc.observe_patches(), settings, device)
    _answer(doc.patches_ok(rows), as_json, lambda: doc.patches_json(rows, device),
            lambda: doc.render_patches(rows, device))  # fmt: skip
