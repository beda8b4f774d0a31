"""Recovery timings per failure, on the local Slurm and/or the local backend; goodput against a
failure-free control run.

Runs `ftslurm demo` with --failures N (the same code path users run) and reads the figures
from the same `ftslurm report` users get (its JSON). For each failure it prints:
  kill -> survivor's next committed step      (goal <= Lighthouse heartbeat timeout + 1 step)
  node DOWN -> replica running again          (Slurm only; goal <= 10 s)
  replica running -> first healed commit      (goal <= 10 s on CPU)
  failure -> full strength                    (group whole again, the healed replica committed)
  heal: the joiner's `healing required` -> `Loaded state dict.` (quorum reply, the
        transfer FTSLURM_HEAL_TRANSPORT selects, the load), and its share of running -> healed
and the medians, then the run's replica-step goodput beside its step ratio (both from the
report's summary: `goodput`, `step_ratio`; a heal's first commit counts as healing).

`--spares S` runs the demo with S warm spares (FT_SPARES=S, S more array tasks); a comma list
(`--spares 0,1`) runs one arm per count. `--heartbeat-timeout-ms N` starts its Lighthouse with
that heartbeat timeout. `--mode kill,hang,stall,freeze-node` runs every arm once per failure
mode (DemoConfig.failure_mode; without --mode, the demo's own: node-down on Slurm) and prints
the figures per mode. `--restarts 0,3` runs every arm once with FT_MAX_RESTARTS=0 (a failed
replica always requeues through Slurm) and once with 3 (it restarts in place in its allocation
while its node is fine): the launcher's restart in place against the requeue, each arm once,
one after the other in one run. `--warm 0,1` does the same with FT_WARM_RESTART (a restart
in place takes the next run its launcher started ahead, or starts torchrun anew). `--python
P1,P2` runs every arm once per interpreter (FTSLURM_PYTHON: the jobs' Python, named by its
training stack, ftslurm/stacks.py; the Lighthouse and the demo stay in this one): the two
stacks measured alternated on one machine, their figures per stack under "stacks". `--ranks R`
runs replicas of R ranks (GPUS_PER_NODE=R, the model FSDP-sharded across them; a kill hits
one rank, as a GPU's error does).

`--control` adds a failure-free control arm (the same replicas, no spares, failures=0, run at
least as long as the failure arms: DemoConfig.min_run_s) and measures every failure run's
goodput against the control of its repeat: committed replica-steps (less one per heal) / the
control's replica-steps in the same wall time (`ftslurm report --baseline CONTROL`: group size
x the control's failure-free rate x the run's window). Not against the run's own full-strength
rate, which anything that slows the full-strength stretches (a warm spare sharing the cores)
raises. `--repeats R` runs R rounds, the arms' order rotating each round (round 1: the failure
arms, then the control, whose length it needs), and gives per arm the median and the spread
(min, max).

`--json` prints, on stdout, one object: for a single run (no --control, --repeats 1, one spare
count, at most one mode) `{"spares": S, "full_strength_s": [..], "median_full_strength_s": x,
"detection_s": [..], "goodput": g, ...}` (a list with `--backend both`); otherwise
`{"arms": {"control": {..}, "spares1": {"goodput": {"median": m, "spread": [lo, hi],
"values": [..]}, ..}}, "modes": {"kill": {"median_detection_s": .., "median_full_strength_s":
..}}, "order": [..]}`. The table goes to stderr.

Run (root for the Slurm backend):
  python bench/recovery.py --backend slurm --replicas 2 --spares 0 --failures 5 --json
  python bench/recovery.py --backend slurm --replicas 2 --spares 1 --failures 5 --control \
      --repeats 3 --json
  python bench/recovery.py --backend slurm --spares 0,1 --failures 5 --control --repeats 3 \
      --mode node-down,kill --json
  python bench/recovery.py --backend slurm --replicas 2 --ranks 2 --mode kill --failures 5 \
      --spares 0,1 --restarts 0,3 --json
  python bench/recovery.py --backend slurm --replicas 2 --ranks 2 --mode kill --failures 5 \
      --spares 0 --restarts 3 --warm 0,1 --json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ftslurm.demo import DemoConfig, run_demo
from ftslurm.errors import UserError
from ftslurm.event_log import FAILURE_ACTIONS
from ftslurm.failure_plan import MODES
from ftslurm.lighthouse.config import LighthouseConfig
from ftslurm.report import build_report


def _t(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _fmt(x: float | None) -> str:
    return f"{x:6.2f} s" if x is not None else "     n/a"


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def demo_config(backend: str, failures: int, outputs: Path, replicas: int = 2,
                spares: int = 0, heartbeat_timeout_ms: int | None = None,
                mode: str | None = None, min_run_s: float = 0.0,
                ranks: int = 1) -> DemoConfig:
    """The demo's settings for one run. `mode`: the failure mode (None: the demo's own). The
    demo takes it as `failure_mode`; a demo without that field yet takes the modes it knows
    as `modes` (failure_plan.MODES), and refuses the others here, before anything starts."""
    kw: dict[str, Any] = {}
    if mode is not None:
        names = {f.name for f in dataclasses.fields(DemoConfig)}
        if "failure_mode" in names:
            kw["failure_mode"] = mode
        elif mode in MODES:
            kw["modes"] = (mode,)
        else:
            raise SystemExit(f"--mode {mode}: this ftslurm's demo has no such failure mode "
                             f"(DemoConfig has no failure_mode; it knows {', '.join(MODES)})")
    if min_run_s:
        kw["min_run_s"] = min_run_s
    if ranks > 1:
        kw["ranks"] = ranks
    return DemoConfig(replicas=replicas, failures=failures, backend=backend, outputs=outputs,
                      spares=spares, heartbeat_timeout_ms=heartbeat_timeout_ms, **kw)


@contextlib.contextmanager
def job_env(**knobs: int | str | None) -> Iterator[None]:
    """Knobs (FT_MAX_RESTARTS=3, FT_WARM_RESTART=0) for the jobs the demo submits inside
    (they inherit this process's environment); None leaves one as it is."""
    old = {k: os.environ.get(k) for k in knobs}
    os.environ.update({k: str(v) for k, v in knobs.items() if v is not None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure(backend: str, failures: int, outputs: Path, replicas: int = 2,
            spares: int = 0, out=sys.stdout,
            heartbeat_timeout_ms: int | None = None, mode: str | None = None,
            baseline: Path | None = None) -> dict[str, Any]:
    """One demo run and its figures (`figures`)."""
    cfg = demo_config(backend, failures, outputs, replicas, spares, heartbeat_timeout_ms, mode)
    run_dir = run_demo(cfg, say=lambda m: print(f"  {m}", file=sys.stderr))
    return figures(run_dir, cfg, out, baseline=baseline, mode=mode)


def figures(run_dir: Path, cfg: DemoConfig, out=sys.stdout, baseline: Path | None = None,
            mode: str | None = None) -> dict[str, Any]:
    """A run's figures, from its report (with `baseline`: goodput against that control run)."""
    backend, spares = cfg.resolved_backend(), cfg.spares
    heartbeat_timeout_ms = cfg.heartbeat_timeout_ms
    try:
        rep = build_report(str(run_dir), baseline=baseline).to_json()
        refused = None
    except UserError as e:  # a control with a failure (a false drop under load): said, kept
        rep, refused = build_report(str(run_dir)).to_json(), str(e)
    failures_ = [f for f in rep["failures"] if f.get("kind") in FAILURE_ACTIONS]
    # a failure nobody injected (a replica that left the quorum or came back under a new
    # uuid, not a false drop) on a slot no injection hit: a survivor that crashed
    hit = {str(f.get("replica")) for f in failures_}
    crashes = [f for f in rep["failures"] if f.get("kind") not in FAILURE_ACTIONS
               and not f.get("false_drop") and str(f.get("replica")) not in hit]  # fmt: skip
    attempts = sorted(  # Slurm's next attempts and the launcher's restarts in place
        (a for a in rep["attempts"] if a["attempt"] > 0 or a.get("restart_in_place")),
        key=lambda a: _t(a["start_time"]),
    )
    heals = sorted(
        (r for r in rep["recoveries"] if r["time"] and r["healed_time"]
         and r.get("after_failure", True)),
        key=lambda r: _t(r["time"]),
    )
    rows: dict[str, list[float]] = {
        "kill_to_survivor_commit": [], "down_to_running": [], "running_to_healed": [],
        "full_strength": [], "heal_required_to_loaded": [],
    }  # fmt: skip
    transport = os.environ.get("FTSLURM_HEAL_TRANSPORT", "default")
    hb = heartbeat_timeout_ms or LighthouseConfig().heartbeat_timeout_ms
    how = f", mode {mode}" if mode else ""
    print(f"\n{backend}: {len(failures_)} failures{how}, {spares} spares (run dir {run_dir}), "
          f"heal transport {transport}, heartbeat timeout {hb} ms", file=out)  # fmt: skip
    print("  #  failure -> survivor commit   DOWN -> running again   running -> healed commit"
          "   failure -> full strength   heal: required -> loaded (share)", file=out)
    for i, f in enumerate(failures_):
        # with spares the replacement is a warm spare already running: the next attempt is
        # the failed task coming back as a spare, not what restored full strength
        nxt = attempts[i] if i < len(attempts) and not spares else None
        a = f["to_next_commit_s"]
        b = (
            _t(nxt["start_time"]) - _t(f["time"])
            if nxt and backend == "slurm" and nxt["start_time"]
            else None
        )
        c = (
            _t(nxt["first_commit_time"]) - _t(nxt["start_time"])
            if nxt and nxt["first_commit_time"]
            else None
        )
        d = f["time_to_full_strength_s"]
        h = _t(heals[i]["healed_time"]) - _t(heals[i]["time"]) if i < len(heals) else None
        for key, v in zip(rows, (a, b, c, d, h), strict=True):
            if v is not None:
                rows[key].append(v)
        share = f" ({h / c:5.1%})" if h is not None and c else ""
        print(f"  {i + 1}  {_fmt(a)}                {_fmt(b)}               {_fmt(c)}"
              f"               {_fmt(d)}             {_fmt(h)}{share}", file=out)
    med = {k: _median(v) for k, v in rows.items()}
    print(
        f"  median {_fmt(med['kill_to_survivor_commit'])}                "
        f"{_fmt(med['down_to_running'])}               {_fmt(med['running_to_healed'])}"
        f"               {_fmt(med['full_strength'])}"
        f"             {_fmt(med['heal_required_to_loaded'])}", file=out,
    )
    sm = rep["summary"]
    g, ratio = sm["goodput"], sm["step_ratio"]
    if refused:  # no goodput against a control that is not one; the run's own kept apart
        print(f"  control refused: {refused}", file=out)
        g, ratio = None, None
    base = sm.get("goodput_baseline") or {}
    against = (f"against the control {base.get('run')}" if base.get("source") == "control"
               else "against its own full-strength rate")
    print(f"  goodput (replica-steps) {_pct(g)} {against}, step ratio {_pct(ratio)}, "
          f"lost {sm['lost']}, false quorum drops {sm['false_drops']}, survivor crashes "
          f"{len(crashes)}", file=out)  # fmt: skip
    return {
        "backend": backend, "replicas": cfg.replicas, "spares": spares, "mode": mode,
        "failures": len(failures_),
        "full_strength_s": rows["full_strength"],
        "median_full_strength_s": _r(med["full_strength"]),
        "detection_s": rows["kill_to_survivor_commit"],
        "median_detection_s": _r(med["kill_to_survivor_commit"]),
        "down_to_running_s": [_r(x) for x in rows["down_to_running"]],
        "running_to_healed_s": [_r(x) for x in rows["running_to_healed"]],
        "heal_required_to_loaded_s": [_r(x) for x in rows["heal_required_to_loaded"]],
        "heal_transport": transport, "heartbeat_timeout_ms": heartbeat_timeout_ms,
        "demo_full_strength_s": [m["full_strength_s"] for m in cfg.measured],
        "goodput": g, "goodput_ratio": None if refused else sm["goodput_ratio"],
        "goodput_baseline": base or None, "goodput_self": sm["goodput"] if refused else None,
        "control_refused": refused,
        "replica_steps_trained": sm["replica_steps_trained"], "heal_steps": sm["heal_steps"],
        "goodput_window_s": sm["goodput_window_s"], "step_ratio": ratio, "lost": sm["lost"],
        "failure_free_step_rate": sm["failure_free_step_rate"],
        "startup_syncs": sm.get("startup_syncs", 0),
        "false_drops": sm["false_drops"], "run_dir": str(run_dir),
        "survivor_crashes": len(crashes),
        "survivor_crash_replicas": sorted({str(f.get("replica")) for f in crashes}),
    }  # fmt: skip


def spread(xs: list[float | None]) -> dict[str, Any]:
    """Median and (min, max) of the known values; the values as measured."""
    known = [x for x in xs if x is not None]
    return {"median": _r4(statistics.median(known)) if known else None,
            "spread": [_r4(min(known)), _r4(max(known))] if known else None,
            "values": [_r4(x) for x in xs], "n": len(known)}


def _r4(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def arm_name(spares: int, mode: str | None, restarts: int | None = None,
             warm: int | None = None, stack: str | None = None) -> str:  # fmt: skip
    return (f"spares{spares}" + (f"-restarts{restarts}" if restarts is not None else "")
            + (f"-warm{warm}" if warm is not None else "") + (f"-{mode}" if mode else "")
            + (f"-{stack}" if stack else ""))


def stack_of(python: str) -> str:
    """The training stack (ftslurm/stacks.py) an interpreter has, by its torchtitan."""
    import subprocess

    from ftslurm import stacks

    probe = "import importlib.metadata as m; print(m.version('torchtitan'))"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"--python {python}: cannot run it ({e})") from e
    stack = stacks.for_torchtitan(out.stdout.strip() or None) if out.returncode == 0 else None
    if stack is None:
        raise UserError(f"--python {python}: no supported training stack there "
                        f"({(out.stdout or out.stderr).strip()[-200:]})")  # fmt: skip
    return stack.name


def schedule(arms: list[str], repeats: int, control: bool) -> list[list[str]]:
    """The arms' order in each round: rotated by one each round, so that no arm always runs
    first or last (a cold cache, a machine that warms up); the control is last in round 1,
    since it runs as long as the failure arms ran, and takes its turn in the rotation after."""
    names = arms + (["control"] if control else [])
    return [names[r % len(names):] + names[: r % len(names)] for r in range(repeats)]


def compare(a: argparse.Namespace, outputs: Path, out=sys.stderr,
            run=run_demo) -> dict[str, Any]:
    """The control experiment: per round, every (spares, mode) arm and the control, in
    `schedule`'s order; each failure run's goodput against its round's control. `run`: the
    demo (a test passes recorded runs)."""
    spares_list = a.spares_list
    modes: list[str | None] = list(a.modes) or [None]
    restarts: list[int | None] = list(getattr(a, "restarts_list", None) or [None])
    warms: list[int | None] = list(getattr(a, "warm_list", None) or [None])
    ranks = getattr(a, "ranks", 1)
    # interpreters (FTSLURM_PYTHON) by stack name; None: this one, unnamed in the arm
    pythons: dict[str | None, str | None] = dict(getattr(a, "pythons", None) or {None: None})
    arms = [(s, m, r, w, st) for s in spares_list for r in restarts for w in warms
            for m in modes for st in pythons]  # fmt: skip
    names = {arm_name(s, m, r, w, st): (s, m, r, w, st) for s, m, r, w, st in arms}
    rounds = schedule(list(names), a.repeats, a.control)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    controls: list[dict[str, Any]] = []
    longest = 0.0  # the longest failure run's window so far: the control's length
    for r, order in enumerate(rounds):
        done: list[tuple[str, Path, DemoConfig]] = []
        ctrl_dir: Path | None = None
        for name in order:
            d = outputs / f"round{r + 1}-{name}"
            d.mkdir(parents=True, exist_ok=True)
            if name == "control":
                cfg = demo_config(a.backend, 0, d, a.replicas, 0, a.heartbeat_timeout_ms,
                                  min_run_s=longest, ranks=ranks)
                print(f"\nround {r + 1}: control (failure-free, {longest:.0f} s at least)",
                      file=out)
                ctrl_dir = run(cfg, say=lambda m: print(f"  {m}", file=sys.stderr))
                sm = build_report(str(ctrl_dir)).to_json()["summary"]
                controls.append({
                    "round": r + 1, "run_dir": str(ctrl_dir), "failures": sm["failures"],
                    "failure_free_step_rate": sm["failure_free_step_rate"],
                    "goodput_window_s": sm["goodput_window_s"],
                    "steps_committed": sm["steps_committed"],
                })
                print(f"  control: {sm['steps_committed']} replica-steps committed in "
                      f"{sm['goodput_window_s']} s, {sm['failure_free_step_rate']} steps/s",
                      file=out)
                continue
            s, m, n, w, st = names[name]
            print(f"\nround {r + 1}: {name}", file=out)
            cfg = demo_config(a.backend, a.failures, d, a.replicas, s, a.heartbeat_timeout_ms, m,
                              ranks=ranks)
            with job_env(FT_MAX_RESTARTS=n, FT_WARM_RESTART=w, FTSLURM_PYTHON=pythons[st]):
                run_dir = run(cfg, say=lambda msg: print(f"  {msg}", file=sys.stderr))
            done.append((name, run_dir, cfg))
            w = build_report(str(run_dir)).to_json()["summary"]["goodput_window_s"] or 0.0
            longest = max(longest, w)
        for name, run_dir, cfg in done:
            fig = figures(run_dir, cfg, out, baseline=ctrl_dir, mode=names[name][1])
            fig["round"], fig["max_restarts"] = r + 1, names[name][2]
            fig["warm_restart"], fig["stack"] = names[name][3], names[name][4]
            runs[name].append(fig)
    arms_out: dict[str, Any] = {}
    if a.control:
        arms_out["control"] = {
            "failure_free_step_rate": spread([c["failure_free_step_rate"] for c in controls]),
            "runs": controls,
        }
    for name, rs in runs.items():
        failed = [x for x in rs if x["failures"]]
        arms_out[name] = {
            "spares": names[name][0], "mode": names[name][1], "max_restarts": names[name][2],
            "warm_restart": names[name][3], "stack": names[name][4],
            "goodput": spread([x["goodput"] for x in rs]),
            "goodput_ratio": spread([x["goodput_ratio"] for x in rs]),
            "goodput_against": "control" if a.control else "self",
            "median_full_strength_s": _median([v for x in rs for v in x["full_strength_s"]]),
            "median_detection_s": _median([v for x in rs for v in x["detection_s"]]),
            "survivor_crashes": sum(x.get("survivor_crashes", 0) for x in rs),
            "failures": [x["failures"] for x in rs],
            # what the issue asks of a spare: below 1.0 whenever a failure happened
            "goodput_below_1_when_failed": all((x["goodput"] or 0.0) < 1.0 for x in failed),
            "runs": rs,
        }
    by_mode: dict[str, Any] = {}
    for m in modes:
        rs = [x for name, xs in runs.items() if names[name][1] == m for x in xs]
        full = [v for x in rs for v in x["full_strength_s"]]
        det = [v for x in rs for v in x["detection_s"]]
        by_mode[m or "default"] = {
            "median_detection_s": _r(_median(det)),
            "median_full_strength_s": _r(_median(full)),
            "detection_s": det, "full_strength_s": full,
            "failures": sum(x["failures"] for x in rs), "runs": len(rs),
            "goodput": spread([x["goodput"] for x in rs]),
        }
    by_stack: dict[str, Any] = {}
    for st in pythons:
        if st is None:
            continue
        per_mode = {}
        for m in modes:
            rs = [x for name, xs in runs.items() if names[name][1] == m
                  and names[name][4] == st for x in xs]  # fmt: skip
            per_mode[m or "default"] = {
                "full_strength_s": spread([v for x in rs for v in x["full_strength_s"]]),
                "detection_s": spread([v for x in rs for v in x["detection_s"]]),
            }
        by_stack[st] = {"python": pythons[st], "modes": per_mode}
    _summary(arms_out, out)
    return {"backend": a.backend, "replicas": a.replicas, "failures": a.failures,
            "repeats": a.repeats, "spares": spares_list, "control": a.control,
            "restarts": restarts, "warm_restart": warms, "ranks": ranks,
            "order": rounds, "arms": arms_out, "modes": by_mode, "stacks": by_stack}


def kept_run(cfg: DemoConfig, say: Any = None) -> Path:  # noqa: ARG001 - run_demo's shape
    """The run a kept bench made for this arm and round (`--reread`): the one tft-* folder
    under its outputs."""
    runs = sorted((cfg.outputs / "torchft").glob("tft-*"))
    if len(runs) != 1:
        raise SystemExit(f"--reread: {cfg.outputs}/torchft holds {len(runs)} runs, not 1")
    return runs[0]


def _summary(arms: dict[str, Any], out) -> None:
    print("\nper arm: goodput median (min .. max) over the rounds; time to full strength", file=out)
    for name, arm in arms.items():
        if name == "control":
            r = arm["failure_free_step_rate"]
            print(f"  control   failure-free rate {r['median']} steps/s ({r['spread']})",
                  file=out)
            continue
        g = arm["goodput"]
        lo, hi = g["spread"] or (None, None)
        print(f"  {name:9} goodput {_pct(g['median'])} ({_pct(lo)} .. {_pct(hi)}) against "
              f"{arm['goodput_against']}; median to full strength "
              f"{_fmt(arm['median_full_strength_s'])}", file=out)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["slurm", "local", "both"], default="both")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--spares", default="0",
                    help="Warm spares: FT_SPARES, S more array tasks; a comma list (0,1) runs "
                         "one arm per count")
    ap.add_argument("--failures", type=int, default=5)
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                    help="The Lighthouse's heartbeat timeout [its default]")
    ap.add_argument("--mode", default="",
                    help="Failure modes, a comma list (kill,hang,stall,freeze-node): every arm "
                         "runs once per mode [the demo's own]")
    ap.add_argument("--restarts", default="",
                    help="FT_MAX_RESTARTS, a comma list (0,3): one arm per value [the job's "
                         "default]")
    ap.add_argument("--warm", default="",
                    help="FT_WARM_RESTART, a comma list (0,1): one arm per value [the job's "
                         "default: on for CPU]")
    ap.add_argument("--python", default="",
                    help="Interpreters the jobs run (FTSLURM_PYTHON), a comma list: one arm per "
                         "interpreter, named by its training stack; e.g. `python3,~/.cache/"
                         "ftslurm/venv-titan03/bin/python`: both stacks alternated [this one]")
    ap.add_argument("--ranks", type=int, default=1,
                    help="Ranks per replica (GPUS_PER_NODE) [1]")
    ap.add_argument("--control", action="store_true",
                    help="Add a failure-free control arm; goodput against it")
    ap.add_argument("--repeats", type=int, default=1, help="Rounds of all arms [1]")
    ap.add_argument("--json", action="store_true",
                    help="Print the figures as JSON on stdout (the table goes to stderr).")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the run under this outputs dir.")
    ap.add_argument("--reread", type=Path, default=None,
                    help="Run nothing: read the runs a --control/--repeats bench kept with "
                         "--keep DIR again (the same arguments), with this checkout's report")
    a = ap.parse_args()
    try:
        a.spares_list = [int(x) for x in a.spares.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--spares {a.spares}: a count or a comma list of counts (0,1)")
    a.modes = [m.strip() for m in a.mode.split(",") if m.strip()]
    try:
        a.restarts_list = [int(x) for x in a.restarts.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--restarts {a.restarts}: a count or a comma list of counts (0,3)")
    try:
        a.warm_list = [int(x) for x in a.warm.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--warm {a.warm}: 0, 1 or 0,1")
    if any(n not in (0, 1) for n in a.warm_list):
        ap.error(f"--warm {a.warm}: 0, 1 or 0,1")
    if any(n < 0 for n in a.restarts_list) or not 1 <= a.ranks <= 8:
        ap.error("--restarts >= 0 and 1 <= --ranks <= 8")
    if (not a.spares_list or min(a.spares_list) < 0 or a.replicas < 2 or a.failures < 0
            or a.repeats < 1):
        ap.error("--spares >= 0, --replicas >= 2, --failures >= 0 and --repeats >= 1")
    a.pythons = {}
    try:
        for python in (os.path.expanduser(x.strip()) for x in a.python.split(",") if x.strip()):
            a.pythons[stack_of(python)] = python
    except UserError as e:
        ap.error(str(e))
    if (a.control or a.repeats > 1 or len(a.spares_list) > 1 or len(a.modes) > 1
            or a.restarts_list or a.warm_list or a.ranks > 1 or a.pythons):
        if a.backend == "both":
            ap.error("--control, --repeats, several --spares or --mode: one --backend")
        if a.control and a.failures == 0:
            ap.error("--control compares failure runs with a failure-free one: --failures >= 1")
        if a.reread is not None:
            res = compare(a, a.reread, run=kept_run)
        else:
            with tempfile.TemporaryDirectory() as d:
                res = compare(a, a.keep or Path(d))
        if a.json:
            print(json.dumps(res, indent=1))
        return
    out = sys.stderr if a.json else sys.stdout
    backends = ["slurm", "local"] if a.backend == "both" else [a.backend]
    mode = a.modes[0] if a.modes else None
    results = []
    for b in backends:
        if a.keep:
            results.append(measure(b, a.failures, a.keep, a.replicas, a.spares_list[0], out,
                                   a.heartbeat_timeout_ms, mode))
        else:
            with tempfile.TemporaryDirectory() as d:
                results.append(measure(b, a.failures, Path(d), a.replicas, a.spares_list[0],
                                       out, a.heartbeat_timeout_ms, mode))
    print(
        "\nnotes: 'running' = the launcher's first line of the new attempt (1 s resolution; "
        "n/a with spares: a warm spare takes over); the heal waits for the next DiLoCo sync.",
        file=out,
    )
    if a.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=1))


if __name__ == "__main__":
    main()
