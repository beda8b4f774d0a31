"""Healing on one device: checkpoint transfer bandwidth, and the two healing bugs on and off.

The bugs are those ftslurm/replica/worker/fixes.py numbers 1 (the survivor crashes while it serves
a heal) and 2 (a heal sends a stale optimizer state). Two fault-tolerant replicas (per-step
mode, FSDP) of the launcher the sbatch scripts exec (`python -m ftslurm.replica job`) share
this machine's one device, with the real torchft Lighthouse on a free port. Once both have
committed steps with identical parameter checksums, replica 1's training worker is SIGKILLed,
replica 1 is started again (attempt 1) and heals from replica 0 over torchft's HTTP checkpoint
transport. Then:

- transfer: seconds from the joiner's torchft log (`fetching checkpoint from ... took X s`:
  HTTP fetch + deserialisation), bytes as the survivor served them (the HTTP body, counted
  by bench/gpu_model.py: `[ftslurm-bench] checkpoint served: bytes=N`; torchft logs no size),
  next to the expected size (parameters x 12 bytes: fp32 weights + AdamW's two fp32 moments),
  and GB/s = bytes / fetch seconds;
- bugs: with a fix switched off (scenario `async-quorum-off`: FTSLURM_FIX_ASYNC_QUORUM=0,
  `optimizer-state-off`: FTSLURM_FIX_OPTIMIZER_STATE=0) whether the survivor crashed and
  whether the replicas' checksums differ after the heal; with every fix on (`fixes-on`) that
  they are identical.

Honest set-up on one GPU: NCCL refuses two ranks on one GPU in a communicator, so the
cross-replica process group is gloo over the GPU tensors (PROCESS_GROUP=gloo, the launcher's
knob; `--pg nccl` tries NCCL). torchtitan 0.2.2 applies FSDP only when dp_shard > 1, so
bench/gpu_model.py forces FSDP2 over each replica's 1-rank mesh (FTSLURM_BENCH_FORCE_FSDP=1)
to put the FSDP state-dict path of bug 1 on the device. The checkpoint transport (HTTP over
loopback, device->CPU staging on the survivor, CPU->device load on the joiner) is the one
torchft uses between nodes, minus the network.

Run (GPU, one scenario per command so each ends well inside 10 minutes):
  python bench/gpu_heal.py --device cuda --scenario fixes-on --json outputs/bench/heal-on.json
  python bench/gpu_heal.py --device cuda --scenario async-quorum-off
  python bench/gpu_heal.py --device cuda --scenario optimizer-state-off
Run (CPU smoke, ~2 min on 2 cores): python bench/gpu_heal.py --device cpu --smoke
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_overhead import (  # noqa: E402
    ANSI,
    Launch,
    base_env,
    ensure_local_assets,
    kill_pid,
    model_args,
    parse_params,
    parse_steps,
    say,
    start_lighthouse,
    versions,
    write_json,
)

from ftslurm import lighthouse  # noqa: E402
from ftslurm.replica.worker import checksum  # noqa: E402

SCENARIOS = {
    "fixes-on": {},
    "async-quorum-off": {"FTSLURM_FIX_ASYNC_QUORUM": "0"},
    "optimizer-state-off": {"FTSLURM_FIX_OPTIMIZER_STATE": "0"},
}
MANAGER_RE = re.compile(r"\[ftslurm\] (torchft quorum: .+|heal transport: .+)")
FETCH_RE = re.compile(r"fetching checkpoint from (?P<url>\S+) took (?P<s>[\d.e+-]+)s")
SERVED_RE = re.compile(
    r"\[ftslurm-bench\] checkpoint served: bytes=(?P<n>\d+) seconds=(?P<s>[\d.]+)"
)
STAGE_RE = re.compile(r"transferring state_dict to CPU took (?P<s>[\d.e+-]+)s")
HEAL_RE = re.compile(r"healing is required step=\d+, max_step=(?P<step>\d+)")
TIME_RE = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)[,.](\d{3})")
CRASH_MARKERS = ("Traceback", "RuntimeError", "got mixed torch.Tensor and DTensor")
BYTES_PER_PARAM = 12  # fp32 weight + AdamW exp_avg + exp_avg_sq (fp32)


def line_time(line: str) -> float | None:
    """Wall-clock time of a log line (torchtitan's `2026-11-23 08:43:06,320` or torchft's
    Rust `2026-11-23T08:43:06.127`)."""
    m = TIME_RE.search(line)
    if not m:
        return None
    return datetime.strptime(f"{m[1]} {m[2]}", "%Y-%m-%d %H:%M:%S").timestamp() + int(m[3]) / 1e3


def first_time(text: str, needle: str) -> float | None:
    for line in text.splitlines():
        if needle in line:
            return line_time(line)
    return None


def checksums(text: str) -> dict[tuple[int, str], str]:
    return {(r.step, r.scope): r.sha256 for r in checksum.parse(text.splitlines())}


def common_after(a: str, b: str, step: int) -> dict[tuple[int, str], tuple[str, str]]:
    ca, cb = checksums(a), checksums(b)
    return {k: (ca[k], cb[k]) for k in sorted(set(ca) & set(cb)) if k[0] > step}


@dataclass
class HealResult:
    """One scenario's outcome."""

    scenario: str
    switches: dict[str, str]
    fsdp_applied: bool
    healed: bool = False
    heal_step: int | None = None
    survivor_alive: bool = True
    survivor_error: str | None = None
    joiner_error: str | None = None
    checksums_before: int = 0
    checksums_before_equal: int = 0
    checksums_after: int = 0
    checksums_after_equal: int = 0
    fetch_s: float | None = None
    stage_s: float | None = None
    bytes_measured: int | None = None
    serve_s: float | None = None
    bytes_expected: int | None = None
    gbps: float | None = None
    params: int | None = None
    restart_to_healed_s: float | None = None
    failed_at: str | None = None  # None: got as far as the heal after the kill
    heals_done: int = 0
    survivor_exception: str | None = None  # first exception the survivor logged, alive or not
    heals: list[dict] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    # the survivor's torchft Manager as the launcher read it back: quorum mode, heal transport
    manager: list[str] = field(default_factory=list)

    @property
    def identical_after(self) -> bool:
        return self.checksums_after > 0 and self.checksums_after_equal == self.checksums_after


