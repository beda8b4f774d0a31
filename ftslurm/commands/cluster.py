"""`ftslurm cluster up|down|status|env`: a real Slurm on this machine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from ftslurm import paths, stdout_pipe
from ftslurm.commands.params import seconds


def _state_dir(value: str | None) -> Path:
    return Path(value).resolve() if value else paths.cluster_dir()


STATE_DIR_OPT = click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Cluster state directory [default: outputs/cluster, or $FTSLURM_CLUSTER_DIR].",
)


@click.group()
def cluster() -> None:
    """A real Slurm cluster on this machine (Debian slurm-wlm + munge).

    One slurmctld and N slurmd nodes named worker-0..N-1, each in its own namespace so
    `hostname` in a job is its node name; `login-0` resolves to this machine inside jobs.
    Needs root. Example:

    \b
      sudo ftslurm cluster up --nodes 2
      eval "$(ftslurm cluster env)"; sinfo
      sudo ftslurm cluster down
    """


@cluster.command()
@click.option("--nodes", "-n", default=2, show_default=True, help="Number of worker nodes.")
@click.option(
    "--no-install", is_flag=True, help="Fail instead of installing missing Debian packages."
)
@click.option(
    "--timeout", type=seconds(min_open=True), default=30.0, show_default=True,
    help="Seconds to wait for idle nodes.",
)  # fmt: skip
@STATE_DIR_OPT
def up(nodes: int, no_install: bool, timeout: float, state_dir: str | None) -> None:
    """Start the cluster (idempotent) and wait until every node is idle. Installs
    slurm-wlm and munge with apt-get when missing (unless --no-install). A running cluster
    with another --nodes is restarted, unless jobs are queued or running on it.

    \b
    Example:
      sudo ftslurm cluster up --nodes 3      # prints the export SLURM_CONF=... line
      eval "$(ftslurm cluster env)"; sinfo
    """
    from ftslurm.cluster import local

    t0 = time.monotonic()
    spec = local.up(
        nodes=nodes,
        state_dir=_state_dir(state_dir),
        progress=lambda m: click.echo(m, err=True),
        timeout=timeout,
        install=not no_install,
    )
    click.echo(f"ready in {time.monotonic() - t0:.1f} s; use it with:", err=True)
    click.echo(f"export SLURM_CONF={spec.conf_path}")


@cluster.command()
@STATE_DIR_OPT
def down(state_dir: str | None) -> None:
    """Stop the cluster's daemons and node namespaces, by pid (idempotent).

    \b
    Example:
      sudo ftslurm cluster down
    """
    from ftslurm.cluster import local

    local.down(_state_dir(state_dir), progress=lambda m: click.echo(m, err=True))


@cluster.command()
@STATE_DIR_OPT
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(state_dir: str | None, as_json: bool) -> None:
    """Is the cluster running, and the state of each node. Exit code 3 when it is not
    running (as `ftslurm lighthouse status`), so scripts can test it.

    \b
    Examples:
      ftslurm cluster status
      ftslurm cluster status --json | jq .nodes
      ftslurm cluster status >/dev/null || sudo ftslurm cluster up
    """
    from ftslurm.cluster import local

    st = local.status(_state_dir(state_dir), warn=lambda m: click.echo(m, err=True))
    if not st.running:
        stdout_pipe.exit_code_if_cut(3)
    if as_json:
        click.echo(json.dumps(st.__dict__, indent=2))
    else:
        click.echo(f"cluster: {'running' if st.running else 'not running'} ({st.state_dir})")
        for node, state in st.nodes.items():
            click.echo(f"  {node:<12} {state}")
    if not st.running:
        sys.exit(3)  # not click.Exit: cli.main (standalone_mode=False) drops its code


@cluster.command()
@STATE_DIR_OPT
def env(state_dir: str | None) -> None:
    """Print the `export SLURM_CONF=...` line of the running local cluster.

    \b
    Example:
      eval "$(ftslurm cluster env)"; sinfo
    """
    from ftslurm.cluster import local
    from ftslurm.errors import UserError

    spec = local.load_spec(_state_dir(state_dir))
    if spec is None:
        raise UserError("no local cluster here: start one with `sudo ftslurm cluster up`")
    click.echo(f"export SLURM_CONF={spec.conf_path}")
