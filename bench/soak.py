"""Soak test: many failures on the local backend, checking every heal for identical weights.

The local backend of `ftslurm demo` (the Lighthouse + N replicas of the real launcher,
supervised): every --every seconds a random replica other than 0 is SIGKILLed (whole process
tree) and started again with the next attempt, --count times. After each heal it compares the
launcher's parameter checksums (`ftslurm-checksum ...`, right after an outer sync in DiLoCo)
of the healed replica and replica 0 at the same step, and checks the loss keeps falling.
Finally it runs the same set-up without failures to get the failure-free step rate.

Prints: failures injected, heals completed, checksum comparisons and mismatches (goal 0),
steps committed / steps of a failure-free run over the same wall time (goal >= 90% at one
failure per 60 s), loss at the start and the end; then, from `ftslurm report` on the run,
replica-step goodput beside the report's step ratio (both against the run's own
failure-free rate, docs/report.md "Goodput"), the median time to full strength and the
false quorum drops.

Run: python bench/soak.py --replicas 2 --every 60 --count 20 [--baseline-s 180]
     [--heartbeat-timeout-ms N] (the Lighthouse's; default torchft's 5000)

`--backend slurm` (root) soaks the local Slurm instead, through `ftslurm demo` (the code path
users run): the FT sbatch array with `--spares S` warm spares, a failure every --every
seconds cycling through `--modes` (node-down: DOWN --down-for s then RESUME; kill: SIGKILL
the training worker, the launcher requeues its task; requeue: `scontrol requeue`), always
on replica slot 1 (slot 0's task is the checksum reference). Every checksum line of every
other task is compared with task 0's at the same (step, scope); the figures are the
report's (goodput against the run's own full-strength rate: no separate baseline run).
`--json` prints them as one object on stdout.
  python bench/soak.py --backend slurm --spares 1 --every 60 --count 30 \
      --modes node-down,kill,requeue --heartbeat-timeout-ms 2000 --json
`--spares 0,1` soaks one arm per spare count; `--control` adds a failure-free control arm (the
same replicas, no spares, failures=0, as long as the longest soak so far: DemoConfig.min_run_s)
and gives every soak's goodput against the control of its round (`ftslurm report --baseline`:
trained replica-steps / the control's replica-steps in the same wall time), not against the
soak's own full-strength rate; `--repeats R` runs R rounds, the arms' order rotating each
round (the control last in round 1). Per arm: goodput median and spread (min, max).
`--control-s S` runs the control S seconds instead (its failure-free rate is the baseline,
so a 30-minute soak can take a 10-minute control).
  python bench/soak.py --backend slurm --spares 0,1 --every 60 --count 10 --control \
      --repeats 3 --heartbeat-timeout-ms 2000 --json
Not part of the test suite (it takes count x every seconds plus the baseline).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ftslurm import logvocab
from ftslurm.demo import DemoConfig, LocalBackend, run_demo
from ftslurm.errors import UserError
from ftslurm.replica.worker import checksum
from ftslurm.report import build_report
from ftslurm.run.model import Run
from ftslurm.run.progress import split_attempts, steps_in
from ftslurm.wait import wait_for


def _say(m: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {m}", file=sys.stderr, flush=True)


def attempt_segments(path: Path) -> list[str]:
    """The log text of each attempt (split at the launcher's first line: the run model's)."""
    return split_attempts(path.read_text(errors="replace"))


def losses(text: str) -> list[tuple[int, float]]:
    """(step, loss) of each step line with a numeric loss (the run model's step parser)."""
    return [(s.step, v) for s in steps_in(text) if (v := s.loss_value) is not None]


def heartbeat_timeout(ms: int | None) -> None:
    """Make the demo's Lighthouse start with `--heartbeat-timeout-ms ms` (None: the default):
    the demo calls `ftslurm.lighthouse.start`, which takes the option as a keyword."""
    if ms is None:
        return
    from ftslurm import lighthouse

    plain = lighthouse.start
    lighthouse.start = functools.partial(plain, heartbeat_timeout_ms=ms)


def report_figures(run_dir: Path, rep: dict | None = None,
                   baseline: Path | None = None) -> dict:
    """The soak's figures from `ftslurm report` (its JSON summary; `rep`: that JSON, when the
    caller has built it already; `baseline`: a control run to measure goodput against)."""
    sm = (rep or build_report(str(run_dir), baseline=baseline).to_json())["summary"]
    full = [x for x in sm["time_to_full_strength_s"] if x is not None]
    det = [x for x in sm["detection_s"] if x is not None]
    return {
        "goodput": sm["goodput"], "goodput_ratio": sm["goodput_ratio"],
        "goodput_baseline": sm["goodput_baseline"], "heal_steps": sm["heal_steps"],
        "replica_steps_trained": sm["replica_steps_trained"],
        "goodput_window_s": sm["goodput_window_s"],
        "step_ratio": sm["step_ratio"], "lost": sm["lost"],
        "failure_free_step_rate": sm["failure_free_step_rate"],
        "failures": sm["failures"], "false_drops": sm["false_drops"],
        "median_full_strength_s": round(statistics.median(full), 3) if full else None,
        "median_detection_s": round(statistics.median(det), 3) if det else None,
    }  # fmt: skip


def _s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} s"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def start(cfg: DemoConfig) -> LocalBackend:
    b = LocalBackend(cfg, _say)
    b.setup()
    n = cfg.replicas
    wait_for(lambda: b.quorum_size() == n, cfg.timeout, interval=0.5, what="full quorum")
    return b


