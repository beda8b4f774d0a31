"""`ftslurm doctor`, pure layer: observations -> pass / warn / fail with the fix. No Slurm
needed. sinfo output is recorded from the local cluster (Slurm 22.05,
tests/fixtures/slurm/doctor_sinfo_*.txt, see the README there); GPU nodes' rows (SINFO_GPU)
and a few node states the local cluster cannot take are hand-written in the same shape and
say so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import doctor as d
from ftslurm import versions
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib
from ftslurm.runner import Completed
from ftslurm.slurm import args
from ftslurm.slurm.parse import parse_partitions, parse_sinfo_rows
from tests.fakeslurm import FakeSlurm, recorded
from tests.ftjob import ROOT

pytestmark = pytest.mark.unit

# hand-written, not recorded (no GPU cluster here): `sinfo -N -o '%N|%P|%T|%G'` rows as Slurm
# prints GRES with socket affinity, `gpu:<type>:<count>(S:<sockets>)`
SINFO_GPU = (
    "gpu-0|h100*|idle|gpu:h100:8(S:0-1)\ngpu-1|h100*|mixed|gpu:h100:8(S:0-1)\n"
    "gpu-2|h100*|down*|gpu:h100:8(S:0-1)\ncpu-0|cpu|idle|(null)\n"
)


def test_tools_missing_and_present():
    c = d.check_tools({"sinfo": "/usr/bin/sinfo", "srun": None})
    assert c.status == d.FAIL and "srun" in c.detail and "sudo ftslurm cluster up" in c.fix
    assert d.check_tools({"sinfo": "/usr/bin/sinfo"}).status == d.PASS


def test_controller_up_down_and_unconfigured():
    up = d.check_controller(0, "Slurmctld(primary) at vm is UP\n", "/s/slurm.conf")
    assert up.status == d.PASS and "SLURM_CONF=/s/slurm.conf" in up.detail
    down = d.check_controller(
        1, "Slurmctld(primary) at vm is DOWN\n****\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n",
        "/s/slurm.conf",
    )  # fmt: skip
    assert down.status == d.FAIL and "not answering" in down.detail
    assert "ftslurm cluster up" in down.fix and "SLURM_CONF" in down.fix
    none = d.check_controller(
        1, "scontrol: error: Could not establish a configuration source", None
    )
    assert none.status == d.FAIL and none.fix.startswith("export SLURM_CONF=")


def _sinfo(name: str) -> str:
    """The doctor's own sinfo calls, recorded on the local cluster (tests/fixtures/slurm)."""
    return recorded(f"doctor_sinfo_{name}.txt")


def test_partitions_and_idle_nodes():
    rows = parse_sinfo_rows(_sinfo("nodes_idle"))
    assert [(r.name, r.partition) for r in rows] == [("worker-0", "main"), ("worker-1", "main")]
    up = parse_partitions(_sinfo("partitions_up"))
    assert up == {"main": "up"}
    ok = d.check_partitions(up, rows, 2)
    assert ok.status == d.PASS and ok.detail == (
        "partitions up: main; 2 idle of 2 nodes (worker-0, worker-1)")
    too_many = d.check_partitions(up, rows, 3)
    assert too_many.status == d.WARN and "--array=0-1" in too_many.fix
    down = d.check_partitions(parse_partitions(_sinfo("partitions_down")), rows, 2)
    assert down.status == d.FAIL and down.detail == "no partition is up: main (down)"
    busy = parse_sinfo_rows(_sinfo("nodes_alloc_down"))  # worker-0 allocated, worker-1 down
    wait = d.check_partitions(up, busy, 1)
    assert wait.status == d.WARN and "will wait" in wait.detail
    assert "0 idle of 2 nodes (not usable: worker-1)" in wait.detail
    dead = d.check_partitions(up, [r for r in busy if r.name == "worker-1"], 1)
    assert dead.status == d.FAIL and "State=RESUME" in dead.fix


