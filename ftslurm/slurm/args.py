"""Pure builders of Slurm command lines (argument lists; printable as a dry run). The output of
each has one parser in `parse` (e.g. sinfo_rows_cmd: parse_sinfo_rows)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ftslurm.errors import UserError


def sbatch_cmd(
    script: str, sbatch_options: Sequence[str] = (), script_args: Sequence[str] = ()
) -> list[str]:
    """`sbatch --parsable [options] script [args]`: --parsable prints `<jobid>[;cluster]`."""
    return ["sbatch", "--parsable", *sbatch_options, script, *script_args]


def node_update_cmd(node: str, state: str, reason: str | None = None) -> list[str]:
    """`scontrol update NodeName=... State=DOWN|RESUME [Reason=...]` (DOWN needs a reason)."""
    cmd = ["scontrol", "update", f"NodeName={node}", f"State={state}"]
    if reason:
        cmd.append(f"Reason={reason}")
    return cmd


def requeue_cmd(job: str) -> list[str]:
    """`scontrol requeue <job>` where job is `<array_job>_<task>` for one array task."""
    return ["scontrol", "requeue", job]


def requeue_hold_cmd(job: str) -> list[str]:
    """`scontrol requeuehold <job>`: requeued and held, so its ExcNodeList can change before it
    is eligible again (`release_cmd`)."""
    return ["scontrol", "requeuehold", job]


def exclude_nodes_cmd(job: str, nodes: Sequence[str]) -> list[str]:
    """`scontrol update JobId=<job> ExcNodeList=<a,b>`: a pending job never starts there."""
    return ["scontrol", "update", f"JobId={job}", f"ExcNodeList={','.join(nodes)}"]


def release_cmd(job: str) -> list[str]:
    return ["scontrol", "release", job]


def sinfo_reasons_cmd() -> list[str]:
    """One line per node: name, state, Reason= and the time it was set (`%H`)."""
    return ["sinfo", "-h", "-N", "-o", "%N|%T|%H|%E"]


def show_job_cmd(job: str | None = None) -> list[str]:
    return ["scontrol", "show", "job", *([job] if job else [])]


def squeue_json_cmd() -> list[str]:
    # -j/-t are ignored with --json on 22.05: callers filter.
    return ["squeue", "--json"]


def squeue_text_cmd(fmt: str, jobs: str | None = None) -> list[str]:
    # -r: one line per array task (without it pending tasks come as one `21_[2-3]` line)
    return ["squeue", "-r", "-h", "-t", "all", "-o", fmt, *(["-j", jobs] if jobs else [])]


def squeue_ids_cmd() -> list[str]:
    return ["squeue", "-h", "-o", "%i"]


def sinfo_nodes_cmd() -> list[str]:
    return ["sinfo", "-h", "-N", "-o", "%N %T"]


def sinfo_rows_cmd() -> list[str]:
    return ["sinfo", "-h", "-N", "-o", "%N|%P|%T|%G"]


def sinfo_partitions_cmd() -> list[str]:
    return ["sinfo", "-h", "-o", "%R|%a"]


def sinfo_limits_cmd() -> list[str]:
    return ["sinfo", "-h", "-o", "%P %l"]


def ping_cmd() -> list[str]:
    return ["scontrol", "ping"]


def hostnames_cmd(nodelist: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodelist]


def scancel_cmd(job: str) -> list[str]:
    return ["scancel", job]


def srun_probe_cmd(node: str, partition: str, argv: Sequence[str]) -> list[str]:
    """`argv` as one task on `node` for at most a minute; --immediate=30: give up when the node
    is not free within 30 s instead of queueing."""
    return ["srun", "-N1", "-n1", "-w", node, "-p", partition, "-t", "1", "--immediate=30",
            "--quiet", *argv]  # fmt: skip


def srun_step_cmd(job_id: int, node: str, argv: Sequence[str]) -> list[str]:
    """`argv` as a step of running job `job_id` on `node`, beside its running step (--overlap)."""
    return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--nodelist={node}", *argv]  # fmt: skip


_JOB_ID_LINE = re.compile(r"^\s*(?:Submitted batch job\s+)?(\d+)(?:;\S+)?\s*$")


def parse_sbatch_parsable(stdout: str) -> int:
    """`sbatch --parsable` output (`12` or `12;cluster`) -> job id. The last line that is one
    counts: site wrappers and job_submit plugins may print lines before it, or ignore
    --parsable (`Submitted batch job 12`). None there: the job may still have been submitted,
    so the error says how to check before submitting again."""
    for line in reversed(stdout.strip().splitlines()):
        m = _JOB_ID_LINE.match(line)
        if m:
            return int(m.group(1))
    shown = stdout.strip().replace("\n", " | ")[:200] or "nothing"
    raise UserError(
        f"sbatch printed no job id ({shown}); the job may have been submitted all the same: "
        "check `squeue --me` before submitting again"
    )