def survivor_steps(b: LocalBackend) -> int:
    return b.poll()[0].last_step


def soak(cfg: DemoConfig, every: float, count: int, seed: int) -> dict:
    rng = random.Random(seed)
    b = start(cfg)
    healed = 0
    heal_times: list[float] = []
    try:
        t0 = time.monotonic()
        step0 = survivor_steps(b)
        for k in range(count):
            next_at = t0 + (k + 1) * every
            time.sleep(max(0.0, next_at - time.monotonic()))
            target = rng.randrange(1, cfg.replicas)
            log = b.logs[target]
            b.poll()
            before = log.attempt
            b.fail(target)
            time.sleep(cfg.down_for)
            b.restore(target)
            t_back = time.monotonic()

            def done(log=log, before=before) -> bool:
                b.poll()
                return log.attempt > before and log.attempt in log.healed_step

            try:
                wait_for(done, cfg.timeout, interval=0.5, what=f"replica {target} heal")
                healed += 1
                heal_times.append(time.monotonic() - t_back)
                _say(f"failure {k + 1}/{count}: replica {target} healed at step "
                     f"{log.healed_step[log.attempt]} ({heal_times[-1]:.1f} s)")  # fmt: skip
            except Exception as e:  # keep soaking; the summary counts it
                _say(f"failure {k + 1}/{count}: replica {target} did NOT heal: {e}")
        wall = time.monotonic() - t0
        steps = survivor_steps(b) - step0
    finally:
        b.teardown()
    return {"backend": b, "healed": healed, "wall": wall, "steps": steps, "heal_times": heal_times}


def _compare(ref_text: str, others: list[tuple[str, str]]) -> tuple[int, list[str]]:
    """Checksums of each (label, log text) in `others` vs the reference's at the same (rank,
    step, scope): rank k with rank k (checksum.compare). Returns (comparisons, mismatches)."""
    ref = list(checksum.parse(ref_text.splitlines()))
    compared, bad = 0, []
    for label, text in others:
        both, differ = checksum.compare(ref, checksum.parse(text.splitlines()))
        compared += len(both)
        bad += [f"{label} rank {rank} step {step} {scope}" for rank, step, scope in differ]
    return compared, bad


