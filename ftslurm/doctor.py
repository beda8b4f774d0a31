"""`ftslurm doctor`: is this cluster set-up ready for an FT run? Each problem with its fix.

Two layers. The pure layer (`check_*`) turns observations (command results, file listings,
installed versions) into `Check` rows: name, status (pass | warn | fail), detail and the fix;
no I/O, so every verdict is unit-tested on recorded output. The runner layer (`observe_*`,
`run_checks`) gathers the observations: Slurm client tools, `scontrol ping`, `sinfo`, tiny
`srun` probes on idle compute nodes (the Lighthouse over HTTP, a file written here, the names
torchft advertises and IPv6 on one node, those names resolved on a second),
files under `assets/`, `importlib.metadata`. Every command has a timeout; when the controller
does not answer, the checks that need it are not attempted (each Slurm client call would wait
~10 s for it) and say so.

Secrets (WANDB_API_KEY, HF_TOKEN) are only ever reported as "set" / "not set".

`--patches` is a listing of its own: every upstream attribute the training worker patches
(ftslurm/replica/patches.py), the versions each was made for, its switch, and whether this
installation has it (`patch_rows` pure, `observe_patches` imports torch, torchft and
torchtitan to look).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets as pysecrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ftslurm import knobs, paths, stacks, versions
from ftslurm.errors import UserError
from ftslurm.replica import patches as patchlib
from ftslurm.replica import plan as planlib
from ftslurm.runner import CommandError
from ftslurm.slurm import client
from ftslurm.slurm.parse import NodeReason, NodeRow

PASS, WARN, FAIL = "pass", "warn", "fail"
SRUN_TIMEOUT_S = 60.0
# A probe run on a compute node with the interpreter the sbatch scripts exec.
LIGHTHOUSE_PROBE = (
    "import sys, urllib.request as u\n"
    "o = u.build_opener(u.ProxyHandler({}))\n"
    "try:\n"
    "    r = o.open(sys.argv[1], timeout=5)\n"
    "    print('HTTP', r.status)\n"
    "except Exception as e:\n"
    "    print(type(e).__name__ + ':', e)\n"
    "    sys.exit(1)\n"
)
# Two probes for the names torchft gives the other replicas: the manager and the checkpoint
# server as http://<hostname>:<port> (sockets on [::], IPv6), the replica's store as
# <fqdn>:<port> (torchrun's MASTER_ADDR). ADVERTISE_PROBE runs on one node and prints what it
# advertises; RESOLVE_PROBE runs on another and resolves those names, as a peer replica would.
# Both print the kernel's boot_id: equal ids are one machine, where loopback is right.
_BOOT_ID = "open('/proc/sys/kernel/random/boot_id').read().strip()"
ADVERTISE_PROBE = (
    "import json, socket\n"
    "h = socket.gethostname()\n"
    "try:\n"
    "    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n"
    "    s.bind(('', 0))\n"
    "    s.close()\n"
    "    v6 = 'ok'\n"
    "except OSError as e:\n"
    "    v6 = str(e)\n"
    f"print(json.dumps({{'host': h, 'fqdn': socket.getfqdn(h), 'ipv6': v6, 'boot': {_BOOT_ID}}}))\n"
)
RESOLVE_PROBE = (
    "import json, socket, sys\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        out[n] = sorted({i[4][0] for i in socket.getaddrinfo(n, None, "
    "proto=socket.IPPROTO_TCP)})[:3]\n"
    "    except OSError as e:\n"
    "        out[n] = str(e)\n"
    f"print(json.dumps({{'resolved': out, 'boot': {_BOOT_ID}}}))\n"
)
# packages needed only for an optional feature: name -> (when it is needed, is it needed?)
OPTIONAL_PACKAGES: dict[str, Callable[[str, Mapping[str, str]], str | None]] = {
    "wandb": lambda device, env: (
        None if knobs.load(env).is_set("WANDB_API_KEY")
        else "needed only for W&B logging, with WANDB_API_KEY"
    ),
    "matplotlib": lambda device, env: "needed only for `ftslurm report --plot`",
    "huggingface-hub": lambda device, env: (
        "needed only for `ftslurm assets download` (the GPU tokenizer)" if device == "cpu" else None
    ),
}


@dataclass(frozen=True)
class Check:
    """One verdict: `fix` says what to do when status is not pass."""

    name: str
    status: str  # pass | warn | fail
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Probe:
    """What a command run on a node (or here) came back with."""

    ok: bool
    output: str  # its last line (stdout, else stderr)
    where: str  # node name, or "login node"


@dataclass
class DoctorConfig:
    """What to check against (defaults: the environment a job would get)."""

    device: str = "cuda"
    lighthouse: str = knobs.KNOBS["TORCHFT_LIGHTHOUSE"].default
    lighthouse_from_env: bool = False
    assets: Path = field(default_factory=lambda: paths.project_root() / "assets")
    # the installed stack's pins (stacks.py): requirements.txt or requirements-titan03.txt
    requirements: Path = field(
        default_factory=lambda: paths.project_root() / stacks.installed().requirements)
    script: Path = field(default_factory=lambda: paths.project_root() / paths.FT_SCRIPT)
    outputs: Path = field(default_factory=paths.outputs_dir)
    replicas: int = 2
    node_python: str = "python3"
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> DoctorConfig:
        env = dict(os.environ if env is None else env)
        settings = knobs.load(env)
        try:
            device = settings.DEVICE
        except UserError:  # the caller names it (or a --device given overrides it)
            device = settings.raw("DEVICE").strip().lower()
        cfg = cls(
            device=device,
            lighthouse=settings.TORCHFT_LIGHTHOUSE,
            lighthouse_from_env=settings.is_set("TORCHFT_LIGHTHOUSE"),
            node_python=paths.job_python(env),  # what `ftslurm submit` passes the job
            env=env,
        )
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, v)
        return cfg


# --------------------------------------------------------------------------------------------
# Pure layer: observations -> checks


def _needs_controller(name: str) -> Check:
    return Check(
        name, WARN, "not checked: the Slurm controller is not answering",
        "fix `slurm controller` first, then run `ftslurm doctor` again",
    )  # fmt: skip


def _skipped_fix(why: str) -> str:
    """The fix of a probe that found no compute node to run on (`why`)."""
    if "controller" in why:
        return "fix `slurm controller` first"
    return "run `ftslurm doctor` again when a compute node is idle"


def _not_probed(name: str, why: str) -> Check:
    return Check(name, WARN, f"not checked ({why})", _skipped_fix(why))


def check_tools(found: Mapping[str, str | None]) -> Check:
    missing = [t for t, p in found.items() if not p]
    if missing:
        return Check(
            "slurm client tools", FAIL, f"not found in PATH: {', '.join(missing)}",
            "run on a Slurm login node (or install the client: apt-get install slurm-client); "
            "on one machine: sudo ftslurm cluster up",
        )  # fmt: skip
    where = sorted({str(Path(p).parent) for p in found.values() if p})
    return Check("slurm client tools", PASS, f"{', '.join(found)} in {', '.join(where)}")


def check_controller(rc: int | None, output: str, slurm_conf: str | None) -> Check:
    """From `scontrol ping` (rc None: it did not finish)."""
    conf = f"SLURM_CONF={slurm_conf}" if slurm_conf else "SLURM_CONF not set (Slurm's default)"
    first = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    line = first[0][:200] if first else "no answer"
    if rc == 0 and " is UP" in output:
        return Check("slurm controller", PASS, f"{output.strip().splitlines()[0]} ({conf})")
    if "configuration" in output.lower():
        return Check(
            "slurm controller", FAIL, f"no Slurm configuration ({conf}): {line}",
            "export SLURM_CONF=/path/to/slurm.conf, or start the local cluster: "
            "sudo ftslurm cluster up",
        )  # fmt: skip
    return Check(
        "slurm controller", FAIL, f"slurmctld is not answering: {line} ({conf})",
        "start slurmctld (systemctl start slurmctld, or on one machine: sudo ftslurm cluster "
        "up) or point SLURM_CONF at the running cluster's slurm.conf",
    )  # fmt: skip


def check_partitions(
    partitions: Mapping[str, str], rows: Sequence[NodeRow], replicas: int
) -> Check:
    name = "partitions and idle nodes"
    up = sorted(p for p, a in partitions.items() if a == "up")
    if not up:
        listed = ", ".join(f"{p} ({a})" for p, a in sorted(partitions.items())) or "none"
        return Check(name, FAIL, f"no partition is up: {listed}",
                     "scontrol update PartitionName=<name> State=UP (as root)")  # fmt: skip
    nodes: dict[str, NodeRow] = {}
    for r in rows:
        if r.partition in up:
            nodes.setdefault(r.name, r)
    usable = [n for n in nodes.values() if n.responding]
    idle = sorted(n.name for n in usable if n.idle)
    summary = f"partitions up: {', '.join(up)}; {len(idle)} idle of {len(nodes)} nodes"
    down = sorted(n.name for n in nodes.values() if not n.responding)
    if down:
        summary += f" (not usable: {', '.join(down)})"
    if not usable:
        return Check(name, FAIL, summary,
                     "bring nodes back: scontrol update NodeName=<node> State=RESUME")  # fmt: skip
    if len(usable) < replicas:
        return Check(
            name, WARN, f"{summary}: an FT run of {replicas} replicas needs {replicas} nodes",
            f"add nodes, or submit fewer replicas (--array=0-{len(usable) - 1})",
        )  # fmt: skip
    if len(idle) < replicas:
        return Check(
            name, WARN, f"{summary}: {replicas} replicas will wait for nodes",
            "nothing to fix: replicas start as nodes free up (squeue shows why they wait)",
        )  # fmt: skip
    return Check(name, PASS, summary + f" ({', '.join(idle)})")


def gres_gpus(gres: str) -> int:
    """GPUs in a `%G` field: `gpu:8`, `gpu:h100:8(S:0-1)`, `gpu:a:4,gpu:b:4` -> 8; `(null)` -> 0."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres):
        item = re.sub(r"\(.*?\)", "", item).strip()
        fields = item.split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def script_gpus_per_task(script: str | Path) -> int | None:
    """The script's `#SBATCH --gpus-per-task`, read as sbatch reads it (the submit service's
    reader); None without one, or when it is not a count."""
    from ftslurm.submission import last_directive

    value = last_directive(script, r"--gpus-per-task")
    return int(value) if value is not None and value.isdigit() else None


