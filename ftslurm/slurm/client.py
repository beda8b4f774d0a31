"""Slurm's client tools behind one client, the only module that runs them (through
ftslurm.runner): argument lists from `args`, output read by `parse`.

`SlurmClient` holds what every call needs: the environment (SLURM_CONF) and a timeout.
`current()` is this process's client; a caller that talks to a given cluster passes its
environment: `current(env=...)`. A unit test's fake in `override` gets every call.
When SLURM_CONF is not set and the local cluster (`ftslurm cluster up`) runs, its slurm.conf
is used, so every ftslurm command works against the local cluster without `eval $(...)`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftslurm import paths, procs, safefile
from ftslurm.errors import UserError
from ftslurm.runner import CommandError, Completed, run
from ftslurm.slurm import args, parse
from ftslurm.slurm.parse import JobInfo, NodeRow

TIMEOUT_S = 30.0
TOOLS = ("sinfo", "squeue", "sbatch", "srun", "scontrol", "scancel")


def controller_running(conf: Path) -> bool:
    """The slurmctld that `conf` configures runs (the pid in its SlurmctldPidFile is alive). A
    stopped local cluster leaves its slurm.conf behind: on a login node with its own Slurm,
    that file must not replace the system's configuration."""
    text = safefile.read_text(conf)  # never through a link, a FIFO or /dev/zero
    pidfile = parse.conf_value(text, "SlurmctldPidFile") if text else None
    pid = procs.read_pidfile(Path(pidfile)) if pidfile else None
    return pid is not None and procs.pid_alive(pid) and "slurmctld" in procs.proc_cmdline(pid)


