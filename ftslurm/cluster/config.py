"""Pure builders for the local cluster's files: slurm.conf, the hosts file, the node commands.

Nothing here touches the machine, so the text is checked by unit tests and printable as a dry
run. The keys that differ from a production slurm.conf, each checked on Debian's Slurm
22.05: proctrack/pgid (cgroup fails in containers), task/none, cred_expire=5 (the shortest
requeue hold Slurm accepts), CPUs=1 + OverSubscribe=EXCLUSIVE (one job per node, as with
`--exclusive` on a GPU cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

LOGIN_NODE = "login-0"


@dataclass(frozen=True)
class ClusterSpec:
    """Everything that defines one local cluster; stored as JSON in its state directory."""

    state_dir: str
    nodes: int = 2
    ctld_port: int = 6817
    slurmd_base_port: int = 6818
    cluster_name: str = "ftslurm"
    partition: str = "main"
    slurmd_timeout_s: int = 30
    node_prefix: str = "worker-"
    first_job_id: int = 1
    extra_hosts: list[str] = field(default_factory=lambda: [LOGIN_NODE])

    @property
    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}{i}" for i in range(self.nodes)]

    def path(self, *parts: str) -> Path:
        return Path(self.state_dir, *parts)

    def pidfile(self, daemon: str) -> Path:
        """The pidfile of one daemon `up` started: munged, slurmctld, node-<name> (the
        namespace holder). `down` and `ftslurm simulate-failure` read this one path; the
        Slurm client finds it through slurm.conf's SlurmctldPidFile."""
        return self.path("run", f"{daemon}.pid")

    def node_pidfile(self, node: str) -> Path:
        """The pidfile of the process holding `node`'s namespace."""
        return self.pidfile(f"node-{node}")

    @property
    def conf_path(self) -> Path:
        return self.path("slurm.conf")

    @property
    def hosts_path(self) -> Path:
        return self.path("hosts")

    @property
    def munge_socket(self) -> Path:
        return self.path("munge", "munge.socket")


def render_slurm_conf(spec: ClusterSpec) -> str:
    """The slurm.conf text for `spec`."""
    s = spec.state_dir
    lines = [
        f"ClusterName={spec.cluster_name}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={spec.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={spec.munge_socket},cred_expire=5",
        f"StateSaveLocation={s}/ctld",
        f"SlurmctldPidFile={spec.pidfile('slurmctld')}",
        f"SlurmctldLogFile={s}/log/slurmctld.log",
        f"SlurmdSpoolDir={s}/spool/%n",
        f"SlurmdPidFile={s}/run/slurmd-%n.pid",
        f"SlurmdLogFile={s}/log/slurmd-%n.log",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "JobRequeue=1",
        f"FirstJobId={spec.first_job_id}",
        "ReturnToService=1",
        "KillWait=2",
        "MinJobAge=600",
        "InactiveLimit=0",
        f"SlurmdTimeout={spec.slurmd_timeout_s}",
        "MessageTimeout=10",
    ]
    for i, name in enumerate(spec.node_names):
        lines.append(
            f"NodeName={name} NodeAddr=127.0.0.1 Port={spec.slurmd_base_port + i} "
            "CPUs=1 State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={spec.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=EXCLUSIVE"
    )
    return "\n".join(lines) + "\n"


def render_hosts(spec: ClusterSpec) -> str:
    """/etc/hosts as seen inside the node namespaces: every node and the login node resolve to
    127.0.0.1, so `http://login-0:<port>` (the Lighthouse) and `worker-<i>` (peer replicas)
    work from inside jobs exactly as on a real cluster."""
    names = ["localhost", *spec.node_names, *spec.extra_hosts]
    return "127.0.0.1\t" + " ".join(names) + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def node_command(spec: ClusterSpec, node: str) -> list[str]:
    """The argv that starts one node: a new UTS + mount namespace whose hostname is the node
    name and whose /etc/hosts is the cluster's; `sleep infinity` keeps the namespace alive
    after slurmd daemonizes, and its pid identifies the namespace for `down`."""
    inner = (
        'hostname "$1" && mount --bind "$2" /etc/hosts && '
        'slurmd -f "$3" -N "$1" && exec sleep infinity'
    )
    return [
        "unshare", "--uts", "--mount", "--propagation", "private",
        "sh", "-c", inner, "ftslurm-node",
        node, str(spec.hosts_path), str(spec.conf_path),
    ]  # fmt: skip


def munged_command(spec: ClusterSpec) -> list[str]:
    """Our own munged (the system's munge is left alone), state under the cluster dir."""
    return [
        "munged",
        f"--socket={spec.munge_socket}",
        f"--key-file={spec.path('munge', 'munge.key')}",
        f"--pid-file={spec.pidfile('munged')}",
        f"--log-file={spec.path('log', 'munged.log')}",
        f"--seed-file={spec.path('munge', 'munged.seed')}",
        "--force",
    ]


def slurmctld_command(spec: ClusterSpec) -> list[str]:
    # -c: start from a clean state (job ids restart at 1 on a fresh state dir anyway).
    return ["slurmctld", "-c", "-f", str(spec.conf_path)]