def test_probes_run_only_on_a_usable_idle_node():
    """`idle*` (recorded: worker-1's slurmd stopped until the controller marked it not
    responding) is not ready for a probe. `idle~` (powered down: power saving, which the
    local cluster does not run) is hand-written in the same `sinfo -N -o '%N|%P|%T|%G'`
    shape, state code from `man sinfo`; it still counts as capacity. A node of a partition
    that is down is not used either."""
    recorded = parse_sinfo_rows(_sinfo("nodes_not_responding"))
    assert [(r.name, r.state, r.ready, r.responding) for r in recorded] == [
        ("worker-0", "idle", True, True), ("worker-1", "idle*", False, False)]
    assert d.probe_node(recorded, {"main": "up"}).name == "worker-0"
    assert d.probe_node(recorded[1:], {"main": "up"}) is None
    rows = parse_sinfo_rows(
        "worker-0|main*|idle*|(null)\nworker-1|main*|idle~|(null)\n"
        "worker-2|old|idle|(null)\nworker-3|main*|idle|(null)\n"
    )
    assert [r.ready for r in rows] == [False, False, True, True]
    assert [r.idle for r in rows] == [True, True, True, True]  # capacity: idle~ powers up
    assert d.probe_node(rows, {"main": "up", "old": "down"}).name == "worker-3"
    assert d.probe_node(rows[:3], {"main": "up", "old": "down"}) is None
    assert d.probe_node(rows[:3], {"main": "up", "old": "up"}).name == "worker-2"


def test_lighthouse_address_of_the_wrong_shape_says_so():
    """A typo in TORCHFT_LIGHTHOUSE is named as such (not "start the Lighthouse"), and the
    launcher refuses it before starting torchrun."""
    bad = d.Probe(False, "InvalidURL: nonnumeric port", "login node")
    cases = (("http://login-0:2951O", "not an address"), ("login-0:29510", "http://<host>:"),
             ("http://login-0", "no port"))
    for addr, said in cases:
        c = d.check_lighthouse(addr, True, None, bad)
        assert c.status == d.FAIL and said in c.detail and "TORCHFT_LIGHTHOUSE=http://" in c.fix
        with pytest.raises(UserError, match=re.escape(said)):
            planlib.build_ft_plan({"TORCHFT_LIGHTHOUSE": addr, "FTSLURM_REPLICA_ID": "0",
                                   "FTSLURM_GROUP_SIZE": "1"}, ROOT)  # fmt: skip
    assert d.check_lighthouse("http://login-0:1", True, None, bad).fix.startswith("start it")


@pytest.mark.parametrize(
    "gres,gpus",
    [("(null)", 0), ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a:4,gpu:b:4", 8),
     ("gpu:h100:4(S:0),shard:8", 4), ("", 0)],
)  # fmt: skip
def test_gres_gpus(gres, gpus):
    assert d.gres_gpus(gres) == gpus


def test_gpus_vs_the_scripts_gpus_per_task():
    wanted = d.script_gpus_per_task(ROOT / "llama3.1-8b-pretraining-torchft.sh")
    assert wanted == 8
    local = parse_sinfo_rows(_sinfo("nodes_alloc_down"))
    cpu = d.check_gpus("cpu", local, wanted, "ft.sh")
    assert cpu.status == d.PASS and "--gpus-per-task=0" in cpu.detail
    no_gres = d.check_gpus("cuda", local, wanted, "ft.sh")
    assert no_gres.status == d.FAIL and "Gres=gpu:8" in no_gres.fix and "DEVICE=cpu" in no_gres.fix
    mixed = d.check_gpus("cuda", parse_sinfo_rows(SINFO_GPU), wanted, "ft.sh")
    assert mixed.status == d.WARN and "3 nodes" in mixed.detail
    gpu_only = parse_sinfo_rows(SINFO_GPU.split("cpu-0")[0])
    assert d.check_gpus("cuda", gpu_only, wanted, "ft.sh").status == d.PASS
    assert d.check_gpus("cuda", gpu_only, 16, "ft.sh").status == d.FAIL