def compare_checksums(run_dir: Path, replicas: int) -> tuple[int, list[str]]:
    """For every attempt > 0 of every replica: its checksums vs replica 0's at the same
    (step, scope). Returns (comparisons, mismatches)."""
    others = [
        (f"replica {i} attempt {a}", seg)
        for i in range(1, replicas)
        for a, seg in enumerate(attempt_segments(next(run_dir.glob(f"*_{i}.out"))))
        if a > 0
    ]
    return _compare("".join(attempt_segments(next(run_dir.glob("*_0.out")))), others)


def compare_all(run_dir: Path, tasks: int) -> tuple[int, list[str]]:
    """Every checksum line of tasks 1.. vs task 0's at the same (step, scope): with spares a
    slot's holder changes at each claim, and all replicas agree after an outer sync."""
    run = Run.of(logvocab.run_job(run_dir.name), folder=run_dir)

    def text(task: int) -> str:
        return run.log(task).read_text(errors="replace")

    def started(task: int) -> bool:  # a spare Slurm never started has no log
        return run.log(task).is_file()

    return _compare(text(0), [(f"task {t}", text(t)) for t in range(1, tasks) if started(t)])


def soak_slurm(a: argparse.Namespace, out: Path, spares: int | None = None,
               run=run_demo) -> dict:
    """The soak on the local Slurm, through `ftslurm demo`'s story: its figures (`spares`:
    this arm's, default --spares; `run`: the demo, a test passes recorded runs)."""
    spares = a.spares if spares is None else spares
    modes = tuple(m for m in a.modes.split(",") if m)
    cfg = DemoConfig(replicas=a.replicas, failures=a.count, backend="slurm", outputs=out,
                     down_for=a.down_for, spares=spares, modes=modes, every=a.every,
                     heartbeat_timeout_ms=a.heartbeat_timeout_ms, steps=1_000_000,
                     steps_between=1, timeout=300)  # fmt: skip
    t0 = time.monotonic()
    run_dir = run(cfg, say=_say)
    wall = time.monotonic() - t0
    compared, bad = compare_all(run_dir, cfg.tasks)
    rep = build_report(str(run_dir)).to_json()
    fig = report_figures(run_dir, rep)
    # per injected failure, from the report (log times; the demo's own stopwatch polls)
    injected = [f for f in rep["failures"] if f.get("kind") in logvocab.FAILURE_MODES]
    full = [f["time_to_full_strength_s"] for f in injected]
    by_mode: dict[str, list[float]] = {}
    for f in injected:
        if f["time_to_full_strength_s"] is not None:
            by_mode.setdefault(f["kind"], []).append(f["time_to_full_strength_s"])
    return {
        "backend": "slurm", "replicas": a.replicas, "spares": spares, "every_s": a.every,
        "modes": list(modes), "heartbeat_timeout_ms": a.heartbeat_timeout_ms,
        "failures_injected": a.count, "recovered": len(cfg.measured),
        "full_strength_s": full, "demo_full_strength_s": [m["full_strength_s"]
                                                          for m in cfg.measured],
        "median_full_strength_s": fig["median_full_strength_s"],
        "detection_s": [f["to_next_commit_s"] for f in injected],
        "median_full_strength_s_by_mode": {k: round(statistics.median(v), 2)
                                           for k, v in sorted(by_mode.items())},
        "checksum_comparisons": compared, "checksum_mismatches": len(bad),
        "mismatches": bad[:20], "wall_s": round(wall, 1), "run_dir": str(run_dir),
        "report": fig,
    }  # fmt: skip


