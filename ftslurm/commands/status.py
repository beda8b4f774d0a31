"""`ftslurm status`: one row per replica of an FT job array, plus the Lighthouse's quorum."""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path

import click

from ftslurm.commands.params import ArrayJobId
from ftslurm.errors import UserError


@click.command("status")
@click.option(
    "--job", "job_task", type=ArrayJobId(),
    help="FT array job id (42, or 42_1 as squeue shows a task) [newest FT array of this user].",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of the replica logs [outputs/torchft/tft-<job>].",
)
@click.option("--no-lighthouse", is_flag=True, help="Do not ask the managed Lighthouse.")
@click.option("--all", "show_all", is_flag=True,
              help="One row per task however many, every spare's claim and every node taken "
              "out (by default a job of over 20 tasks shows its counts and only the tasks not "
              "training; claims are counted, with the newest 10 takeovers and node actions).")
def status(
    job_task: tuple[int, int | None] | None, as_json: bool, log_dir: Path | None,
    no_lighthouse: bool, show_all: bool,
) -> None:
    """One row per array task: replica, Slurm state and reason, node, restart count, the
    attempt, last step and loss in its log, and how long ago the log last changed; then the
    managed Lighthouse's current quorum when it runs, and the nodes the run's launchers
    drained or avoided (failed pre-flight check, FT_NODE_MAX_FAILS), with the undo command.
    A job of over 20 tasks shows its counts first, then only the tasks that are not training
    (not RUNNING, ranks down, log quiet, or not training for the Lighthouse), 20 at most.

    \b
    Examples:
      ftslurm status
      ftslurm status --job 12 --json
    """
    from ftslurm import status as st
    from ftslurm.failure_plan import is_ft_array_task, newest_ft_job
    from ftslurm.slurm import client, parse

    job = job_task[0] if job_task else None
    jobs = client.current().jobs()
    if job is None:
        job = newest_ft_job(jobs, getpass.getuser())
        if job is None:
            ft = [j.array_job_id for j in jobs if is_ft_array_task(j) and j.array_job_id]
            if not ft:
                raise UserError("no FT job array in squeue (job name tft_replica): pass --job ID")
            job = max(ft)
    tasks = parse.array_tasks(jobs, job)
    if not tasks:
        raise UserError(f"job {job} has no array tasks in squeue (finished long ago, or a typo?)")
    only = job_task[1] if job_task else None
    if only is not None:  # --job 42_1: that replica's row
        if only not in tasks:
            raise UserError(f"job {job} has no array task {only} in squeue (tasks: "
                            f"{', '.join(map(str, sorted(tasks)))})")
        tasks = {only: tasks[only]}
    if log_dir is not None and not log_dir.is_dir():
        raise UserError(f"--log-dir {log_dir}: no such folder")
    from ftslurm.run.model import Run

    run = Run.of(job, folder=log_dir)
    run_dir = run.folder
    if not run_dir.is_dir():
        click.echo(f"note: no logs in {run_dir} (pass --log-dir): no steps or losses", err=True)
    logs = run.summaries(tasks)
    from ftslurm.replica import slots

    slot_dir = slots.slots_dir(run_dir)
    task_slots = slots.task_slots(slot_dir)
    rows = [r for r in st.build_rows(jobs, job, logs, time.time(), task_slots)
            if r.replica in tasks]  # fmt: skip
    claims = slots.history(slot_dir, slots.slot_count(slot_dir)) if task_slots else []
    quorum, page = (None, None) if no_lighthouse else st.lighthouse_view()  # one read
    from ftslurm.replica.launcher import preflight

    taken_out = preflight.read_actions(run_dir)  # drained / avoided nodes, with the reason
    if as_json:
        out = st.to_json(job, rows, quorum, page)
        if claims:
            out["claims"] = [c.to_dict() for c in claims]
        out["bad_nodes"] = st.node_actions_json(taken_out)
        click.echo(json.dumps(out, indent=2, allow_nan=False))
    else:
        click.echo(st.render_table(job, rows, quorum, page, None if show_all else st.MAX_ROWS))
        limit = None if show_all else st.MAX_EVENTS
        for line in st.claim_summary(claims, limit) + st.node_action_lines(taken_out, limit):
            click.echo(line)