def check_gpus(device: str, rows: Sequence[NodeRow], wanted: int | None, script: str) -> Check:
    """GPUs per node as Slurm sees them (gres) vs what the FT script asks for."""
    name = "gpus per node (gres)"
    per_node: dict[str, int] = {}
    for r in rows:
        per_node.setdefault(r.name, gres_gpus(r.gres))
    counts = sorted(set(per_node.values()))
    seen = ", ".join(f"{c} GPUs on {sum(1 for v in per_node.values() if v == c)} nodes"
                     for c in counts) or "no nodes"  # fmt: skip
    if device == "cpu":
        return Check(
            name, PASS,
            f"DEVICE=cpu: no GPUs needed ({seen}); `ftslurm submit` replaces the script's "
            f"--gpus-per-task={wanted} with --gpus-per-task=0 --cpus-per-task=1",
        )  # fmt: skip
    if wanted is None:
        return Check(name, WARN, f"{script} has no #SBATCH --gpus-per-task line ({seen})",
                     "restore the #SBATCH --gpus-per-task=8 line of the FT script")  # fmt: skip
    enough = sorted(n for n, c in per_node.items() if c >= wanted)
    if not enough:
        return Check(
            name, FAIL, f"{seen}; the FT script asks for --gpus-per-task={wanted}",
            "declare the GPUs to Slurm (gres.conf + GresTypes=gpu + NodeName=... Gres=gpu:"
            f"{wanted}), or set GPUS_PER_NODE and #SBATCH --gpus-per-task to what nodes have; "
            "on CPU nodes: export DEVICE=cpu",
        )  # fmt: skip
    if len(enough) < len(per_node):
        return Check(name, WARN,
                     f"{seen}; only {len(enough)} nodes have the {wanted} the script asks for",
                     "replicas run on those nodes only (use a partition of GPU nodes)")  # fmt: skip
    return Check(name, PASS, f"{seen}; the FT script asks for --gpus-per-task={wanted}")