def control_arms(a: argparse.Namespace, out: Path, run=run_demo) -> dict:
    """Soaks alternated with a failure-free control (see the module docstring): per round,
    every spare count's soak and the control in a rotating order; each soak's goodput against
    its round's control. `run`: the demo (a test passes recorded runs)."""
    spare_counts = [int(x) for x in str(a.spares).split(",") if x.strip()]
    arms = [f"spares{n}" for n in spare_counts] + (["control"] if a.control else [])
    order = [arms[r % len(arms):] + arms[: r % len(arms)] for r in range(a.repeats)]
    soaks: dict[str, list[dict]] = {f"spares{n}": [] for n in spare_counts}
    controls: list[dict] = []
    longest = 0.0
    for r, names in enumerate(order):
        ctrl: Path | None = None
        done: list[dict] = []
        for name in names:
            d = out / f"round{r + 1}-{name}"
            d.mkdir(parents=True, exist_ok=True)
            if name == "control":
                length = getattr(a, "control_s", None) or longest
                cfg = DemoConfig(replicas=a.replicas, failures=0, backend="slurm", outputs=d,
                                 heartbeat_timeout_ms=a.heartbeat_timeout_ms, steps=1_000_000,
                                 timeout=300, min_run_s=length)  # fmt: skip
                _say(f"round {r + 1}: control, failure-free, {length:.0f} s at least")
                ctrl = run(cfg, say=_say)
                sm = build_report(str(ctrl)).to_json()["summary"]
                controls.append({"round": r + 1, "run_dir": str(ctrl),
                                 "failures": sm["failures"],
                                 "failure_free_step_rate": sm["failure_free_step_rate"],
                                 "goodput_window_s": sm["goodput_window_s"],
                                 "steps_committed": sm["steps_committed"]})  # fmt: skip
                continue
            _say(f"round {r + 1}: {name}")
            res = soak_slurm(a, d, int(name.removeprefix("spares")), run=run)
            res["round"] = r + 1
            done.append(res)
            soaks[name].append(res)
            longest = max(longest, res["report"]["goodput_window_s"] or 0.0)
        for res in done:
            if ctrl is not None:
                res["report_self"] = res["report"]
                try:
                    res["report"] = report_figures(Path(res["run_dir"]), baseline=ctrl)
                except UserError as e:  # a control with a failure: said, no goodput vs it
                    res["report"] = {**res["report"], "goodput": None, "control_refused": str(e)}
    arms_out: dict = {}
    if a.control:
        rates = [c["failure_free_step_rate"] for c in controls]
        arms_out["control"] = {"failure_free_step_rate": _spread(rates), "runs": controls}
    for name, rs in soaks.items():
        arms_out[name] = {
            "goodput": _spread([x["report"]["goodput"] for x in rs]),
            "goodput_against": "control" if a.control else "self",
            "median_full_strength_s": _spread([x["median_full_strength_s"] for x in rs]),
            "checksum_mismatches": sum(x["checksum_mismatches"] for x in rs),
            "runs": rs,
        }
    return {"backend": "slurm", "replicas": a.replicas, "count": a.count, "every_s": a.every,
            "repeats": a.repeats, "control": a.control, "order": order, "arms": arms_out}


def _spread(xs: list[float | None]) -> dict:
    """Median and (min, max) of the known values; the values as measured."""
    known = [x for x in xs if x is not None]
    r = lambda x: None if x is None else round(x, 4)  # noqa: E731
    return {"median": r(statistics.median(known)) if known else None,
            "spread": [r(min(known)), r(max(known))] if known else None,
            "values": [r(x) for x in xs], "n": len(known)}