@dataclass
class SlurmClient:
    """Slurm's client tools for one environment. `env` None: this process's, with
    `local_conf` as SLURM_CONF when that is unset and the controller `local_conf` configures
    runs (the caller passes the local cluster's slurm.conf; default: ftslurm's)."""

    env: Mapping[str, str] | None = None
    timeout: float = TIMEOUT_S
    local_conf: Path = field(default_factory=lambda: paths.cluster_dir() / "slurm.conf")

    def environment(self, check_conf: bool = True) -> dict[str, str]:
        """The environment of Slurm's tools. `check_conf`: a SLURM_CONF that is not a file is
        a UserError now, not after the tools retried for the whole timeout."""
        if self.env is not None:
            return dict(self.env)
        env = dict(os.environ)
        if "SLURM_CONF" not in env:
            if controller_running(self.local_conf):
                env["SLURM_CONF"] = str(self.local_conf)
        elif check_conf and env["SLURM_CONF"] and not Path(env["SLURM_CONF"]).is_file():
            raise UserError(
                f"SLURM_CONF={env['SLURM_CONF']} is not a file: unset it, or point it at the "
                "cluster's slurm.conf (the local cluster's: eval \"$(ftslurm cluster env)\")"
            )
        return env

    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=(os.environ if self.env is None else self.env).get("PATH"))

    def tools(self) -> dict[str, str | None]:
        """Slurm's client tools -> their path (None: not found)."""
        return {t: self.which(t) for t in TOOLS}

    def _run(self, cmd: list[str], timeout: float, env: dict[str, str], check: bool,
             cwd: Path | None) -> Completed:  # fmt: skip
        """The one place a tool runs (a fake client answers here instead)."""
        return run(cmd, timeout=timeout, env=env, check=check, cwd=cwd)

    def call(self, cmd: Sequence[str], timeout: float | None = None, check: bool = True,
             extra_env: Mapping[str, str] | None = None,
             cwd: Path | None = None) -> Completed:  # fmt: skip
        """Run `cmd` (from `args`); Slurm's refusals that the user can fix become UserErrors."""
        cmd = list(cmd)
        if self.which(cmd[0]) is None:
            raise UserError(
                f"`{cmd[0]}` not found: run on a Slurm login node, or start the local cluster "
                "with `sudo ftslurm cluster up`"
            )
        env = {**self.environment(), **(extra_env or {})}
        try:
            return self._run(cmd, timeout or self.timeout, env, check, cwd)
        except CommandError as e:
            text = e.stderr.lower()
            # recorded on Slurm 22.05 as a non-admin user: `scontrol requeue` and scancel say
            # "Access/permission denied", `scontrol update NodeName=...` says "Invalid user id"
            if "permission denied" in text or (
                "invalid user id" in text and cmd[:2] == ["scontrol", "update"]
            ):
                raise UserError(
                    f"`{' '.join(cmd[:2])}` needs root or a Slurm admin: run with sudo"
                ) from e
            if "unable to contact slurm controller" in text:
                conf = env.get("SLURM_CONF", "the default slurm.conf")
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

    def ping(self) -> tuple[int | None, str]:
        """`scontrol ping`: its exit code (None: it did not finish) and what it printed."""
        try:
            out = self.call(args.ping_cmd(), check=False)
        except (CommandError, UserError) as e:
            return None, str(e)
        return out.returncode, out.stdout + out.stderr

    def sbatch(self, script: str | Path, sbatch_options: Sequence[str] = (),
               script_args: Sequence[str] = (), cwd: Path | None = None,
               extra_env: Mapping[str, str] | None = None) -> int:  # fmt: skip
        """Submit; `extra_env` is added to sbatch's environment (which the job inherits)."""
        cmd = args.sbatch_cmd(str(script), sbatch_options, script_args)
        return args.parse_sbatch_parsable(self.call(cmd, extra_env=extra_env, cwd=cwd).stdout)

    def jobs(self, job: int | None = None) -> list[JobInfo]:
        """Jobs (array tasks expanded) from `squeue --json`, falling back to `squeue -o` +
        `scontrol show job` (for restart counts) where --json is not available."""
        out = self.call(args.squeue_json_cmd(), check=False)
        if out.returncode == 0 and out.stdout.lstrip().startswith("{"):
            found = parse.parse_squeue_json(out.stdout)
        else:
            text = self.call(args.squeue_text_cmd(parse.SQUEUE_FORMAT, str(job) if job else None))
            found = parse.parse_squeue_text(text.stdout)
            shown = self.call(args.show_job_cmd(str(job) if job else None), check=False)
            records = parse.split_scontrol_records(shown.stdout) if shown.returncode == 0 else []
            restarts = {j.key: j.restarts for j in map(parse.job_from_scontrol, records)}
            for j in found:
                j.restarts = restarts.get(j.key, 0)
        if job is not None:
            found = [j for j in found if j.job_id == job or j.array_job_id == job]
        return found

    def array_tasks(self, job: int) -> dict[int, JobInfo]:
        """The tasks of array `job` now: task id -> its entry (see `parse.array_tasks`)."""
        return parse.array_tasks(self.jobs(job), job)

    def active_job_ids(self) -> list[str]:
        """The ids of the jobs queued or running (squeue's default states)."""
        return parse.parse_job_ids(self.call(args.squeue_ids_cmd()).stdout)

    def nodes(self) -> dict[str, str]:
        return parse.parse_sinfo_nodes(self.call(args.sinfo_nodes_cmd()).stdout)

    def node_rows(self) -> list[NodeRow]:
        return parse.parse_sinfo_rows(self.call(args.sinfo_rows_cmd()).stdout)

    def partitions(self) -> dict[str, str]:
        return parse.parse_partitions(self.call(args.sinfo_partitions_cmd()).stdout)

    def partition_limits(self) -> tuple[dict[str, int], str | None]:
        return parse.parse_partition_limits(self.call(args.sinfo_limits_cmd()).stdout)

    def hostnames(self, nodelist: str) -> list[str]:
        return self.call(args.hostnames_cmd(nodelist)).stdout.split()

    def update_node(self, node: str, state: str, reason: str | None = None) -> None:
        self.call(args.node_update_cmd(node, state, reason))

    def requeue(self, job: str) -> None:
        self.call(args.requeue_cmd(job))

    def requeue_excluding(self, job: str, nodes: Sequence[str]) -> None:
        """Requeue `job` so that it never starts on `nodes` (added to the ExcNodeList it
        has): requeued held, its ExcNodeList set while it pends, then released."""
        shown = self.call(args.show_job_cmd(job), check=False)
        records = parse.split_scontrol_records(shown.stdout) if shown.returncode == 0 else []
        had = records[0].get("ExcNodeList", "") if records else ""
        old = [] if had in ("", "(null)") else self.hostnames(had)
        self.call(args.requeue_hold_cmd(job))
        try:
            self.call(args.exclude_nodes_cmd(job, list(dict.fromkeys([*old, *nodes]))))
        finally:
            self.call(args.release_cmd(job))

    def node_reasons(self) -> list[parse.NodeReason]:
        return parse.parse_sinfo_reasons(self.call(args.sinfo_reasons_cmd()).stdout)

    def scancel(self, job: str, check: bool = True) -> None:
        self.call(args.scancel_cmd(job), check=check)

    def probe(self, node: str, partition: str, argv: Sequence[str], timeout: float) -> Completed:
        """`argv` as one srun task on `node` (see `args.srun_probe_cmd`); any exit code."""
        return self.call(args.srun_probe_cmd(node, partition, argv), timeout=timeout, check=False)


override: SlurmClient | None = None  # a unit test's fake (tests/fakeslurm.py)


def current(env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S) -> SlurmClient:
    """The client for `env` (None: this process's environment), or the test's fake."""
    return override or SlurmClient(env=env, timeout=timeout)