DRAIN_PREFIX = "ftslurm:"  # the launcher's drain reasons (preflight.REASON_PREFIX)


def check_drained(reasons: Sequence[NodeReason]) -> Check | None:
    """The nodes an FT launcher drained (Reason= starting with `ftslurm:`: a failed pre-flight
    check, or FT_NODE_MAX_FAILS), each with when, why and the exact command that brings it
    back; None when there are none (no row)."""
    drained = [r for r in reasons if r.reason.startswith(DRAIN_PREFIX)]
    if not drained:
        return None
    detail = "; ".join(f"{r.name} ({r.state} since {r.since}): {r.reason}" for r in drained)
    fix = "; ".join(f"sudo scontrol update NodeName={r.name} State=RESUME" for r in drained)
    return Check("drained nodes", WARN, f"{len(drained)} node(s) drained by ftslurm: {detail}",
                 f"once fixed, bring each back: {fix}")  # fmt: skip


def probe_node(rows: Sequence[NodeRow], partitions: Mapping[str, str]) -> NodeRow | None:
    """The node the srun probes run on: idle and responding, in a partition that is up. Any
    other (`idle*`, a down partition) would make the probes fail and blame the Lighthouse
    address or the filesystem instead."""
    up = {p for p, avail in partitions.items() if avail == "up"}
    return next((r for r in rows if r.ready and r.partition.rstrip("*") in up), None)


