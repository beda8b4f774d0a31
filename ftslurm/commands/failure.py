"""`ftslurm simulate-failure`: node-down / kill / requeue / hang / stall / freeze-node one
replica, or chaos, guarded."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import click

from ftslurm.commands.params import ArrayJobId, seconds
from ftslurm.errors import UserError


def _resolve(replica, node, job, mode, down_for, reason, force, rank=None):
    """Slurm look-ups + safety checks + plan (what both a single failure and chaos use).
    `rank`: kill mode hits only that rank's worker of the replica."""
    import dataclasses

    from ftslurm import failure, failure_plan
    from ftslurm.slurm import client

    slurm = client.current()
    target = failure_plan.resolve_target(
        slurm.jobs(),
        slurm.nodes(),
        replica=replica,
        node=node,
        job=job,
        here=failure.hostname(),
        user=getpass.getuser(),
        force=force,
    )
    if rank is not None:
        target = dataclasses.replace(target, rank=rank)
    return failure_plan.make_plan(mode, target, down_for=down_for, reason=reason,
                                  kill=failure.selection(mode, target))  # fmt: skip


def _say_to(as_json: bool):
    """Where the text goes: stdout, or stderr with --json (stdout then holds only JSON)."""
    return lambda line: click.echo(line, err=as_json)


def _print_plan(plan, dry_run: bool, as_json: bool = False, noun: str = "replica") -> None:
    """The plan as text, or with --json: the text on stderr, and for a dry run the plan as
    one JSON object on stdout (stdout then holds only JSON, for scripts)."""
    if as_json and dry_run:
        click.echo(json.dumps({**plan.to_dict(), "dry_run": True}))
        return
    click.echo(f"# target: {plan.target.describe(noun)}, mode {plan.mode}", err=as_json)
    for line in plan.lines():
        click.echo(line, err=as_json)
    if dry_run:
        click.echo("# dry run: nothing was run")