def test_lighthouse_verdicts():
    addr = "http://login-0:1234"
    node_ok = d.Probe(True, "HTTP 200", "worker-0")
    node_bad = d.Probe(
        False, "URLError: <urlopen error [Errno 111] Connection refused>", "worker-0"
    )
    login_ok, login_bad = d.Probe(True, "HTTP 200", "login node"), d.Probe(False, "URLError", "x")
    c = d.check_lighthouse(addr, True, node_ok, login_bad)
    assert c.status == d.PASS and "from compute node worker-0" in c.detail
    down = d.check_lighthouse(addr, True, node_bad, login_bad)
    assert down.status == d.FAIL and "ftslurm lighthouse start" in down.fix
    assert "Connection refused" in down.detail
    unreachable = d.check_lighthouse(addr, True, node_bad, login_ok)
    assert unreachable.status == d.FAIL and "--advertise" in unreachable.fix
    managed = "http://login-0:29510"  # the default address as text: no port is bound
    elsewhere = d.check_lighthouse(addr, False, node_bad, login_bad, "", managed)
    assert f"export TORCHFT_LIGHTHOUSE={managed}" in elsewhere.fix
    assert "(not set: the default)" in elsewhere.detail
    unprobed = d.check_lighthouse(addr, True, None, login_ok, "no idle compute node")
    assert unprobed.status == d.WARN and "no idle compute node" in unprobed.detail


def test_tokenizer_paths_follow_the_launcher(tmp_path):
    from ftslurm.replica import plan

    files, fix = d.tokenizer_paths("cuda", tmp_path / "assets")
    assert files[0] == plan.hf_assets(tmp_path) / "tokenizer.json"
    assert "ftslurm assets download" in fix and "HF_TOKEN" in fix
    files, fix = d.tokenizer_paths("cpu", tmp_path / "assets")
    assert files[0] == plan.local_assets(tmp_path)[0] / "tokenizer.json"
    assert fix.startswith("ftslurm assets make-local")
    missing = d.check_tokenizer("cpu", tmp_path / "assets", lambda p: False)
    assert missing.status == d.FAIL and "tokenizer.json" in missing.detail
    assert d.check_tokenizer("cpu", tmp_path, lambda p: True).status == d.PASS


def test_requirements_parse_and_versions():
    reqs = versions.parse_requirements((ROOT / "requirements.txt").read_text())
    names = [r.name for r in reqs]
    assert names[:3] == ["torch", "torchtitan", "torchft-nightly"]
    assert "-e" not in " ".join(names) and versions.Requirement("tokenizers", ">=0.20") in reqs
    text = "a==1.0 ; python_version<'3.11'\nb[x]>=2\n# c\n-r other.txt\nhttps://x/y.whl\n"
    R = versions.Requirement
    assert versions.parse_requirements(text) == [R("a", "==1.0"), R("b", ">=2")]


@pytest.mark.parametrize("fn", [versions.satisfies, versions.satisfies_simple])
@pytest.mark.parametrize(
    "version,spec,ok",
    [("2.13.0+cpu", "==2.13.0", True), ("2.13.0", "==2.13.0", True), ("2.13.1", "==2.13.0", False),
     ("0.23.3", ">=0.20", True), ("0.19.9", ">=0.20", False), ("2026.10.26", "==2026.10.26", True),
     ("2.4.0", "~=2.4", True), ("3.0", "~=2.4", False), ("1.0", "", True),
     ("2.13.5", "==2.13.*", True), ("1.5", ">=1,<2", True), ("2.0", ">=1,<2", False)],
)  # fmt: skip
def test_version_comparison(fn, version, spec, ok):
    assert fn(version, spec) is ok


def test_packages_check_local_labels_optional_and_wrong():
    reqs = [versions.Requirement("torch", "==2.13.0"), versions.Requirement("wandb", "==0.31.0"),
            versions.Requirement("torchft-nightly", "==2026.10.26")]  # fmt: skip
    have = {"torch": "2.13.0+cpu", "wandb": None, "torchft-nightly": "2026.10.26"}
    c = d.check_packages(reqs, have, "cpu", {})
    assert c.status == d.PASS and "wandb not installed (needed only for W&B logging" in c.detail
    c = d.check_packages(reqs, have, "cpu", {"WANDB_API_KEY": "x"})
    assert c.status == d.FAIL and "wandb: not installed" in c.detail
    c = d.check_packages(reqs, {**have, "torchft-nightly": "2026.11.01"}, "cpu", {})
    assert c.status == d.FAIL and "torchft-nightly 2026.11.01 (wants ==2026.10.26)" in c.detail
    assert "pip install -r requirements.txt" in c.fix
    plot = d.check_packages([versions.Requirement("matplotlib", ">=3.8")], {"matplotlib": None},
                            "cuda", {})  # fmt: skip
    assert plot.status == d.PASS and "needed only for `ftslurm report --plot`" in plot.detail


