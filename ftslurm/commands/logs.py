"""`ftslurm logs`: replica logs (and the Lighthouse's) merged in time order; no Slurm call."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import click

from ftslurm.commands.params import ArrayJobId
from ftslurm.errors import UserError


@click.command("logs")
@click.option(
    "--job", "job_task", type=ArrayJobId(),
    help="Array job id of the run (42_1: replica 1 of job 42, as squeue shows it) [newest "
    "tft-* folder in outputs/torchft].",
)
@click.option(
    "--replica", "replicas", type=click.IntRange(min=0), multiple=True,
    help="Only this replica (repeat).",
)  # fmt: skip
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to stop).")
@click.option("-n", "lines", type=int, default=10, show_default=True,
              help="Last N lines each, at most 100000 (for more, read the log file itself).")
@click.option("--lighthouse", is_flag=True, help="Merge in the managed Lighthouse's log.")
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="A run folder (tft-<job>) instead of --job; another folder: the logs of --job in "
    "it, else of the newest job there.",
)
@click.option("--color/--no-color", default=None, help="Colour prefixes [on a terminal].")
def logs(
    job_task: tuple[int, int | None] | None,
    replicas: tuple[int, ...],
    follow: bool,
    lines: int,
    lighthouse: bool,
    run_dir: Path | None,
    color: bool | None,
) -> None:
    """Tail one or all replica logs of a run, merged by timestamp, each line prefixed with its
    replica. Reads only the end of each file; follows growth, new attempts of requeued tasks
    (appended to the same file) and replicas whose log appears later. Works from the login
    node on the shared filesystem. Control characters in the logs are shown escaped (ESC as
    \\x1b), colour codes dropped, lines over 1 MiB cut. Exit status 1 when a log could not be
    read (each one is named on stderr; the others are shown).

    \b
    Examples:
      ftslurm logs -n 20
      ftslurm logs --job 12 --replica 1 -f
      ftslurm logs -f --lighthouse
    """
    from ftslurm import logtail, logvocab, paths, stdout_pipe
    from ftslurm.run import model as run_model
    from ftslurm.textsafe import printable

    if lines < 0:
        raise UserError("-n must be >= 0")
    if lines > logtail.TAIL_MAX:
        raise UserError(f"-n {lines}: at most {logtail.TAIL_MAX} lines of each log (for more, "
                        "read the log itself: less outputs/torchft/tft-<job>/tft-<job>_<i>.out)")
    job = job_task[0] if job_task else None
    if job_task and job_task[1] is not None:
        replicas = (*replicas, job_task[1])
    runs = paths.torchft_runs_dir()
    if run_dir is None:
        if job is not None:
            run_dir = logvocab.run_dir(job)
        else:
            run_dir = logvocab.newest_run_dir(runs)
            if run_dir is None:
                raise UserError(f"no run folder (tft-*) under {runs}: pass --job or --run-dir")
    if not run_dir.is_dir():
        hint = "wrong --run-dir?" if job is None else "wrong --job?"
        if not follow:
            raise UserError(f"{run_dir} does not exist ({hint})")
        click.echo(f"note: {run_dir} does not exist yet ({hint}); waiting for it", err=True)
    selected = set(replicas) or None
    # one job for the whole run of the command: a folder may hold several jobs' logs (`.`, a
    # postmortem copy), and following must not switch jobs when another one's log grows
    chosen: list[str | None] = [str(job) if job is not None else None]
    several = run_model.job_logs(run_dir) if run_dir.is_dir() else {}
    if chosen[0] is None and len(several) > 1:
        chosen[0] = run_model.newest_job(several)
        others = ", ".join(sorted(j for j in several if j != chosen[0]))
        click.echo(printable(f"note: logs of several jobs in {run_dir}: showing job {chosen[0]}, "
                             f"the newest (also there: {others}; choose with --job)"), err=True)
    lh_log: Path | None = None
    if lighthouse:
        from ftslurm import lighthouse as lh

        lh_log = lh.log_path()
        if not lh_log.exists() and not follow:
            click.echo(f"note: no managed Lighthouse log at {lh_log}: replica logs only", err=True)

    def discover() -> dict[str, Path]:
        if chosen[0] is None:  # the first job whose logs appear
            chosen[0] = run_model.newest_job(run_model.job_logs(run_dir))
        found = run_model.replica_logs(run_dir, selected, chosen[0]) if chosen[0] else {}
        if lh_log is not None and lh_log.exists():
            found["lh"] = lh_log
        return found

    if not follow and not discover():
        jobs = run_model.job_logs(run_dir)
        if chosen[0] is not None and chosen[0] not in jobs and jobs:
            raise UserError(printable(f"no logs of job {chosen[0]} in {run_dir} (there: job "
                                      f"{', '.join(sorted(jobs))})"))
        have = sorted(run_model.replica_logs(run_dir, None, chosen[0]), key=lambda k: int(k[1:]))
        if selected and have:
            raise UserError(
                f"no log of replica {', '.join(map(str, sorted(selected)))} in {run_dir} "
                f"(there: {', '.join(have)})"
            )
        raise UserError(f"no replica logs in {run_dir}")
    _say_slots(run_dir)
    use_color = sys.stdout.isatty() if color is None else color
    width = max((len(k) for k in discover()), default=2)

    def unreadable(label: str, path: Path, error: OSError) -> None:
        what = f"replica {label[1:]}" if label.startswith("r") else "the Lighthouse"
        reason = error.strerror or str(error)
        click.echo(printable(f"Error: cannot read the log of {what}, {path} ({reason})"),
                   err=True)  # fmt: skip

    follower = logtail.Follower(discover, on_error=unreadable)

    def emit(entries: Iterable[logtail.Entry]) -> None:
        for e in entries:
            # what a log says is shown, never done: no raw escape reaches the terminal
            text = printable(e.text, tabs=True, colours=True)
            click.echo(logtail.prefix(e.label, width, use_color) + text, color=use_color)

    emit(follower.stream(lines))  # printed as read: memory is not the lines shown
    if follow:
        try:
            # like `tail -f`: stop when the reader of a pipe is gone, even if no line comes
            for e in follower.follow(stop=stdout_pipe.reader_gone):
                emit([e])
        except KeyboardInterrupt:
            pass
    if follower.failed:
        sys.exit(1)


def _say_slots(run_dir: Path) -> None:
    """A run with warm spares: the prefixes name array tasks (`r2`), and a task's log holds
    whichever replica it trained as; say which task holds which slot now and every claim."""
    from ftslurm.replica import slots
    from ftslurm.textsafe import printable

    root = slots.slots_dir(run_dir)
    held = slots.task_slots(root)
    if not held:
        return
    now = ", ".join(f"task {t}: {'spare' if s == 'spare' else 'slot ' + s}"
                    for t, s in sorted(held.items()))  # fmt: skip
    click.echo(printable(f"slots (replica = slot; r<N> = array task N): {now}; other tasks "
                         "are spares"), err=True)  # fmt: skip
    from ftslurm import status as st

    for line in st.claim_summary(slots.history(root, slots.slot_count(root))):
        click.echo(printable(line), err=True)