# what a survivor logs, and survives, when its peer is killed: not bug 1
PEER_LOSS = re.compile(r"peer|Broken pipe|[Tt]ime(?:d)? ?out|Timeout|aborted", re.I)


def error_line(text: str, ignore: re.Pattern[str] | None = None) -> str | None:
    """The root cause in a log: the first exception line (`KeyError: 46`,
    `RuntimeError: aten.mm.default got mixed torch.Tensor and DTensor`), not the
    follow-on timeouts."""
    exc = re.compile(r"^(?:\[rank\d+\]: )?(?P<e>[A-Za-z_.]*(?:Error|Exception)\b.*)$")
    for line in ANSI.sub("", text).splitlines():
        m = exc.match(line.strip())
        if m and not m["e"].startswith("torch.distributed.elastic"):
            if ignore is not None and ignore.search(m["e"]):
                continue
            return m["e"][:300]
    return None


class Heal:
    """Lighthouse + two replicas for one scenario; every process is stopped by pid."""

    def __init__(self, a: argparse.Namespace, out: Path, scenario: str) -> None:
        self.a, self.out, self.scenario = a, out / scenario, scenario
        self.out.mkdir(parents=True, exist_ok=True)
        self.launches: list[Launch] = []
        self.info: lighthouse.LighthouseInfo | None = None

    def env(self, replica: int, attempt: int) -> dict[str, str]:
        a = self.a
        menv, margs = model_args(a.device, a.smoke, a.layers, a.extra.split())
        if a.device == "cuda":
            margs += [f"--training.seq_len={a.seq_len}"]
        env = base_env(a.device, self.out)
        env.update(menv)
        env.update(
            STEPS="100000",  # stopped by us
            FT_MODE="per-step",
            FTSLURM_REPLICA_ID=str(replica),
            FTSLURM_GROUP_SIZE="2",
            FTSLURM_ATTEMPT=str(attempt),
            FTSLURM_RUN_ID=f"heal-{self.scenario}",
            TORCHFT_LIGHTHOUSE=self.info.address if self.info else "",
            PROCESS_GROUP=a.pg,
            FTSLURM_CHECKSUM_EVERY=str(a.checksum_every),
            # the GPU default, on CPU too: the smoke test then runs the path GPUs take
            FTSLURM_CHECKSUM_ASYNC="1",
            FTSLURM_BENCH_FORCE_FSDP="1" if a.fsdp else "0",
            FTSLURM_EXTRA_ARGS=" ".join(margs),
            FTSLURM_HEAL_TRANSPORT="http",  # what it measures: the HTTP body and fetch line
        )
        if a.device == "cuda":
            env["FTSLURM_PRESET"] = "llama3_8b_ft"
        if a.pg_timeout_s:
            # the launcher's knob; torchtitan passes it to torchft's Manager as its timeout
            # (cross-replica collectives over gloo on GPU tensors, the checkpoint transport)
            env["PG_TIMEOUT_S"] = str(a.pg_timeout_s)
        env.update(SCENARIOS[self.scenario])
        return env

    def start(self, replica: int, attempt: int = 0) -> Launch:
        log = self.out / f"replica{replica}.attempt{attempt}.log"
        launch = Launch("job", self.env(replica, attempt), log)
        self.launches.append(launch)
        return launch

    def close(self) -> None:
        for launch in self.launches:
            launch.stop()
        if self.info is not None:
            say(f"Lighthouse: {lighthouse.stop(self.out / 'lighthouse')}")

    def wait(self, cond, timeout: float, what: str, survivor: Launch | None = None) -> bool:
        """Poll `cond`; False on timeout or when the survivor's launcher has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for launch in self.launches:
                launch.track()
            if cond():
                return True
            if survivor is not None and survivor.proc.poll() is not None:
                say(f"{what}: the survivor (replica 0) ended")
                return False
            time.sleep(0.1)
        say(f"timed out after {timeout:.0f} s waiting for {what}")
        return False

    def run(self) -> HealResult:
        a = self.a
        self.info = start_lighthouse(self.out)
        r0, r1 = self.start(0), self.start(1)
        res = HealResult(self.scenario, SCENARIOS[self.scenario], fsdp_applied=False)
        both = lambda n: len(common_after(r0.text(), r1.text(), 0)) >= n  # noqa: E731
        if not self.wait(lambda: both(a.before), a.start_timeout, "both replicas to commit", r0):
            # e.g. bug 1 already at the start-up heal (replica 1 joins at step 0 and copies
            # replica 0's state): record what happened instead of giving up
            self.wait(lambda: r0.proc.poll() is not None, 15, "the survivor to end")
            res.failed_at = "start-up (replica 1's first sync from replica 0)"
            res.fsdp_applied = "Applied FSDP to the model" in r0.text()
            res.survivor_alive = r0.proc.poll() is None
            res.survivor_error = None if res.survivor_alive else error_line(r0.text())
            res.joiner_error = error_line(r1.text())
            res.logs = [str(x.log) for x in self.launches]
            res.manager = MANAGER_RE.findall(r0.text())[:2]
            return res
        before = common_after(r0.text(), r1.text(), 0)
        res.checksums_before = len(before)
        res.checksums_before_equal = sum(x == y for x, y in before.values())
        res.fsdp_applied = "Applied FSDP to the model" in r0.text()
        res.params = parse_params(r0.text())

        joiner = r1
        for cycle in range(1, a.heals + 1):
            joiner = self.heal_once(res, r0, joiner, cycle)
            if joiner is None or not res.survivor_alive:
                break
        res.survivor_alive = r0.proc.poll() is None
        if not res.survivor_alive:
            res.survivor_error = error_line(r0.text())
        res.survivor_exception = error_line(r0.text(), ignore=PEER_LOSS)
        res.logs = [str(x.log) for x in self.launches]
        res.manager = MANAGER_RE.findall(r0.text())[:2]
        return res

    def heal_once(self, res: HealResult, r0: Launch, r1: Launch, cycle: int) -> Launch | None:
        """Kill replica 1's worker, start its next attempt, wait for the heal and for common
        checksums after it; the figures go into `res`. Returns the new attempt, or None when
        it did not heal."""
        a = self.a
        victim = r1.worker_pid()
        if victim is None:
            raise SystemExit("could not find replica 1's training worker")
        say(
            f"heal {cycle}/{a.heals}: killing replica 1's training worker (pid {victim}) "
            f"at step {self.last_step(r0)}"
        )
        kill_pid(victim, signal.SIGKILL)
        r1.wait(60)
        served_before = len(SERVED_RE.findall(r0.text()))

        r1b = self.start(1, attempt=cycle)
        restarted = time.time()
        healed = self.wait(
            lambda: "Loaded state dict" in r1b.text(), a.heal_timeout, "replica 1 to heal", r0
        )
        text1 = r1b.text()
        if not healed:
            # the survivor may crash while serving the heal (bug 1): give it a moment to die
            self.wait(lambda: r0.proc.poll() is not None, 15, "the survivor to end")
            res.healed = False
            res.survivor_alive = r0.proc.poll() is None
            res.failed_at = f"heal {cycle}"
            res.joiner_error = error_line(text1)
            return None
        res.healed = True
        res.heals_done = cycle
        m = HEAL_RE.search(text1)
        res.heal_step = int(m["step"]) if m else None
        t_loaded = first_time(text1, "Loaded state dict")
        res.restart_to_healed_s = t_loaded - restarted if t_loaded else None
        fetches = [float(m["s"]) for m in FETCH_RE.finditer(text1) if "/full" in m["url"]]
        fetches = fetches or [float(m["s"]) for m in FETCH_RE.finditer(text1)]
        res.fetch_s = sum(fetches) if fetches else None
        stages = [float(m["s"]) for m in STAGE_RE.finditer(r0.text())]
        res.stage_s = stages[-1] if stages else None
        served = list(SERVED_RE.finditer(r0.text()))[served_before:]
        if served:
            res.bytes_measured = int(served[-1]["n"])
            res.serve_s = float(served[-1]["s"])
        res.bytes_expected = res.params * BYTES_PER_PARAM if res.params else None
        res.gbps = (
            res.bytes_measured / res.fetch_s / 1e9 if res.bytes_measured and res.fetch_s else None
        )
        after_from = res.heal_step if res.heal_step is not None else 0
        self.wait(
            lambda: len(common_after(r0.text(), r1b.text(), after_from)) >= a.after,
            a.after_timeout,
            f"{a.after} common checksums after heal {cycle}",
            r0,
        )
        after = common_after(r0.text(), r1b.text(), after_from)
        equal = sum(x == y for x, y in after.values())
        res.checksums_after += len(after)
        res.checksums_after_equal += equal
        res.survivor_alive = r0.proc.poll() is None
        res.heals.append(
            {
                "heal": cycle,
                "step": res.heal_step,
                "bytes": res.bytes_measured,
                "fetch_s": res.fetch_s,
                "gbps": res.gbps,
                "restart_to_healed_s": res.restart_to_healed_s,
                "checksums_after": len(after),
                "checksums_after_equal": equal,
            }
        )
        return r1b

    @staticmethod
    def last_step(launch: Launch) -> int | None:
        steps = parse_steps(launch.text())
        return steps[-1].step if steps else None


def verdict(r: HealResult) -> str:
    if r.scenario == "async-quorum-off":
        if not r.survivor_alive or not r.healed:
            return "bug 1 REPRODUCED (survivor crashed or a heal failed)"
        if r.survivor_exception:
            return f"bug 1 REPRODUCED (survivor survived an exception: {r.survivor_exception})"
        return f"bug 1 not seen in {r.heals_done} heal(s) (a race: more --heals, more chances)"
    if r.scenario == "optimizer-state-off":
        if not r.healed or not r.checksums_after:
            return "inconclusive (no heal or no checksums after it)"
        return (
            "bug 2 REPRODUCED (replicas differ after the heal)"
            if r.checksums_after_equal < r.checksums_after
            else "bug 2 not seen (replicas identical)"
        )
    ok = r.healed and r.survivor_alive and r.identical_after
    return "OK: replicas identical after the heal" if ok else "FAILED"


def report(r: HealResult) -> None:
    sw = " ".join(f"{k}={v}" for k, v in r.switches.items()) or "all fixes on"
    print(f"scenario {r.scenario} ({sw}); FSDP applied: {'yes' if r.fsdp_applied else 'no'}")
    print(f"  survivor's torchft Manager: {'; '.join(r.manager) or 'not logged'}")
    if r.failed_at:
        print(f"  FAILED during {r.failed_at}")
    print(f"  before the kill: {r.checksums_before_equal}/{r.checksums_before} checksums identical")
    if r.failed_at and r.failed_at.startswith("start-up"):
        survivor = "alive" if r.survivor_alive else "CRASHED: " + str(r.survivor_error)
        print(f"  no kill/heal cycle ran; survivor {survivor}")
    else:
        print(
            f"  heals: {r.heals_done} of {r.heals_done + (0 if r.healed else 1)} "
            f"(last at step {r.heal_step}); "
            f"survivor {'alive' if r.survivor_alive else 'CRASHED: ' + str(r.survivor_error)}"
        )
    if r.joiner_error:
        print(f"  joiner error: {r.joiner_error}")
    if r.survivor_exception and r.survivor_alive:
        print(f"  survivor logged: {r.survivor_exception}")
    if r.heals:
        print(
            f"  after the heals: {r.checksums_after_equal}/{r.checksums_after} checksums identical"
        )
    for h in r.heals:
        print(
            f"heal {h['heal']} at step {h['step']}: transfer bytes {h['bytes'] or 0:,}  "
            f"seconds {h['fetch_s'] or 0:.3f}  GB/s {h['gbps'] or 0:.3f}  restart -> healed "
            f"{h['restart_to_healed_s'] or 0:.1f} s  checksums after "
            f"{h['checksums_after_equal']}/{h['checksums_after']} identical"
        )
    if r.fetch_s is not None:
        print(
            f"last heal: expected bytes {r.bytes_expected or 0:,} = {r.params or 0:,} params x "
            f"{BYTES_PER_PARAM}; survivor: device->CPU staging {r.stage_s or 0:.3f} s, "
            f"serving {r.serve_s or 0:.3f} s"
        )
    print(f"verdict: {verdict(r)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="small and quick (the test suite)")
    ap.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="[fixes-on]; repeatable"
    )
    ap.add_argument("--layers", type=int, default=2, help="layers of the 8B shape (cuda) [2]")
    ap.add_argument("--seq-len", type=int, default=2048, help="tokens per sample (cuda) [2048]")
    ap.add_argument("--pg", choices=("gloo", "nccl"), default="gloo", help="cross-replica PG")
    ap.add_argument(
        "--pg-timeout-s",
        type=int,
        help="PG_TIMEOUT_S for the replicas [cuda 60: gloo moves GBs of gradients; cpu: TOML]",
    )
    ap.add_argument("--no-fsdp", dest="fsdp", action="store_false", help="no forced FSDP")
    ap.add_argument("--checksum-every", type=int, help="steps between checksums [cuda 2, cpu 1]")
    ap.add_argument("--heals", type=int, default=1, help="kill/heal cycles of replica 1 [1]")
    ap.add_argument("--before", type=int, default=2, help="common checksums before the kill")
    ap.add_argument("--after", type=int, default=2, help="common checksums after the heal")
    ap.add_argument("--start-timeout", type=float, default=240.0)
    ap.add_argument("--heal-timeout", type=float, default=180.0)
    ap.add_argument("--after-timeout", type=float, default=150.0)
    ap.add_argument("--out", type=Path, help="folder for logs [a temporary folder]")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--extra", default="", help="more torchtitan arguments")
    a = ap.parse_args(argv)
    if a.pg_timeout_s is None and a.device == "cuda":
        a.pg_timeout_s = 60
    if a.checksum_every is None:
        a.checksum_every = 2 if a.device == "cuda" else 1
    out = (a.out or Path(tempfile.mkdtemp(prefix="ftslurm-heal-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ensure_local_assets()

    results = []
    for scenario in a.scenario or ["fixes-on"]:
        say(f"scenario {scenario}: logs in {out / scenario}")
        heal = Heal(a, out, scenario)
        try:
            results.append(heal.run())
        finally:
            heal.close()
    print("versions: " + " ".join(f"{k}={v}" for k, v in versions().items()))
    for r in results:
        report(r)
    print(f"logs: {out}")
    if a.json:
        write_json(a.json, a.device, results=[dict(asdict(r), verdict=verdict(r)) for r in results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