def test_secrets_are_only_set_or_not_set():
    secret = "hf_thisMustNeverBePrinted"
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        c = d.check_secret(name, {name: secret}, "cuda", False)
        assert c.status == d.PASS and c.detail.startswith("set") and secret not in repr(c)
    assert d.check_secret("WANDB_API_KEY", {}, "cuda", False).status == d.PASS
    need = d.check_secret("HF_TOKEN", {}, "cuda", tokenizer_ok=False)
    assert need.status == d.WARN and "export HF_TOKEN=hf_..." in need.fix
    assert d.check_secret("HF_TOKEN", {}, "cpu", tokenizer_ok=False).status == d.PASS
    assert d.check_secret("HF_TOKEN", {"HF_TOKEN": " "}, "cpu", True).status == d.WARN


def test_shared_fs_verdicts(tmp_path):
    p = tmp_path / "probe.txt"
    assert d.check_shared_fs(p, d.Probe(True, "abc", "worker-0"), "abc").status == d.PASS
    bad = d.check_shared_fs(p, d.Probe(False, "cat: x: No such file", "worker-0"), "abc")
    assert bad.status == d.FAIL and "same path" in bad.fix
    assert d.check_shared_fs(p, None, "abc", "no idle node").status == d.WARN


def _probe(script: str, *args: str) -> str:
    """A doctor probe's real output, run here as srun runs it on a node."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=30, check=True)  # fmt: skip
    return out.stdout.strip()


@pytest.mark.process
def test_address_probes_run_and_parse():
    import socket

    info = d.parse_advertise_probe(_probe(d.ADVERTISE_PROBE))
    host = socket.gethostname()
    assert info is not None
    assert (info["host"], info["fqdn"], info["ipv6"]) == (host, socket.getfqdn(host), "ok")
    seen = d.parse_resolve_probe(_probe(d.RESOLVE_PROBE, host, "no-such-host.invalid"))
    assert seen is not None
    resolved, boot = seen
    assert boot == info["boot"]  # one machine
    assert isinstance(resolved[host], list) and resolved[host]
    assert isinstance(resolved["no-such-host.invalid"], str)  # the resolver's error text
    for bad in ("", "Traceback (most recent call last):", '{"host": "w"', '{"host": "w"}', "[1]"):
        assert d.parse_advertise_probe(bad) is None, bad
        assert d.parse_resolve_probe(bad) is None, bad


SOPERATOR_FQDN = "worker-1.soperator-worker-svc.soperator.svc.cluster.local"  # torchft-logs note


def _advertised(host: str = "worker-1", fqdn: str = SOPERATOR_FQDN, ipv6: str = "ok",
                boot: str = "boot-a", where: str = "worker-1") -> d.Probe:  # fmt: skip
    return d.Probe(True, json.dumps({"host": host, "fqdn": fqdn, "ipv6": ipv6, "boot": boot}),
                   where)  # fmt: skip


def _resolved(names: dict, boot: str = "boot-b", where: str = "worker-0") -> d.Probe:
    return d.Probe(True, json.dumps({"resolved": names, "boot": boot}), where)


def test_peer_address_verdicts():
    import errno
    import os

    both = {"worker-1": ["10.0.3.7"], SOPERATOR_FQDN: ["10.0.3.7"]}
    good = d.check_peer_addresses(_advertised(), _resolved(both))
    assert good.status == d.PASS
    assert good.detail == (
        f"worker-1 advertises http://worker-1:<port> and store {SOPERATOR_FQDN}:<port>; on "
        f"worker-0: worker-1 -> 10.0.3.7; {SOPERATOR_FQDN} -> 10.0.3.7; IPv6 sockets work")
    unknown = d.check_peer_addresses(_advertised(), _resolved(
        {"worker-1": "[Errno -2] Name or service not known", SOPERATOR_FQDN: ["10.0.3.7"]}))
    assert unknown.status == d.FAIL
    assert "worker-1 does not resolve on worker-0 ([Errno -2] Name or service not known)" in (
        unknown.detail)
    assert "short hostname and FQDN" in unknown.fix
    # the Debian trap: the FQDN is localhost, or the name is 127.0.1.1, on another machine
    loop = d.check_peer_addresses(_advertised(fqdn="localhost"), _resolved(
        {"worker-1": ["10.0.3.7"], "localhost": ["127.0.0.1", "::1"]}))
    assert loop.status == d.FAIL
    assert "localhost resolves on worker-0 to loopback only (127.0.0.1, ::1)" in loop.detail
    # ... which is right when both nodes are one machine (the local cluster)
    local = d.check_peer_addresses(
        _advertised(fqdn="localhost", boot="same"),
        _resolved({"worker-1": ["127.0.0.1"], "localhost": ["127.0.0.1"]}, boot="same"))
    assert local.status == d.PASS and local.detail.endswith("(one machine); IPv6 sockets work")
    alone = d.check_peer_addresses(_advertised(), _resolved(both, where="worker-1"))
    assert alone.status == d.WARN and "one idle node" in alone.detail
    no_v6 = str(OSError(errno.EAFNOSUPPORT, os.strerror(errno.EAFNOSUPPORT)))
    v6 = d.check_peer_addresses(_advertised(ipv6=no_v6), None)
    assert v6.status == d.FAIL and no_v6 in v6.detail and "disable_ipv6=0" in v6.fix
    broken = d.check_peer_addresses(d.Probe(False, "srun: error: Unable to allocate", "gpu-3"),
                                    None)  # fmt: skip
    assert broken.status == d.WARN and "Unable to allocate" in broken.detail
    no_peer = d.check_peer_addresses(_advertised(), d.Probe(False, "srun: error: x", "worker-0"))
    assert no_peer.status == d.WARN and "not resolved on a peer (srun: error: x)" in no_peer.detail
    skipped = d.check_peer_addresses(None, None, "the Slurm controller is not answering")
    assert skipped.status == d.WARN and "controller" in skipped.fix


def _on_this_machine(cmd: list[str]) -> Completed:
    """An srun probe run here, as srun would run it on the node."""
    argv = cmd[cmd.index("--quiet") + 1 :]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return Completed(cmd, out.returncode, out.stdout, out.stderr)


def _doctor(tmp_path, monkeypatch, fake: FakeSlurm, conf: Path) -> dict[str, d.Check]:
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(tmp_path / "lighthouse"))
    fake.install(monkeypatch)
    cfg = d.DoctorConfig(device="cpu", lighthouse="http://127.0.0.1:9", outputs=tmp_path,
                         node_python=sys.executable, env={"SLURM_CONF": str(conf)})  # fmt: skip
    return {c.name: c for c in d.run_checks(cfg)}


UP = "Slurmctld(primary) at vm is UP\n"


@pytest.mark.process
def test_run_checks_probe_an_idle_node_through_slurm(tmp_path, monkeypatch):
    """The runner layer on recorded sinfo (2 idle nodes): the probes go to those nodes
    through srun (here: run on this machine) and are judged."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    fake = FakeSlurm().on(args.ping_cmd(), UP).on(["srun"], _on_this_machine)
    fake.on(args.sinfo_rows_cmd(), _sinfo("nodes_idle"))
    fake.on(args.sinfo_partitions_cmd(), _sinfo("partitions_up"))
    checks = _doctor(tmp_path, monkeypatch, fake, conf)
    assert checks["slurm client tools"].detail.endswith("in /fake/bin")
    assert checks["slurm controller"].detail == f"{UP.strip()} (SLURM_CONF={conf})"
    assert checks["partitions and idle nodes"].status == d.PASS
    assert checks["shared filesystem"].status == d.PASS
    assert "is read on worker-0" in checks["shared filesystem"].detail
    assert checks["replica addresses"].detail.startswith("worker-0 advertises http://")
    assert " on worker-1: " in checks["replica addresses"].detail  # a peer resolved them
    srun = [c[:11] for c in fake.calls if c[0] == "srun"]
    assert srun == [args.srun_probe_cmd("worker-0", "main", [])] * 3 + [
        args.srun_probe_cmd("worker-1", "main", [])]
    assert not list((tmp_path / ".doctor").iterdir())  # the shared-fs probe file is removed