def baseline_rate(cfg: DemoConfig, seconds: float) -> float:
    b = start(cfg)
    try:
        s0, t0 = survivor_steps(b), time.monotonic()
        time.sleep(seconds)
        return (survivor_steps(b) - s0) / (time.monotonic() - t0)
    finally:
        b.teardown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--down-for", type=float, default=2.0)
    ap.add_argument("--baseline-s", type=float, default=180.0)
    ap.add_argument("--keep", type=Path, default=None, help="Keep outputs here.")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                    help="The Lighthouse's heartbeat timeout (default: torchft's, 5000).")
    ap.add_argument("--backend", choices=["local", "slurm"], default="local")
    ap.add_argument("--spares", default="0",
                    help="Warm spares (--backend slurm); a comma list (0,1): one arm each.")
    ap.add_argument("--control", action="store_true",
                    help="--backend slurm: add a failure-free control arm; goodput against it.")
    ap.add_argument("--control-s", type=float, default=None,
                    help="--control: run the control this long (seconds) [as long as the "
                         "longest soak]; its failure-free rate is the baseline, so a long "
                         "soak can take a shorter control")
    ap.add_argument("--repeats", type=int, default=1, help="Rounds of all arms [1].")
    ap.add_argument("--modes", default="node-down,kill,requeue",
                    help="Failure modes to cycle through (--backend slurm): any of "
                         "simulate-failure's (node-down,kill,requeue,hang,stall,freeze-node).")
    ap.add_argument("--json", action="store_true",
                    help="--backend slurm: print the figures as JSON on stdout.")
    a = ap.parse_args()
    try:
        counts = [int(x) for x in a.spares.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--spares {a.spares}: a count or a comma list of counts (0,1)")
    if not counts or min(counts) < 0 or a.repeats < 1:
        ap.error("--spares >= 0 and --repeats >= 1")
    if a.backend == "local" and (a.control or a.repeats > 1 or len(counts) > 1):
        ap.error("--control, --repeats and several --spares: --backend slurm (the local soak "
                 "measures its failure-free rate in a run of its own: --baseline-s)")
    if a.backend == "slurm" and (a.control or a.repeats > 1 or len(counts) > 1):
        res = control_arms(a, a.keep or Path(tempfile.mkdtemp(prefix="ftslurm-soak-")))
        print(json.dumps(res, indent=1) if a.json else res)
        return
    a.spares = counts[0]
    if a.backend == "slurm":
        res = soak_slurm(a, a.keep or Path(tempfile.mkdtemp(prefix="ftslurm-soak-")))
        print(json.dumps(res, indent=1) if a.json else res)
        return
    heartbeat_timeout(a.heartbeat_timeout_ms)
    out = a.keep or Path(tempfile.mkdtemp(prefix="ftslurm-soak-"))
    cfg = DemoConfig(replicas=a.replicas, backend="local", down_for=a.down_for, outputs=out,
                     steps=1_000_000, timeout=300)  # fmt: skip
    t_start = time.monotonic()
    res = soak(cfg, a.every, a.count, a.seed)
    run_dir = res["backend"].run_dir
    compared, bad = compare_checksums(run_dir, a.replicas)
    l0 = losses("".join(attempt_segments(next(run_dir.glob("*_0.out")))))
    fig = report_figures(run_dir)
    rate = baseline_rate(cfg, a.baseline_s)
    expected = rate * res["wall"]
    first = statistics.mean(v for _, v in l0[:10]) if l0 else float("nan")
    last = statistics.mean(v for _, v in l0[-10:]) if l0 else float("nan")
    print(f"replicas {a.replicas}, a failure every {a.every:g} s, seed {a.seed}, run {run_dir}")
    print(f"failures injected        {a.count}")
    print(f"heals completed          {res['healed']}")
    if res["heal_times"]:
        print(f"restart -> healed        median {statistics.median(res['heal_times']):.1f} s, "
              f"max {max(res['heal_times']):.1f} s")  # fmt: skip
    print(f"checksum comparisons     {compared} after heals; mismatches {len(bad)}")
    for m in bad[:10]:
        print(f"  mismatch: {m}")
    print(f"steps committed          {res['steps']} in {res['wall']:.0f} s (replica 0)")
    print(f"failure-free rate        {rate:.3f} steps/s -> {expected:.0f} steps in the same time")
    print(f"ratio                    {res['steps'] / expected:.1%}" if expected else "ratio n/a")
    print(f"loss                     first 10 steps {first:.3f} -> last 10 steps {last:.3f}")
    print(f"report: goodput          {_pct(fig['goodput'])} of replica-steps, step ratio "
          f"{_pct(fig['step_ratio'])} (at the run's full-strength rate "
          f"{fig['failure_free_step_rate']} steps/s); lost {fig['lost']}")
    print(f"report: failures         {fig['failures']}, false quorum drops {fig['false_drops']}, "
          f"median detection {_s(fig['median_detection_s'])}, median time to full strength "
          f"{_s(fig['median_full_strength_s'])}")
    print(f"total wall time          {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