def check_lighthouse(
    address: str,
    from_env: bool,
    node: Probe | None,
    login: Probe,
    node_skipped_why: str = "",
    managed_address: str | None = None,
) -> Check:
    """The Lighthouse as a compute node reaches it (the authority), the login node's view
    as the diagnosis."""
    name = "lighthouse"
    where = f"TORCHFT_LIGHTHOUSE={address}" + ("" if from_env else " (not set: the default)")
    start_fix = (
        "start it on the login node: ftslurm lighthouse start --advertise <login host>, then "
        "export the TORCHFT_LIGHTHOUSE=... line it prints"
    )
    shape = planlib.lighthouse_address_problem(address)
    if shape:
        return Check(
            name, FAIL, f"{where}: {shape}",
            "export TORCHFT_LIGHTHOUSE=http://<login host>:<port> (what `ftslurm lighthouse "
            "start` prints)",
        )  # fmt: skip
    if managed_address and managed_address != address:
        start_fix = (
            f"ftslurm's managed Lighthouse runs at {managed_address}: "
            f"export TORCHFT_LIGHTHOUSE={managed_address}"
        )
    if node is not None:
        if node.ok:
            return Check(name, PASS, f"{where}: {node.output} from compute node {node.where}")
        if login.ok:
            return Check(
                name, FAIL,
                f"{where}: compute node {node.where} cannot reach it ({node.output}), this "
                f"login node can ({login.output})",
                "advertise a name the nodes resolve (ftslurm lighthouse restart --advertise "
                "<login host as nodes know it>) and let nodes reach its port (firewall)",
            )  # fmt: skip
        return Check(
            name, FAIL,
            f"{where}: not answering from compute node {node.where} ({node.output}) nor "
            f"from here ({login.output})",
            start_fix,
        )  # fmt: skip
    why = f" ({node_skipped_why})" if node_skipped_why else ""
    if login.ok:
        return Check(
            name, WARN, f"{where}: {login.output} from this login node; not probed from a "
            f"compute node{why}", _skipped_fix(node_skipped_why),
        )  # fmt: skip
    return Check(name, FAIL, f"{where}: not answering from here ({login.output}){why}", start_fix)


def tokenizer_paths(device: str, assets: Path) -> tuple[list[Path], str]:
    """The files the launcher's torchtitan arguments point at (paths from plan.py), and the
    command that makes them."""
    root = Path("/r")  # plan.py's paths under a stand-in root, moved into `assets`

    def moved(path: Path) -> Path:
        return assets / path.relative_to(root / "assets")

    if device == "cpu":
        tok, data = map(moved, planlib.local_assets(root))
        files = [tok / "tokenizer.json", tok / "tokenizer_config.json", data / "data.jsonl"]
        return files, "ftslurm assets make-local (~5 s, no network)"
    hf = moved(planlib.hf_assets(root))
    return [hf / "tokenizer.json", hf / "tokenizer_config.json"], (
        "export HF_TOKEN=hf_... (licence accepted on huggingface.co/meta-llama/Llama-3.1-8B) "
        "&& ftslurm assets download"
    )


def check_tokenizer(device: str, assets: Path, present: Callable[[Path], bool]) -> Check:
    files, make = tokenizer_paths(device, assets)
    missing = [f for f in files if not present(f)]
    name = "tokenizer"
    if missing:
        return Check(name, FAIL, "missing: " + ", ".join(str(f) for f in missing), make)
    return Check(name, PASS, f"{files[0].parent} (DEVICE={device})")


def check_training_stack(installed: Mapping[str, str | None]) -> Check:
    """Which supported stack this environment is (stacks.py), how its presets are given to
    torchtitan, and the other stack it could be instead."""
    name = "training stack"
    titan = installed.get("torchtitan")
    stack = stacks.for_torchtitan(titan)
    if stack is None:
        hint = " or ".join(f"pip install 'ftslurm[{s.extra}]'" for s in stacks.STACKS)
        return Check(name, FAIL, f"torchtitan {titan or 'not installed'}: no supported stack",
                     hint)  # fmt: skip
    how = ("the TOML presets in slurm/configs" if stack.config == "toml" else
           f"ftslurm's config functions ({stacks.CONFIG_MODULE}.config_registry)")  # fmt: skip
    others = "; ".join(f"{s.name} ({s.describe()}, pip install 'ftslurm[{s.extra}]')"
                       for s in stacks.STACKS if s is not stack)  # fmt: skip
    return Check(name, PASS, f"{stack.name}: {stack.describe()}; presets from {how}; "
                 f"also supported: {others}")  # fmt: skip


def check_packages(
    reqs: Sequence[versions.Requirement],
    installed: Mapping[str, str | None],
    device: str,
    env: Mapping[str, str],
    requirements_file: str = "requirements.txt",
) -> Check:
    name = "python packages"
    bad, notes = [], []
    for r in reqs:
        have = installed.get(versions.normalize(r.name))
        optional = OPTIONAL_PACKAGES.get(versions.normalize(r.name))
        why_optional = optional(device, env) if optional else None
        if have is None:
            if why_optional:
                notes.append(f"{r.name} not installed ({why_optional})")
            else:
                bad.append(f"{r.name}: not installed (wants {r.spec or 'any'})")
        elif not versions.satisfies(have, r.spec):
            bad.append(f"{r.name} {have} (wants {r.spec})")
    good = len(reqs) - len(bad) - len(notes)
    detail = f"{good} of {len(reqs)} as {requirements_file} pins"
    if notes:
        detail += "; " + "; ".join(notes)
    if bad:
        pins = " ".join(
            f"'{r.name}{r.spec}'" for r in reqs if any(b.startswith(r.name) for b in bad)
        )
        return Check(name, FAIL, detail + "; " + "; ".join(bad),
                     f"pip install -r {requirements_file}   (or: pip install {pins})")  # fmt: skip
    return Check(name, PASS, detail)


