"""Start and stop the local Slurm cluster: munged, slurmctld and N slurmd nodes.

Each node runs in its own UTS + mount namespace (hostname = node name, private /etc/hosts),
tracked by the pid of the process that holds the namespace. `down` kills every process in
those namespaces (slurmd, slurmstepd, job tasks) and the daemons by their pidfiles, never
anything else on the machine. Both `up` and `down` are idempotent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ftslurm import daemon, paths, procs, safefile
from ftslurm.cluster.config import (
    ClusterSpec,
    munged_command,
    node_command,
    render_hosts,
    render_slurm_conf,
    slurmctld_command,
)
from ftslurm.errors import UserError
from ftslurm.logvocab import run_job
from ftslurm.runner import CommandError, run, spawn
from ftslurm.slurm import client
from ftslurm.wait import WaitTimeout, wait_for

REQUIRED_BINARIES = ("slurmctld", "slurmd", "sinfo", "sbatch", "scontrol", "squeue", "munged")
DEBIAN_PACKAGES = ("slurm-wlm", "munge")
SPEC_FILE = "cluster.json"
SPEC_LIMIT = 64 * 1024  # a cluster.json is under 1 KiB

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class ClusterStatus:
    state_dir: str
    running: bool
    nodes: dict[str, str]  # node name -> Slurm state ('idle', 'allocated', 'down', ...)
    conf: str | None


def slurm_env(spec: ClusterSpec) -> dict[str, str]:
    """Environment for Slurm clients talking to this cluster."""
    return {**os.environ, "SLURM_CONF": str(spec.conf_path)}


class BrokenClusterState(UserError):
    """The state file is there but holds no cluster (cut short, edited by hand, not ours).

    Not "no cluster": the daemons it started may still run, and `up` would start a second
    cluster beside them. The message names the file and the two ways out."""

    def __init__(self, path: Path, why: str):
        self.path = path
        super().__init__(
            f"{path} is not a local cluster's state ({why}): stop what it started with "
            "`sudo ftslurm cluster down`, or remove it"
        )


def _spec_from_json(text: str) -> ClusterSpec:
    """The ClusterSpec that `text` (cluster.json) holds; ValueError saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object: {text.strip()[:40]}")
    try:
        spec = ClusterSpec(**data)
    except TypeError as e:  # a field missing, or one this version does not know
        raise ValueError(str(e).rpartition("() ")[2]) from None
    hints = typing.get_type_hints(ClusterSpec)
    for f in dataclasses.fields(spec):
        value, want = getattr(spec, f.name), hints[f.name]
        if want == list[str]:
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            ok = type(value) is want  # bool is no int here
        if not ok:
            raise ValueError(f"{f.name} is {json.dumps(value)[:40]}")
    return spec


def load_spec(state_dir: Path | None = None) -> ClusterSpec | None:
    """The cluster `up` recorded in `state_dir`; None when there is no state file.
    BrokenClusterState when there is one that holds no cluster."""
    path = (state_dir or paths.cluster_dir()) / SPEC_FILE
    try:
        # a state file is small; a link (to /dev/zero), a FIFO (would hang), a folder or an
        # unreadable file is refused in one line, never followed
        raw = safefile.read_checked(path, SPEC_LIMIT)
    except safefile.UnsafePath as e:
        raise BrokenClusterState(path, e.why) from None
    if raw is None:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise BrokenClusterState(path, "not UTF-8 text") from None
    try:
        return _spec_from_json(text)
    except ValueError as e:
        raise BrokenClusterState(path, str(e)) from None


def missing_binaries() -> list[str]:
    return [b for b in REQUIRED_BINARIES if shutil.which(b) is None] + (
        [] if shutil.which("unshare") else ["unshare"]
    )