def test_run_checks_skip_what_a_dead_controller_cannot_answer(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    down = Completed([], 1, "Slurmctld(primary) at vm is DOWN\n", "")
    fake = FakeSlurm().on(args.ping_cmd(), down)
    checks = _doctor(tmp_path, monkeypatch, fake, conf)
    assert checks["slurm controller"].status == d.FAIL
    assert checks["partitions and idle nodes"].detail.startswith("not checked: the Slurm")
    assert checks["shared filesystem"].status == d.WARN
    assert fake.calls == [args.ping_cmd()]  # no sinfo, no srun
    fake = FakeSlurm().on(args.ping_cmd(), UP)  # up, but sinfo fails
    checks = _doctor(tmp_path, monkeypatch, fake, conf)
    assert checks["partitions and idle nodes"].status == d.FAIL
    assert "`sinfo -h -N -o '%N|%P|%T|%G'` failed (exit code 1)" in (
        checks["partitions and idle nodes"].detail)
    fake = FakeSlurm(missing=["scontrol"])
    checks = _doctor(tmp_path, monkeypatch, fake, tmp_path / "none.conf")
    assert checks["slurm client tools"].status == d.FAIL
    assert checks["slurm controller"].detail == f"SLURM_CONF={tmp_path / 'none.conf'} is not a file"
    assert fake.calls == []


def test_render_and_json_say_the_fix_and_the_verdict():
    cfg = d.DoctorConfig(device="cpu", lighthouse="http://login-0:1")
    checks = [d.Check("a", d.PASS, "fine"), d.Check("b", d.FAIL, "broken", "do X")]
    text = d.render_text(checks, cfg)
    assert "FAIL  b  broken" in text and "fix: do X" in text and "not ready" in text
    assert "fix:" not in text.split("\n")[1]  # no fix line under a pass
    data = d.to_json(checks, cfg)
    assert data["ok"] is False and data["counts"] == {"pass": 1, "warn": 0, "fail": 1}
    assert data["checks"][1] == {"name": "b", "status": "fail", "detail": "broken", "fix": "do X"}
    assert "all pass" in d.render_text(checks[:1], cfg)


@pytest.mark.process
@pytest.mark.timeout(60)
def test_doctor_help_has_an_example():
    out = subprocess.run([sys.executable, "-m", "ftslurm", "doctor", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (
        out.returncode == 0 and "Examples:" in out.stdout and "ftslurm doctor --json" in out.stdout
    )


@pytest.mark.process
@pytest.mark.timeout(60)
def test_doctor_without_slurm_tools_fails_with_the_fix(tmp_path):
    """No Slurm client in PATH: tools and controller fail, the rest is still judged; exit 1."""
    bin_dir = tmp_path / "bin"  # python3 alone: the interpreter's own folder may hold srun
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {"PATH": str(bin_dir), "DEVICE": "cpu", "HOME": str(tmp_path),
           "FTSLURM_OUTPUTS": str(tmp_path),
           "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:9"}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "ftslurm", "doctor", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 1, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["slurm client tools"]["status"] == "fail"
    assert checks["slurm controller"]["status"] == "fail"
    assert checks["partitions and idle nodes"]["status"] == "warn"
    assert checks["lighthouse"]["status"] == "fail"


def test_config_reads_device_and_lighthouse_through_the_registry():
    """DEVICE and TORCHFT_LIGHTHOUSE by the registry's rules (case, blanks as unset); a DEVICE
    it refuses is kept as typed, for the command's own one-line error (or a --device)."""
    cfg = d.DoctorConfig.from_env({"DEVICE": " CPU ", "TORCHFT_LIGHTHOUSE": "http://h:1"})
    assert (cfg.device, cfg.lighthouse, cfg.lighthouse_from_env) == ("cpu", "http://h:1", True)
    cfg = d.DoctorConfig.from_env({"TORCHFT_LIGHTHOUSE": " "})
    assert (cfg.device, cfg.lighthouse_from_env) == ("cuda", False)
    assert cfg.lighthouse == d.knobs.KNOBS["TORCHFT_LIGHTHOUSE"].default
    assert d.DoctorConfig.from_env({"DEVICE": "GPU"}).device == "gpu"
    assert d.DoctorConfig.from_env({"DEVICE": "gpu"}, device="cpu").device == "cpu"
    wandb = d.OPTIONAL_PACKAGES["wandb"]
    assert wandb("cpu", {"WANDB_API_KEY": "k"}) is None and wandb("cpu", {"WANDB_API_KEY": ""})