VERSION_PROBE = (
    "import importlib.metadata as m\ntry:\n print(m.version('torchft-nightly'))\n"
    "except m.PackageNotFoundError:\n print(m.version('torchft'))"
)


def lighthouse_torchft_version(state_dir: Path | None = None) -> str | None:
    """The torchft build of ftslurm's managed Lighthouse, when it can be read: the running
    Lighthouse's interpreter asked for its torchft version (an interpreter that is this one
    has this one's); None when none runs, it runs a --binary, or the probe fails."""
    import sys

    from ftslurm import lighthouse, procs

    try:
        st = lighthouse.status(state_dir or paths.lighthouse_dir(), probe=False)
    except Exception:  # noqa: BLE001 - only a hint
        return None
    if not st.running or st.pid is None:
        return None
    try:
        interpreter = os.readlink(f"/proc/{st.pid}/exe")
    except OSError:
        return None
    if "python" not in Path(interpreter).name or not procs.pid_alive(st.pid):
        return None  # a --binary runs as the launcher's child: its build is not known
    if os.path.realpath(interpreter) == os.path.realpath(sys.executable):
        return versions.installed_versions(["torchft-nightly"]).get("torchft-nightly")
    from ftslurm.runner import run

    try:
        out = run([interpreter, "-c", VERSION_PROBE], timeout=20)
    except CommandError:
        return None
    version = out.stdout.strip()
    return version if re.fullmatch(r"[0-9A-Za-z.+!_-]{1,64}", version) else None


def check_secret(name: str, env: Mapping[str, str], device: str, tokenizer_ok: bool) -> Check:
    """Present or not; the value is never looked at beyond that, never printed."""
    value = env.get(name)
    if value is not None and not value.strip():
        return Check(name, WARN, "set but empty", f"unset {name} or export its real value")
    if value:
        return Check(name, PASS, "set (jobs get it through --export=ALL; never printed)")
    if name == "WANDB_API_KEY":
        return Check(name, PASS, "not set (W&B logging off; export it to log from replica 0)")
    if device == "cuda" and not tokenizer_ok:
        return Check(name, WARN, "not set: needed to download the gated Llama-3.1-8B tokenizer",
                     "export HF_TOKEN=hf_... (a read token of an account that accepted the "
                     "licence)")  # fmt: skip
    return Check(name, PASS, "not set (not needed: the tokenizer is local)")


def check_shared_fs(path: Path, node: Probe | None, token: str, skipped_why: str = "") -> Check:
    name = "shared filesystem"
    if node is None:
        return _not_probed(name, skipped_why)
    if node.ok and node.output.strip() == token:
        return Check(name, PASS, f"a file written here under {path.parent} is read on {node.where}")
    return Check(
        name, FAIL,
        f"{node.where} cannot read {path} written here ({node.output or 'different content'})",
        "put the checkout (and outputs/, FTSLURM_OUTPUTS) on a filesystem mounted on every "
        "node at the same path",
    )  # fmt: skip


def _json_line(output: str) -> dict | None:
    try:
        data = json.loads(output)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse_advertise_probe(output: str) -> dict[str, str] | None:
    """ADVERTISE_PROBE's line as {host, fqdn, ipv6, boot}; None for anything else."""
    data = _json_line(output)
    keys = ("host", "fqdn", "ipv6", "boot")
    if data is None or not all(isinstance(data.get(k), str) and data[k] for k in keys):
        return None
    return {k: data[k] for k in keys}


def parse_resolve_probe(output: str) -> tuple[dict[str, list[str] | str], str] | None:
    """RESOLVE_PROBE's line as (name -> addresses or the error, boot id); None otherwise."""
    data = _json_line(output)
    if data is None or not isinstance(data.get("resolved"), dict) or not data.get("boot"):
        return None
    return data["resolved"], str(data["boot"])


def _loopback(address: str) -> bool:
    return address.startswith(("127.", "::ffff:127.")) or address == "::1"