def ensure_packages(progress: Progress = _quiet, install: bool = True) -> None:
    """Install slurm-wlm and munge with apt-get when missing and we are root; otherwise say
    exactly what to install."""
    missing = missing_binaries()
    if not missing:
        return
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *DEBIAN_PACKAGES]
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise UserError(
            f"missing {', '.join(missing)}: install them with "
            f"`sudo apt-get update && sudo {' '.join(cmd)}`"
        )
    progress(f"installing {' '.join(DEBIAN_PACKAGES)} with apt-get (about 20 s) ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], timeout=600, env=env)
    run(cmd, timeout=900, env=env)
    still = missing_binaries()
    if still:
        raise UserError(f"apt-get ran but {', '.join(still)} is still missing")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def choose_ports(nodes: int, preferred: int = 6817) -> int:
    """A base port such that base..base+nodes are all free (ctld = base, slurmd = base+1+i).
    Slurm's default 6817 is preferred; another cluster on the machine pushes us up."""
    candidates = [preferred, *range(21000, 30000, 64)]
    for base in candidates:
        if all(_port_free(base + k) for k in range(nodes + 1)):
            return base
    raise UserError("no free block of ports for slurmctld/slurmd found")


def next_free_job_id(runs_dir: Path) -> int:
    """1 + the highest job id with a `tft-<id>` log folder. A fresh slurmctld starts counting
    at 1, and the FT script appends to `tft-<id>/`: without this, a new job would append its
    logs to an old run's files (and `ftslurm report` would mix the two runs)."""
    try:
        ids = [int(j) for p in runs_dir.iterdir() if (j := run_job(p.name) or "").isdecimal()]
    except OSError:
        return 1
    return max(ids, default=0) + 1


def new_spec(nodes: int, state_dir: Path) -> ClusterSpec:
    base = choose_ports(nodes)
    return ClusterSpec(
        state_dir=str(state_dir),
        nodes=nodes,
        ctld_port=base,
        slurmd_base_port=base + 1,
        first_job_id=next_free_job_id(paths.torchft_runs_dir()),
    )


def _daemon_pids(spec: ClusterSpec, nodes: list[str] | None = None) -> dict[str, int | None]:
    """Daemon or node name -> the pid in its pidfile; `nodes` default: the spec's."""
    pids = {
        "munged": procs.read_pidfile(spec.pidfile("munged")),
        "slurmctld": procs.read_pidfile(spec.pidfile("slurmctld")),
    }
    for node in spec.node_names if nodes is None else nodes:
        pids[node] = procs.read_pidfile(spec.node_pidfile(node))
    return pids


def _without_spec(state_dir: Path) -> tuple[ClusterSpec, list[str]]:
    """A spec of `state_dir` when its state file is broken, and the nodes its pidfiles name:
    the pidfiles' paths depend on the folder alone."""
    spec = ClusterSpec(state_dir=str(state_dir), nodes=0)
    pattern = spec.node_pidfile("*")
    head, _, tail = pattern.name.partition("*")
    found = pattern.parent.glob(pattern.name)
    return spec, sorted(p.name[len(head) : len(p.name) - len(tail)] for p in found)


def _all_alive(spec: ClusterSpec) -> bool:
    return all(procs.pid_alive(p) for p in _daemon_pids(spec).values())


def node_states(spec: ClusterSpec, timeout: float = 10) -> dict[str, str]:
    """{node: state}; CommandError or UserError when the controller does not answer."""
    return client.current(env=slurm_env(spec), timeout=timeout).nodes()


def active_jobs(spec: ClusterSpec, timeout: float = 10) -> list[str]:
    """Ids of the jobs queued or running on the cluster (squeue's default states), so that
    nothing restarts a cluster under a user's job; [] when its controller does not answer."""
    try:
        return client.current(env=slurm_env(spec), timeout=timeout).active_job_ids()
    except (CommandError, UserError):
        return []


def _prepare_state_dir(spec: ClusterSpec) -> None:
    root = Path(spec.state_dir)
    root.mkdir(parents=True, exist_ok=True)
    # never a link: root writes pidfiles, logs and the munge key into these, and chmods one
    for sub in ("ctld", "run", "log", "spool"):
        safefile.real_dir(root / sub)
    munge_dir = safefile.real_dir(root / "munge")
    os.chmod(munge_dir, 0o755)  # munged refuses a socket dir of 700 ("inaccessible")
    key = munge_dir / "munge.key"
    if safefile.read_bytes(key, limit=4096) is None:  # missing, or a link/FIFO planted there
        safefile.write_atomic(key, secrets.token_bytes(1024))
    # slurmd and the client tools read slurm.conf and hosts as other users: world-readable
    safefile.write_atomic(spec.conf_path, render_slurm_conf(spec), mode=0o644)
    safefile.write_atomic(spec.hosts_path, render_hosts(spec), mode=0o644)
    safefile.write_atomic(root / SPEC_FILE, json.dumps(dataclasses.asdict(spec), indent=2) + "\n")


def up(
    nodes: int = 2,
    state_dir: Path | None = None,
    progress: Progress = _quiet,
    timeout: float = 30,
    install: bool = True,
) -> ClusterSpec:
    """Start the cluster (or find it running) and wait until every node is idle."""
    if nodes < 1 or nodes > 64:
        raise UserError(f"--nodes must be between 1 and 64, got {nodes}")
    state_dir = (state_dir or paths.cluster_dir()).resolve()
    if os.geteuid() != 0:
        raise UserError("the local cluster needs root (namespaces, slurmd): run with sudo")
    ensure_packages(progress, install=install)
    spec = load_spec(state_dir)
    if spec is not None and _all_alive(spec):
        if spec.nodes == nodes:
            progress(f"cluster already up: {nodes} nodes ({state_dir})")
            _wait_idle(spec, timeout, progress)
            return spec
        busy = active_jobs(spec)
        if busy:
            raise UserError(
                f"the local cluster is up with {spec.nodes} nodes and job(s) {', '.join(busy)} "
                f"queued or running; restarting it with {nodes} nodes would kill them: "
                f"`scancel {' '.join(busy)}` (or `ftslurm cluster down`) first"
            )
        progress(f"cluster is up with {spec.nodes} nodes; restarting it with {nodes}")
    if spec is not None:
        down(state_dir)
    spec = new_spec(nodes, state_dir)
    _prepare_state_dir(spec)
    env = slurm_env(spec)
    logs = spec.path("log")
    try:
        run(munged_command(spec), timeout=15, env=env)
        run(slurmctld_command(spec), timeout=30, env=env)
        for node in spec.node_names:
            proc = spawn(
                node_command(spec, node),
                log_path=logs / f"node-{node}.out",
                env=env,
                detach=True,
            )
            safefile.write_atomic(spec.node_pidfile(node), f"{proc.pid}\n")
        _wait_idle(spec, timeout, progress)
    except (CommandError, WaitTimeout, UserError) as e:
        down(state_dir)
        raise UserError(f"cluster did not come up: {e} (logs in {logs})") from e
    return spec


def _wait_idle(spec: ClusterSpec, timeout: float, progress: Progress) -> None:
    def all_idle() -> bool:
        try:
            states = node_states(spec, timeout=5)
        except (CommandError, UserError):
            return False
        return len(states) == spec.nodes and all(
            s.rstrip("*~#") in ("idle", "allocated", "mixed", "completing") for s in states.values()
        )

    wait_for(all_idle, timeout=timeout, interval=0.2, what=f"{spec.nodes} idle nodes in sinfo")
    progress(f"{spec.nodes} nodes up: {', '.join(spec.node_names)}")


def _kill_node(spec: ClusterSpec, node: str) -> None:
    holder = procs.read_pidfile(spec.node_pidfile(node))
    if holder and procs.pid_alive(holder):
        ns = procs.uts_ns(holder)
        if ns and ns != procs.uts_ns(os.getpid()):
            # slurmd, slurmstepd and every job task of this node share the namespace.
            for _ in range(3):
                pids = procs.pids_in_uts_ns(ns)
                if not pids:
                    break
                procs.kill_pids(pids, signal.SIGKILL)
                time.sleep(0.05)
        else:
            procs.kill_pids([holder], signal.SIGKILL)
    spec.node_pidfile(node).unlink(missing_ok=True)


def down(state_dir: Path | None = None, progress: Progress = _quiet) -> bool:
    """Stop what `up` started, by pid. Returns False if nothing was running."""
    state_dir = (state_dir or paths.cluster_dir()).resolve()
    broken = None
    try:
        spec = load_spec(state_dir)
        nodes = spec.node_names if spec else []
    except BrokenClusterState as e:
        broken = e.path
        spec, nodes = _without_spec(state_dir)
        progress(f"{broken} holds no cluster: stopping what the pidfiles name, then removing it")
    if spec is None:
        progress(f"no cluster in {state_dir}: nothing to stop")
        return False
    pids = _daemon_pids(spec, nodes)
    was_running = any(procs.pid_alive(p) for p in pids.values())
    for node in nodes:
        _kill_node(spec, node)
    for name in ("slurmctld", "munged"):
        pid = pids[name]
        if pid and procs.pid_alive(pid):  # and still that daemon (a reused pid is left alone)
            daemon.stop(pid, grace=5, expected_cmdline_substring=name)
        spec.pidfile(name).unlink(missing_ok=True)
    if broken is not None:
        broken.unlink(missing_ok=True)
    progress("cluster stopped" if was_running else "cluster was not running")
    return was_running


def status(state_dir: Path | None = None, warn: Progress = _quiet) -> ClusterStatus:
    """Running or not, and the nodes' states. A broken state file is "not running" (said to
    `warn`) when no pid of its pidfiles is alive; when one is, BrokenClusterState."""
    state_dir = (state_dir or paths.cluster_dir()).resolve()
    try:
        spec = load_spec(state_dir)
    except BrokenClusterState as e:
        if any(procs.pid_alive(p) for p in _daemon_pids(*_without_spec(state_dir)).values()):
            raise
        warn(f"warning: {e}")
        spec = None
    if spec is None:
        return ClusterStatus(str(state_dir), False, {}, None)
    running = _all_alive(spec)
    nodes: dict[str, str] = {}
    if running:
        try:
            nodes = node_states(spec, timeout=5)
        except (CommandError, UserError):
            nodes = {}
    return ClusterStatus(str(state_dir), running, nodes, str(spec.conf_path))
