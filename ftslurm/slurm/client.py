"""Slurm calls through ftslurm.runner: the only module that runs Slurm's client tools.

When SLURM_CONF is not set and a local cluster (`ftslurm cluster up`) exists, its slurm.conf
is used, so every ftslurm command works against the local cluster without `eval $(...)`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from ftslurm import paths
from ftslurm.errors import UserError
from ftslurm.runner import CommandError, run
from ftslurm.slurm import args
from ftslurm.slurm.parse import (
    SQUEUE_FORMAT,
    JobInfo,
    job_from_scontrol,
    parse_sinfo_nodes,
    parse_squeue_json,
    parse_squeue_text,
    split_scontrol_records,
)

TIMEOUT_S = 30.0


def _local_controller_running() -> bool:
    """The local cluster's slurmctld is up (its pidfile's pid alive). A stopped local cluster
    leaves its slurm.conf behind: on a login node with its own Slurm, that file must not
    replace the system's configuration."""
    from ftslurm import procs
    from ftslurm.cluster.config import ClusterSpec

    pid = procs.read_pidfile(ClusterSpec(state_dir=str(paths.cluster_dir())).pidfile("slurmctld"))
    return pid is not None and procs.pid_alive(pid) and "slurmctld" in procs.proc_cmdline(pid)


def slurm_env(check_conf: bool = True) -> dict[str, str]:
    """The environment of Slurm's tools. `check_conf`: a SLURM_CONF that is not a file is a
    UserError now, not after the tools retried for the whole timeout."""
    env = dict(os.environ)
    if "SLURM_CONF" not in env:
        local_conf = paths.cluster_dir() / "slurm.conf"
        if local_conf.exists() and _local_controller_running():
            env["SLURM_CONF"] = str(local_conf)
    elif check_conf and env["SLURM_CONF"] and not Path(env["SLURM_CONF"]).is_file():
        # Slurm's tools would retry for the whole timeout before failing
        raise UserError(
            f"SLURM_CONF={env['SLURM_CONF']} is not a file: unset it, or point it at the "
            "cluster's slurm.conf (the local cluster's: eval \"$(ftslurm cluster env)\")"
        )
    return env


def _slurm(
    cmd: Sequence[str],
    timeout: float = TIMEOUT_S,
    check: bool = True,
    extra_env: Mapping[str, str] | None = None,
):
    if shutil.which(cmd[0]) is None:
        raise UserError(
            f"`{cmd[0]}` not found: run on a Slurm login node, or start the local cluster "
            "with `sudo ftslurm cluster up`"
        )
    try:
        return run(cmd, timeout=timeout, env={**slurm_env(), **(extra_env or {})}, check=check)
    except CommandError as e:
        text = e.stderr.lower()
        # recorded on Slurm 22.05 as a non-admin user: `scontrol requeue` and scancel say
        # "Access/permission denied", `scontrol update NodeName=...` says "Invalid user id"
        if "permission denied" in text or (
            "invalid user id" in text and list(cmd[:2]) == ["scontrol", "update"]
        ):
            raise UserError(
                f"`{' '.join(cmd[:2])}` needs root or a Slurm admin: run with sudo"
            ) from e
        if "unable to contact slurm controller" in text:
            conf = slurm_env().get("SLURM_CONF", "the default slurm.conf")
            raise UserError(
                f"the Slurm controller does not answer (SLURM_CONF={conf}): start the local "
                "cluster with `sudo ftslurm cluster up`, or check slurmctld"
            ) from e
        if "could not establish a configuration source" in text:
            raise UserError(
                "Slurm has no configuration: export SLURM_CONF, or start the local cluster "
                "with `sudo ftslurm cluster up`"
            ) from e
        raise


def sbatch(
    script: str | Path,
    sbatch_options: Sequence[str] = (),
    script_args: Sequence[str] = (),
    cwd: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> int:
    """Submit; `extra_env` is added to sbatch's environment (which the job inherits)."""
    cmd = args.sbatch_cmd(str(script), sbatch_options, script_args)
    if cwd is not None:
        out = run(cmd, timeout=TIMEOUT_S, env={**slurm_env(), **(extra_env or {})}, cwd=cwd)
    else:
        out = _slurm(cmd, extra_env=extra_env)
    return args.parse_sbatch_parsable(out.stdout)


def jobs(job: int | None = None) -> list[JobInfo]:
    """Jobs (array tasks expanded) from `squeue --json`, falling back to `squeue -o` +
    `scontrol show job` (for restart counts) where --json is not available."""
    out = _slurm(args.squeue_json_cmd(), check=False)
    if out.returncode == 0 and out.stdout.lstrip().startswith("{"):
        found = parse_squeue_json(out.stdout)
    else:
        text = _slurm(args.squeue_text_cmd(SQUEUE_FORMAT, str(job) if job else None))
        found = parse_squeue_text(text.stdout)
        restarts = {j.key: j.restarts for j in scontrol_jobs(job)}
        for j in found:
            j.restarts = restarts.get(j.key, 0)
    if job is not None:
        found = [j for j in found if j.job_id == job or j.array_job_id == job]
    return found


def scontrol_jobs(job: int | str | None = None) -> list[JobInfo]:
    out = _slurm(args.show_job_cmd(str(job) if job else None), check=False)
    if out.returncode != 0:
        return []
    return [job_from_scontrol(r) for r in split_scontrol_records(out.stdout)]


def nodes() -> dict[str, str]:
    return parse_sinfo_nodes(_slurm(args.sinfo_nodes_cmd()).stdout)


def update_node(node: str, state: str, reason: str | None = None) -> None:
    _slurm(args.node_update_cmd(node, state, reason))


def requeue(job: str) -> None:
    _slurm(args.requeue_cmd(job))