def check_peer_addresses(
    advertiser: Probe | None, resolver: Probe | None, skipped_why: str = ""
) -> Check:
    """Can a replica on one node reach what a replica on another advertises? IPv6 is judged on
    the advertising node (torchft's servers bind [::]: without IPv6 a replica dies at start),
    its names on the resolving node, a peer's view. One idle node resolves its own names: a
    weaker check, so a warning at most."""
    name = "replica addresses"
    if advertiser is None:
        return _not_probed(name, skipped_why)
    rerun = ("run the interpreter the scripts use (FTSLURM_PYTHON) on a compute node: "
             "`srun -N1 python3 -c 'import socket'`")  # fmt: skip
    info = parse_advertise_probe(advertiser.output) if advertiser.ok else None
    if info is None:
        return Check(name, WARN, f"the probe on {advertiser.where} failed: "
                     f"{advertiser.output or 'no output'}", rerun)  # fmt: skip
    a = advertiser.where
    if info["ipv6"] != "ok":
        return Check(
            name, FAIL,
            f"{a} cannot open an IPv6 socket ({info['ipv6']}): torchft's manager and checkpoint "
            "server listen on [::], so every replica would fail at start",
            "enable IPv6 on the compute nodes (sysctl net.ipv6.conf.all.disable_ipv6=0, and "
            "no ipv6.disable=1 on the kernel command line)",
        )  # fmt: skip
    host, fqdn = info["host"], info["fqdn"]
    names = f"http://{host}:<port> and store {fqdn}:<port>"
    seen = parse_resolve_probe(resolver.output) if resolver is not None and resolver.ok else None
    if resolver is None or seen is None:
        why = resolver.output if resolver is not None else "no resolving node"
        return Check(name, WARN, f"{a} advertises {names}; not resolved on a peer ({why})", rerun)
    resolved, boot = seen
    b = resolver.where
    peer = b != a
    one_machine = boot == info["boot"]
    problems, found = [], []
    for n in dict.fromkeys((host, fqdn)):
        addrs = resolved.get(n, "not asked")
        if not isinstance(addrs, list) or not addrs:
            problems.append(f"{n} does not resolve on {b} ({addrs})")
        elif all(_loopback(x) for x in addrs) and not one_machine:
            problems.append(f"{n} resolves on {b} to loopback only ({', '.join(addrs)}): {b} "
                            "would connect to itself")  # fmt: skip
        else:
            found.append(f"{n} -> {', '.join(addrs)}")
    fix = ("every node must resolve every other node's short hostname and FQDN to its address "
           "on the network between nodes (DNS or /etc/hosts, not 127.0.1.1): a healing replica "
           "fetches its checkpoint there")  # fmt: skip
    where = f"on {b}" if peer else f"on {b} itself (one idle node: no peer to ask)"
    if problems:
        return Check(name, FAIL if peer else WARN, f"{a} advertises {names}; " +
                     "; ".join(problems), fix)  # fmt: skip
    detail = f"{a} advertises {names}; {where}: {'; '.join(found)}"
    if one_machine and peer:
        detail += " (one machine)"
    if not peer:
        return Check(name, WARN, detail, "run `ftslurm doctor` again when two nodes are idle")
    return Check(name, PASS, detail + "; IPv6 sockets work")


# --------------------------------------------------------------------------------------------
# Runner layer: observations


def _last_line(*texts: str, limit: int = 200) -> str:
    for t in texts:
        lines = [ln.strip() for ln in t.strip().splitlines() if ln.strip()]
        if lines:
            return lines[-1][:limit]
    return ""


def _srun(node: NodeRow, argv: Sequence[str], slurm: client.SlurmClient, limit: int = 200) -> Probe:
    try:
        out = slurm.probe(node.name, node.partition, argv, timeout=SRUN_TIMEOUT_S)
    except (CommandError, UserError) as e:  # srun missing or past its timeout
        return Probe(False, getattr(e, "reason", "") or str(e), node.name)
    return Probe(out.returncode == 0, _last_line(out.stdout, out.stderr, limit=limit), node.name)


def _login_probe(address: str) -> Probe:
    from ftslurm import lighthouse

    try:
        code, _ = lighthouse.http_get(address, timeout=3)
    except (OSError, ValueError, http.client.HTTPException) as e:  # InvalidURL: a bad port
        reason = getattr(e, "reason", e)
        return Probe(False, f"{type(e).__name__}: {reason}", "login node")
    return Probe(code == 200, f"HTTP {code}", "login node")


def _managed_lighthouse_address() -> str | None:
    from ftslurm import lighthouse

    try:
        st = lighthouse.status(paths.lighthouse_dir(), http_timeout=2)
    except Exception:  # noqa: BLE001 - only a hint
        return None
    return st.address if st.running and st.http_ok else None