def _modes(ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    """--mode: one of failure_plan.MODES, or with --chaos a comma list of them."""
    from ftslurm.failure_plan import MODES

    modes = tuple(m.strip() for m in value.split(","))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise click.BadParameter(f"{', '.join(bad) or value!r}: use one of {', '.join(MODES)}")
    return modes


@click.command("simulate-failure")
@click.option(
    "--replica", type=click.IntRange(min=0), help="Array task index of the FT job to hit."
)
@click.option("--node", help="Node to hit (instead of --replica).")
@click.option(
    "--rank", type=click.IntRange(min=0),
    help="With --mode kill: SIGKILL only this rank's worker of the replica (its RANK, as "
    "torchft's `/<rank>` and the checksum lines say it); torchrun then ends the replica's "
    "other ranks and the launcher brings the whole replica back.",
)  # fmt: skip
@click.option(
    "--job", "job_task", type=ArrayJobId(),
    help="FT array job id; 42_1 as squeue shows a task = --job 42 --replica 1 [newest "
    "running FT array of this user].",
)  # fmt: skip
@click.option(
    "--mode",
    callback=_modes,
    default="node-down",
    show_default=True,
    help="node-down: scontrol DOWN, wait, RESUME; kill: SIGKILL the training worker "
    "(the FT launcher requeues its task; on a cluster through `srun --overlap` + pkill on "
    "the node, on the local cluster by pid unless FTSLURM_KILL_VIA=srun); requeue: "
    "scontrol requeue <job>_<task>; hang: SIGSTOP the training worker(s) (a GPU or NCCL "
    "hang: no socket closes; the launcher's watchdog ends them), wait, SIGCONT; stall: "
    "stop only the main thread of each training worker with ptrace, wait, let it go: its "
    "other threads, torchft's heartbeat to the Lighthouse among them, run on (a CUDA kernel "
    "or NCCL call that never returns; ptrace needs kernel.yama.ptrace_scope <= 1 with "
    "CAP_SYS_PTRACE, i.e. root on the worker's node, or ptrace_scope 0 as the workers' "
    "user; on a cluster it runs `python -m ftslurm.stall` on the node through `srun "
    "--overlap`); freeze-node (local cluster): SIGSTOP every process of the node, slurmd "
    "included (a power loss or kernel hang: Slurm stops hearing from it), wait, SIGCONT. "
    "With --chaos a comma list, used in turn (kill,hang,freeze-node).",
)
@click.option("--down-for", type=seconds(), default=30.0, show_default=True,
              help="Seconds DOWN (node-down) or stopped (hang, stall, freeze-node).")  # fmt: skip
@click.option("--reason", help="Reason= for the DOWN node [ftslurm simulate-failure ...].")
@click.option("--dry-run", is_flag=True, help="Print the exact commands, run nothing.")
@click.option("--wait-recovered", is_flag=True, help="Wait until the task runs again; time it.")
@click.option(
    "--timeout", type=seconds(min_open=True), default=300.0, show_default=True,
    help="For recovery.",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Allow a node that runs no task of the job.")
@click.option("--chaos", is_flag=True, help="Repeated failures on random running replicas.")
@click.option("--every", type=seconds(min_open=True), help="Chaos: seconds between failures.")
@click.option(
    "--count", type=click.IntRange(min=1), default=3, show_default=True, help="Chaos: failures."
)
@click.option("--seed", type=int, help="Chaos: random seed (repeatable choice of replicas).")
@click.option(
    "--events",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Event log (JSON lines) [$FTSLURM_EVENTS or outputs/events.jsonl].",
)
@click.option(
    "--json", "as_json", is_flag=True,
    help="stdout: one JSON object (the outcome; with --dry-run the plan), text on stderr.",
)  # fmt: skip
@click.option(
    "--count-as-bad", is_flag=True,
    help="The FT launcher holds this failure against the node (FT_NODE_MAX_FAILS: it may "
    "drain it) and the replica's rate cap; by default an injected failure counts for neither.",
)  # fmt: skip
@click.pass_context
def simulate_failure(
    ctx: click.Context,
    replica: int | None,
    node: str | None,
    rank: int | None,
    job_task: tuple[int, int | None] | None,
    mode: tuple[str, ...],
    down_for: float,
    reason: str | None,
    dry_run: bool,
    wait_recovered: bool,
    timeout: float,
    force: bool,
    chaos: bool,
    every: float | None,
    count: int,
    seed: int | None,
    events: Path | None,
    as_json: bool,
    count_as_bad: bool,
) -> None:
    """Inject a failure into a replica of a running FT job array, and undo it.

    The node is always RESUMEd, also on Ctrl-C, kill, a closed terminal or an error; if every
    RESUME fails, it says which node is still DOWN and how to fix it, and exits 1. Every
    action is appended to the event log that `ftslurm report` reads. `scontrol update` needs
    root: run with sudo. Refused: nodes not in the cluster, login nodes, the node this runs
    on, and (without --force) nodes that run no task of the job.

    \b
    Examples:
      sudo ftslurm simulate-failure --replica 1 --down-for 30 --wait-recovered
      ftslurm simulate-failure --replica 1 --dry-run
      ftslurm simulate-failure --replica 0 --mode kill --wait-recovered
      ftslurm simulate-failure --replica 1 --mode kill --rank 1
      ftslurm simulate-failure --node worker-1 --mode requeue --job 12
      sudo ftslurm simulate-failure --replica 1 --mode hang --down-for 20
      sudo ftslurm simulate-failure --replica 1 --mode stall --down-for 60
      sudo ftslurm simulate-failure --chaos --every 60 --count 5 --seed 1 --down-for 20
      sudo ftslurm simulate-failure --chaos --every 60 --count 6 --mode kill,hang,freeze-node
    """
    from ftslurm import failure

    job, task = job_task if job_task else (None, None)
    if task is not None:
        if node is not None or (replica is not None and replica != task) or chaos:
            raise UserError(f"--job {job}_{task} names replica {task}: drop --replica / "
                            f"--node / --chaos, or pass --job {job}")
        replica = task
    if chaos and (replica is not None or node is not None):
        raise UserError("--chaos picks the replicas itself: drop --replica / --node")
    given = [f"--{n}" for n in ("every", "count", "seed")
             if ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT)]
    if not chaos and given:
        raise UserError(f"{' '.join(given)}: only with --chaos")
    if chaos and count_as_bad:
        raise UserError("--count-as-bad: only for one failure, not with --chaos")
    if rank is not None and (chaos or mode != ("kill",)):
        raise UserError(f"--rank {rank}: only with --mode kill, for one failure (not with "
                        "--chaos)")  # fmt: skip
    if chaos:
        _chaos(
            ctx, job, mode, down_for, reason, every, count, seed, events, dry_run, force, as_json
        )
        return
    if len(mode) > 1:
        raise UserError(f"--mode {','.join(mode)}: a list of modes only with --chaos")
    plan = _resolve(replica, node, job, mode[0], down_for, reason, force, rank)
    role = _slot_role(plan.target.job, plan.target.replica)
    # with warm spares, array task i need not be replica i: say task, and the role says which
    noun = "replica" if role is None else "array task"
    _print_plan(plan, dry_run, as_json, noun)
    if role is not None:
        _say_to(as_json)(f"# task {plan.target.replica}: {role}")
    if dry_run:
        return

    say = _say_to(as_json)

    try:
        out = failure.execute(
            plan, wait_recovered=wait_recovered, timeout=timeout, say=say, events_path=events,
            count_as_bad=count_as_bad,
        )
    except failure.Interrupted as e:
        click.echo(f"Interrupted ({e}): every node this run took down was RESUMEd.", err=True)
        ctx.exit(128 + e.signum)  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
        return
    if out.recovered:
        how = ("restarted in place by its launcher" if out.in_place
               else f"restart count {out.restarts}")
        say(f"{noun} {plan.target.replica} RUNNING again on {out.new_node} ({how})")
        say("timeline (at: since the start; took: since the previous line):")
        for p in out.phases:
            say(f"  at {p.at_s:6.1f} s  took {p.took_s:6.1f} s  {p.name}")
        total = out.phases[-1].at_s if out.phases else 0.0
        say(f"recovered {total:.1f} s after the failure was injected")
    if as_json:
        click.echo(json.dumps({**out.to_dict(), **({"role": role} if role else {})}))


def _slot_role(job: int | None, task: int | None) -> str | None:
    """In a run with warm spares: what the task is (slots.py), else None."""
    from ftslurm.failure import slot_of

    what = slot_of(job, task)
    if what is None:
        return None
    if what == "spare":
        return ("a warm spare (holds no slot): the replicas train on at full strength; "
                "it comes back as a spare")  # fmt: skip
    return f"holds slot {what} (replica {what}): a warm spare takes the slot over"


def _live_from_logs(job: int, say):
    """Replicas whose current attempt trains (has committed), read from the tails of their
    logs; None (Slurm's RUNNING only) when the logs are not where this process looks."""
    from ftslurm import logvocab
    from ftslurm import status as st

    run_dir = logvocab.run_dir(job)
    if not run_dir.is_dir():
        say(f"note: no logs in {run_dir}: live = RUNNING in Slurm")
        return None

    def live(tasks) -> set[int]:
        summaries = {i: st.read_summary(logvocab.replica_log(job, i), 64 * 1024) for i in tasks}
        return {i for i, s in summaries.items() if s.training}

    return live


def _chaos(
    ctx, job, mode, down_for, reason, every, count, seed, events, dry_run, force, as_json
):
    from ftslurm import failure, failure_plan
    from ftslurm.slurm import client

    say = _say_to(as_json)

    if every is None:
        raise UserError("--chaos needs --every SECONDS (> 0)")
    if job is None:
        job = failure_plan.ft_job(client.current().jobs(), getpass.getuser())
    from ftslurm.failure_modes import MODES

    if any(MODES[m].timed for m in mode) and down_for >= every:
        say(f"note: --down-for {down_for:g} >= --every {every:g}: events run back to back")
    made = [0]

    def make(replica: int):
        chosen = mode[made[0] % len(mode)]  # the modes in turn
        made[0] += 1
        return _resolve(replica, None, job, chosen, down_for, reason, force)

    say(
        f"chaos on job {job}: {count} x {','.join(mode)} every {every:g} s"
        + (f", seed {seed}" if seed is not None else "")
    )
    if dry_run:
        import random

        pick = failure_plan.chaos_pick(client.current().array_tasks(job), random.Random(seed))
        if pick is None:
            say("# fewer than 2 replicas running: every event would be skipped")
            if as_json:
                click.echo(json.dumps({"dry_run": True, "job": job, "first": None}))
        elif as_json:  # the first event's plan (later ones pick again at their time)
            click.echo(json.dumps({"dry_run": True, "job": job, "first": make(pick).to_dict()}))
        else:
            _print_plan(make(pick), True)
        return
    summary = failure.run_chaos(
        job,
        every=every,
        count=count,
        seed=seed,
        make=make,
        say=say,
        events_path=events,
        live=_live_from_logs(job, say),
        wait_live=max(every, 60.0),
    )
    say(failure.chaos_summary_line(summary))
    if as_json:
        click.echo(json.dumps({"job": job, **summary.to_dict()}))
    if summary.signum is not None:
        ctx.exit(128 + summary.signum)
