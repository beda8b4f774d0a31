"""`ftslurm demo`: fault-tolerant training surviving node loss, on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ftslurm.commands.lighthouse import HeartbeatMs
from ftslurm.commands.params import knob_option, replicas, seconds
from ftslurm.failure_plan import MODES

if TYPE_CHECKING:
    from ftslurm.demo import DemoConfig


def default_spares(cfg: DemoConfig) -> int:
    """1 when a failure of the story takes a node down on Slurm, else 0: a lost node has no
    restart in place, so without a spare the replica waits for its node, Slurm's requeue
    and a cold start (15-18 s to full strength on 2 cores, against ~5 s with a warm spare:
    docs/benchmarks-cpu.md). Never with --all-fail, which takes every node down."""
    if cfg.all_fail or cfg.resolved_backend() != "slurm":
        return 0
    return int(any(cfg.mode(k) == "node-down" for k in range(cfg.failures)))


@click.command()
@click.option(
    "--replicas", "-n", type=int, default=2, show_default=True,
    help="Replicas (= nodes).",
)  # fmt: skip
@click.option(
    "--failures", "-k", type=int, default=None,
    help="Failures to inject.  [default: 2; 0 with --all-fail]",
)  # fmt: skip
@click.option(
    "--backend",
    type=click.Choice(["auto", "slurm", "local"]),
    default="auto",
    show_default=True,
    help="slurm: the real local Slurm cluster (Linux + root); local: replicas supervised by "
    "ftslurm without Slurm; auto: slurm where it can run, else local.",
)
@click.option(
    "--steps", type=int, default=10_000, show_default=True,
    help="Training steps per replica (the demo stops the job itself once the story is told).",
)  # fmt: skip
@click.option(
    "--down-for", type=seconds(), default=5.0, show_default=True,
    help="Seconds a failed replica stays down.",
)  # fmt: skip
@click.option(
    "--timeout", type=seconds(min_open=True), default=300.0, show_default=True,
    help="Seconds for each wait.",
)  # fmt: skip
@click.option("--no-plot", is_flag=True, help="Skip the PNG timeline.")
@click.option("--dry-run", is_flag=True, help="Print the plan; start nothing.")
@knob_option(
    "--spares", type=replicas(), default=None, knob="FT_SPARES",
    help="Warm spares (FT_SPARES): extra nodes that wait warm and take a failed replica's "
    "slot.  [default: 1 on Slurm when a node goes down (a lost node has no restart in "
    "place), else 0]",
)  # fmt: skip
@click.option(
    "--mode", "modes", type=click.Choice(MODES), multiple=True,
    help="How to fail a replica; repeat to cycle (--mode node-down --mode kill --mode requeue). "
    "kill SIGKILLs the training worker and the launcher requeues its task; requeue is "
    "`scontrol requeue`. The local backend can only kill.  [default: node-down on Slurm, kill "
    "on the local backend]",
)
@click.option(
    "--every", type=seconds(), default=0.0, show_default=True,
    help="Seconds from one failure to the next at least (a soak: -k 30 --every 60); 0: as "
    "soon as the replicas trained a few steps together.",
)
@knob_option(
    "--heartbeat-timeout-ms", type=HeartbeatMs(), default=None,
    knob="FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS",
    help="The Lighthouse's heartbeat timeout (detection time; see `ftslurm lighthouse start "
    "--help`)  [default: the Lighthouse's]",
)
@click.option(
    "--all-fail", is_flag=True,
    help="Then take every replica down at once after a model checkpoint (every node DOWN on "
    "Slurm): the array restarts and each replica resumes from the checkpoint, not step 1; "
    "the report lists the restarts and the steps lost.",
)
@click.option(
    "--ranks", type=click.IntRange(1, 8), default=1, show_default=True,
    help="Ranks per replica (GPUS_PER_NODE on CPU): torchrun starts them, the model is "
    "FSDP-sharded across them, torchft's Manager runs on each; a kill hits the last rank "
    "alone (simulate-failure --rank) and the replica comes back whole.",
)  # fmt: skip
def demo(
    replicas: int,
    failures: int | None,
    backend: str,
    steps: int,
    down_for: float,
    timeout: float,
    no_plot: bool,
    dry_run: bool,
    spares: int,
    modes: tuple[str, ...],
    every: float,
    heartbeat_timeout_ms: int | None,
    all_fail: bool,
    ranks: int,
) -> None:
    """Run the whole fault-tolerance story on this machine, with real parts.

    Starts a local Slurm cluster and the torchft Lighthouse, submits the FT sbatch script as
    an array (the tiny Llama-3 debug model on CPU) with one warm spare (the default a run
    that can lose a node should use), waits for the quorum, takes replica 1's node DOWN
    (with more replicas, replica 1, 2, ... in turn; replica 0 always survives), shows the
    survivors training alone while the spare claims the slot and heals from a peer, resumes
    the node, and waits until its task comes back as the spare; repeats --failures times;
    stops everything it started (also on Ctrl-C) and prints `ftslurm report` with a PNG
    timeline (the narration gives each failure's time to full strength). With --spares 0
    the failed replica waits for its node, Slurm's requeue and a cold start instead; a
    crash on a node that is fine (--mode kill) restarts in place, spare or not.
    Takes 1 to 2 minutes on 2 cores with 2 failures, 30 to 45 s more per extra failure;
    the first run as root adds Slurm's install.

    \b
    Examples:
      ftslurm demo                          # 2 replicas + 1 spare, 2 failures, Slurm if root
      ftslurm demo --spares 0               # no spare: Slurm requeues the replica
      ftslurm demo --backend local -k 1     # no Slurm needed
      ftslurm demo --all-fail               # every node at once: resume from a checkpoint
      ftslurm demo --ranks 2 --mode kill    # replicas of 2 ranks, one rank killed
      ftslurm demo -k 3 --mode kill --mode requeue --mode node-down
      ftslurm demo --dry-run
    """
    from ftslurm.demo import DemoConfig, plan_lines, run_demo

    if failures is None:
        failures = 0 if all_fail else 2
    cfg = DemoConfig(
        replicas=replicas, failures=failures, backend=backend, steps=steps,
        down_for=down_for, timeout=timeout, spares=spares or 0, modes=modes, every=every,
        heartbeat_timeout_ms=heartbeat_timeout_ms, all_fail=all_fail, ranks=ranks,
    )  # fmt: skip
    if spares is None:
        cfg.spares = default_spares(cfg)
    cfg.validate()  # also for --dry-run: a plan the real run would refuse is no plan
    if dry_run:
        for line in plan_lines(cfg):
            click.echo(line)
        return
    extra = f", {spares} warm spare(s)" if spares else ""
    extra += ", then every replica at once" if all_fail else ""
    click.echo(
        f"ftslurm demo: {replicas} replicas{extra}, {failures} failures, backend "
        f"{cfg.resolved_backend()}"
    )
    run_dir = run_demo(cfg, say=lambda m: click.echo(m, err=True))
    from ftslurm.report import build_report

    rep = build_report(str(run_dir))
    click.echo("")
    click.echo(rep.to_text(), nl=False)
    if not no_plot:
        png = rep.to_plot(str(run_dir / "report.png"))
        click.echo(f"timeline: {png}")
    click.echo(
        f"logs: {run_dir}/ (ftslurm logs --job {run_dir.name[4:]} | ftslurm report {run_dir})"
    )