def run_checks(cfg: DoctorConfig) -> list[Check]:
    """Observe and judge, in order; a dead controller skips what needs it."""
    checks: list[Check] = []
    env = client.current().environment(check_conf=False)
    env.update({k: v for k, v in cfg.env.items() if k == "SLURM_CONF"})
    slurm = client.current(env=env)
    found = slurm.tools()
    checks.append(check_tools(found))
    controller_ok = False
    conf = env.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # scontrol would retry for 30 s, then fail
        checks.append(Check("slurm controller", FAIL, f"SLURM_CONF={conf} is not a file",
                            "unset SLURM_CONF, or export the cluster's slurm.conf"))  # fmt: skip
    elif found["scontrol"]:
        ctl = check_controller(*slurm.ping(), env.get("SLURM_CONF"))
        checks.append(ctl)
        controller_ok = ctl.status == PASS
    else:
        checks.append(Check("slurm controller", FAIL, "scontrol not found",
                            "fix `slurm client tools` first"))  # fmt: skip

    rows: list[NodeRow] = []
    parts: dict[str, str] = {}
    idle_node: NodeRow | None = None
    skipped = "the Slurm controller is not answering"
    if controller_ok:
        try:
            rows, parts = slurm.node_rows(), slurm.partitions()
            checks.append(check_partitions(parts, rows, cfg.replicas))
            drained = _drained(slurm)
            if drained is not None:
                checks.append(drained)
        except (CommandError, UserError) as e:
            checks.append(Check("partitions and idle nodes", FAIL, str(e),
                                "check the controller's log (slurmctld.log)"))  # fmt: skip
        idle_node = probe_node(rows, parts)
        checks.append(check_gpus(cfg.device, rows, script_gpus_per_task(cfg.script),
                                 cfg.script.name))  # fmt: skip
        if idle_node is None:
            skipped = "no idle compute node to run a probe on"
    else:
        checks.append(_needs_controller("partitions and idle nodes"))
        checks.append(_needs_controller("gpus per node (gres)"))

    login = _login_probe(cfg.lighthouse)
    node_probe = None
    if idle_node is not None:
        node_probe = _srun(idle_node, [cfg.node_python, "-c", LIGHTHOUSE_PROBE, cfg.lighthouse],
                           slurm)  # fmt: skip
    managed = None if (node_probe and node_probe.ok) else _managed_lighthouse_address()
    checks.append(check_lighthouse(cfg.lighthouse, cfg.lighthouse_from_env, node_probe, login,
                                   skipped, managed))  # fmt: skip

    tok = check_tokenizer(cfg.device, cfg.assets, lambda p: p.is_file())
    checks.append(tok)

    checks.append(check_training_stack(versions.installed_versions()))
    try:
        reqs = versions.parse_requirements(cfg.requirements.read_text())
        checks.append(check_packages(reqs, versions.installed(reqs), cfg.device, cfg.env,
                                     cfg.requirements.name))  # fmt: skip
    except OSError as e:
        checks.append(Check("python packages", WARN, f"cannot read {cfg.requirements}: "
                            f"{e.strerror}", "run from the ftslurm checkout"))  # fmt: skip

    for name in knobs.SECRETS:
        checks.append(check_secret(name, cfg.env, cfg.device, tok.status == PASS))

    checks.append(_shared_fs(cfg, idle_node, slurm, skipped))
    checks.append(_peer_addresses(cfg, idle_node, rows, parts, slurm, skipped))
    return checks


def _drained(slurm: client.SlurmClient) -> Check | None:
    try:
        return check_drained(slurm.node_reasons())
    except (CommandError, UserError):  # an older sinfo without %H / %E: no such row
        return None


def _peer_addresses(
    cfg: DoctorConfig,
    node: NodeRow | None,
    rows: Sequence[NodeRow],
    parts: Mapping[str, str],
    slurm: client.SlurmClient,
    skipped: str,
) -> Check:
    if node is None:
        return check_peer_addresses(None, None, skipped)
    advertiser = _srun(node, [cfg.node_python, "-c", ADVERTISE_PROBE], slurm, limit=1000)
    info = parse_advertise_probe(advertiser.output) if advertiser.ok else None
    if info is None:
        return check_peer_addresses(advertiser, None)
    others = [r for r in rows if r.name != node.name]
    peer = probe_node(others, parts) or node
    names = [info["host"], info["fqdn"]]
    resolver = _srun(peer, [cfg.node_python, "-c", RESOLVE_PROBE, *names], slurm, limit=2000)
    return check_peer_addresses(advertiser, resolver)


def _shared_fs(cfg: DoctorConfig, node: NodeRow | None, slurm: client.SlurmClient,
               skipped: str) -> Check:  # fmt: skip
    probe_dir = cfg.outputs / ".doctor"
    token = pysecrets.token_hex(8)
    path = probe_dir / f"probe-{token}.txt"
    if node is None:
        return check_shared_fs(path, None, token, skipped)
    try:
        probe_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(token + "\n")
    except OSError as e:
        return Check("shared filesystem", FAIL, f"cannot write {path}: {e.strerror}",
                     "make the outputs folder writable (or set FTSLURM_OUTPUTS)")  # fmt: skip
    try:
        return check_shared_fs(path, _srun(node, ["cat", str(path)], slurm), token)
    finally:
        path.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Output


def counts(checks: Sequence[Check]) -> dict[str, int]:
    return {s: sum(1 for c in checks if c.status == s) for s in (PASS, WARN, FAIL)}


def ok(checks: Sequence[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


def to_json(checks: Sequence[Check], cfg: DoctorConfig) -> dict:
    return {
        "ok": ok(checks),
        "device": cfg.device,
        "lighthouse": cfg.lighthouse,
        "counts": counts(checks),
        "checks": [asdict(c) for c in checks],
    }


def render_text(checks: Sequence[Check], cfg: DoctorConfig) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"ftslurm doctor (DEVICE={cfg.device}, TORCHFT_LIGHTHOUSE={cfg.lighthouse})"]
    for c in checks:
        lines.append(f"  {c.status.upper():4}  {c.name:<{width}}  {c.detail}")
        if c.status != PASS and c.fix:
            lines.append(f"        {'':<{width}}  fix: {c.fix}")
    n = counts(checks)
    verdict = "all pass" if n[PASS] == len(checks) else ("ready" if ok(checks) else "not ready")
    lines.append(f"{len(checks)} checks: {n[PASS]} pass, {n[WARN]} warn, {n[FAIL]} fail: {verdict}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# --patches: the upstream attributes the worker patches, and whether they are here


@dataclass(frozen=True)
class PatchRow:
    """One patch record as `--patches` shows it: `problem` is patches.check's line (None:
    its target and needs are here); `on`: its switch is on with these settings."""

    name: str
    target: str
    owner: str
    kind: str
    why: str
    made_for: dict[str, str]
    upstream: str
    switches: tuple[str, ...]
    on: bool
    problem: str | None

    @property
    def present(self) -> bool:
        return self.problem is None


def observe_patches(records: Sequence[patchlib.Patch] = patchlib.RECORDS) -> dict[str, str | None]:
    """name -> patches.check's line for each record (imports the upstream modules: seconds)."""
    return {r.name: patchlib.check(r) for r in records}


def patch_rows(records: Sequence[patchlib.Patch], problems: Mapping[str, str | None],
               settings: knobs.Settings, device: str) -> list[PatchRow]:  # fmt: skip
    return [PatchRow(r.name, r.target, r.owner, r.kind, r.why, r.versions, r.upstream,
                     r.switches, patchlib.on(r, settings, device), problems.get(r.name))
            for r in records]  # fmt: skip


def patches_ok(rows: Sequence[PatchRow]) -> bool:
    """False when a patch whose switch is on has its target (or a need) missing here."""
    return not any(r.on and not r.present for r in rows)


def patches_json(rows: Sequence[PatchRow], device: str) -> dict:
    missing = [r for r in rows if not r.present]
    return {
        "ok": patches_ok(rows),
        "device": device,
        "counts": {"patches": len(rows), "missing": len(missing),
                   "missing_on": sum(1 for r in missing if r.on)},  # fmt: skip
        "patches": [{**asdict(r), "switches": list(r.switches), "present": r.present}
                    for r in rows],  # fmt: skip
    }


def _made_for(row: PatchRow) -> str:
    return ", ".join(f"{name} {version}" for name, version in row.made_for.items())


def _switch(row: PatchRow) -> str:
    state = "on" if row.on else "off"
    if row.on and all(patchlib.per_run(s) for s in row.switches):
        state = "set by the launcher for a run"
    return f"{','.join(row.switches)} ({state})"


def render_patches(rows: Sequence[PatchRow], device: str) -> str:
    """The table: target, owner, versions made for, upstream issue, present here, switch;
    a missing patch's line under its row."""
    head = ("TARGET", "OWNER", "MADE FOR", "UPSTREAM", "HERE", "SWITCH")
    cells = [(r.target, r.owner, _made_for(r), r.upstream or "-", "yes" if r.present else "NO",
              _switch(r)) for r in rows]  # fmt: skip
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head) - 1)]

    def line(c: Sequence[str]) -> str:
        return "  " + "  ".join(f"{x:<{w}}" for x, w in zip(c, widths, strict=False)) + "  " + c[-1]

    lines = [f"ftslurm doctor --patches (DEVICE={device}): the upstream attributes the training "
             "worker patches (ftslurm/replica/patches.py)", line(head)]  # fmt: skip
    for row, c in zip(rows, cells, strict=True):
        lines.append(line(c))
        if row.problem:
            lines.append(f"      missing: {row.problem}")
    missing = [r for r in rows if not r.present]
    on = sum(1 for r in missing if r.on)
    verdict = "all here" if not missing else ("ready" if not on else "not ready")
    lines.append(f"{len(rows)} patches: {len(rows) - len(missing)} here, {len(missing)} missing "
                 f"({on} with their switch on): {verdict}")  # fmt: skip
    return "\n".join(lines)
