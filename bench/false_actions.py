"""False-action soak: healthy training under disturbances that are not failures, counting every
action the fault-tolerance machinery took. Every count must be 0.

Why: the watchdog (replica/launcher/watchdog.py), the peer watch (replica/worker/peer_watch.py), the
pre-flight and drain rules (replica/launcher/preflight.py), the restart in place and the requeue
(replica/launcher/job.py) and the warm spares (replica/worker/standby.py) exist to stop and
bring back a
replica that failed; one that stops a healthy replica costs the run what a failure costs. A
failure soak (bench/soak.py) shows they act; this one shows they keep still when they must.

The run: `ftslurm demo --backend slurm`'s code (DemoConfig, SlurmBackend): the local Slurm, the
managed Lighthouse, the FT sbatch array with DEVICE=cpu (the debug model, DiLoCo), 2 replicas
and 1 warm spare, NO failure injected, for --minutes from the full quorum (the main segment),
under the disturbances of --disturb (default all):
  busy                os.cpu_count() busy loops beside the training, from the submit to the end
  lighthouse-pause    the Lighthouse SIGSTOPped --pause-s s every --pause-every-s s, always
                      SIGCONTed (finally; SIGTERM and SIGHUP end the bench through the same path)
  lighthouse-restart  `ftslurm lighthouse restart` once, between two pauses near the middle
  slow-save           a model checkpoint every --checkpoint-interval steps, each save holding the
                      training thread --save-s s more (FTSLURM_EMULATE_SAVE_S in the job's
                      environment, `--checkpoint.interval=N` in FTSLURM_EXTRA_ARGS)
  rogue-client        every --rogue-every-s s one hostile request to the Lighthouse on loopback:
                      a quorum request of torchft's own LighthouseClient under an id built to
                      break readers (`Step: <5000 digits>`, a heartbeat item's markup, 20,000
                      characters, ...) with a 1 s timeout, or an HTTP GET of an odd path; at most
                      --rogue-max of them. The quorum requests say shrink_only: a Lighthouse puts
                      any client that asks into its next quorum (torchft's has no
                      authentication), and a member that never trains is a failure, not a
                      disturbance; shrink_only keeps it out of quorums of known members. It waits
                      around the Lighthouse restart and the final job's start, when no quorum is
                      known and it would join the first one.
  time-limit          a short final segment: after the main segment's job, a second array job
                      (same cluster, Lighthouse and disturbances) with STEPS=--final-steps;
                      each task gets USR1 in its batch step (`scancel --signal=USR1 --batch`,
                      what Slurm's `--signal=B:USR1@N` sends) once its replica logged step
                      STEPS-1, i.e. while it is on its last step; the spare then too. That job
                      must end FINISHED: every launcher exits 0, none requeues.
A failure-free control (the same replicas and spare, no disturbance, as long) runs after
(--control-first: before; --no-control: none).

Counted, per run and attributed to the disturbances whose event came at most --attribute-s s
before the action (every one that did; busy is the background, named when no other is):
watchdog kills (`watchdog: ending the training worker`), peer-watch aborts (`peer watch: step
failed at once`), refused commits (`peer watch: not committing`), failed commits (the report's
should_commit=False), drains and bad-node lines, failed pre-flight checks, requeues (the
launcher's, the time-limit's), restarts in place, crash-loop stops (`not requeueing:` a rule),
spare claims (a banner `taken from task`), fenced replicas, the report's false quorum drops and
other failures, and worker exit codes other than 0. The main segment's lines after its job was
cancelled (the end of the run) are not counted: each log is read up to its size at the cancel.
Also: the replica-steps trained in the main segment vs the control (rate ratio; goodput against
the control), the load average at the start and at the end of the main segment.

Prints the figures (`--json`: one object on stdout); progress lines go to stderr. Exits 1 when
any count is not 0 or the time-limit job did not end FINISHED (naming each, with its log line).
`--dry-run` prints the plan and starts nothing.

Run (root; under the shared lock: --minutes twice, plus ~2 minutes of start-ups per arm and
~2-4 minutes for the time-limit job):
  flock /tmp/ftslurm-heavy.lock python bench/false_actions.py --json
  flock /tmp/ftslurm-heavy.lock python bench/false_actions.py --minutes 3 --pause-every-s 40 \
      --no-control --json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import soak  # noqa: E402
from ftslurm import demo, knobs, logvocab, procs, runner, submission  # noqa: E402
from ftslurm.errors import UserError  # noqa: E402
from ftslurm.textsafe import printable  # noqa: E402
from ftslurm.wait import WaitTimeout, wait_for  # noqa: E402

DISTURBANCES = ("busy", "lighthouse-pause", "lighthouse-restart", "slow-save", "rogue-client",
                "time-limit")  # fmt: skip
BACKGROUND = "busy"  # continuous: named for an action no event of another disturbance explains
# a disturbance whose events come every few seconds gets a short window of its own: what a
# hostile request does, it does at once, and a whole window would name it for every action
SHORT_WINDOW_S = {"rogue-client": 10.0}
REPLICAS, SPARES = 2, 1
# the actions counted, in the order printed; every one must stay 0
KINDS = ("watchdog_kills", "peer_watch_aborts", "refused_commits", "failed_commits", "drains",
         "preflight_refusals", "requeues", "restarts_in_place", "crash_loop_stops",
         "spare_claims", "fenced", "false_drops", "report_failures", "bad_exits")  # fmt: skip
LABELS = {
    "watchdog_kills": "watchdog kills", "peer_watch_aborts": "peer-watch aborts",
    "refused_commits": "refused commits (peer watch)", "failed_commits":
    "failed commits (should_commit=False)", "drains": "drains / bad-node lines",
    "preflight_refusals": "failed pre-flight checks", "requeues": "requeues",
    "restarts_in_place": "restarts in place", "crash_loop_stops": "crash-loop stops",
    "spare_claims": "spare claims", "fenced": "fenced replicas",
    "false_drops": "false quorum drops", "report_failures": "other failures (report)",
    "bad_exits": "worker exits != 0",
}  # fmt: skip
MAX_LINES = 40  # action lines kept in the output per run
FINAL_END_S = 120.0  # the time-limit job's last saves and exits, after the last USR1

# ---------------------------------------------------------------- the line shapes
# Each copied from the code that writes it (named); logvocab has no parser for these.
WATCHDOG = "watchdog: ending the training worker"  # job.py _wait_watched
PEER_ABORT = "[ftslurm] peer watch: step failed at once"  # peer_watch.py PeerWatch
REFUSED = "[ftslurm] peer watch: not committing"  # peer_watch.py patched_should_commit
RESTART = "restarting in place on "  # logvocab.restart_line (job.py _restart_in_place)
QUORUM_RETRY = "[ftslurm] quorum: no quorum in time"  # peer_watch.py _quorum_retrying
# job.py _run_torchrun: `[2026-01-01 10:00:00]  training worker exited with code 137`
_EXIT = re.compile(r"^\[[^\]]{1,40}\]  (?:torchrun|training worker) exited with code (-?\d{1,6})")
_REQUEUE = re.compile(r"^requeueing \S+: ")  # job.py _finish
_NOT_REQUEUED = re.compile(r"^not requeueing: (.*)")  # job.py _finish, plan.should_requeue's why
_BENIGN = ("training finished", "stopped by a signal")  # the two whys of a run that ended
# preflight.take_out and preflight.before_training
_DRAIN = re.compile(r"^(?:drained \S+: |bad node \S+: |could not drain \S+ \(|!!! WARNING: \S+ "
                    r"is bad )")  # fmt: skip
_PREFLIGHT = re.compile(r"^pre-flight: .*; not training on \S+")
_FENCED = re.compile(r"^fenced: slot \d+ has a newer claim")  # job.py _conclude
# torchtitan's checkpoint save (components/checkpoint.py): the saving replica, the other one
SAVE_MARKS = (b"Saving the checkpoint (or staging if async is enabled)",
              b"doesn't save checkpoint")  # fmt: skip
# job.py: the launcher's answer to USR1 during the last step
LAST_STEP_FINISHED = "training finished: Slurm's time-limit signal came during its last step"


def _say(m: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {m}", file=sys.stderr, flush=True)


def log_now() -> float:
    """Now on the logs' clock: their local wall time read as if it were UTC
    (logvocab.parse_time), so an event here and a log line compare."""
    return time.time() + time.localtime().tm_gmtoff


def log_iso(t: float | None) -> str | None:
    """A log-clock time as the report writes one (no zone)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None).isoformat(
        timespec="milliseconds")


def _iso_time(text: object) -> float | None:
    """The report's naive ISO time on the log clock (one with a zone: moved onto it)."""
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is not None:
        return t.timestamp() + time.localtime().tm_gmtoff
    return t.replace(tzinfo=timezone.utc).timestamp()


# ---------------------------------------------------------------- counting (pure)


@dataclass(frozen=True)
class Action:
    """One action of the machinery: its kind (KINDS), its time on the log clock (None: the
    file had no timed line before it), where it was read, and the line (printable)."""

    kind: str
    time: float | None
    where: str
    line: str


@dataclass
class Scan:
    """What one log says: the actions, the checkpoint saves' times, the quorum retries."""

    actions: list[Action] = field(default_factory=list)
    saves: list[float] = field(default_factory=list)
    quorum_retries: int = 0


def line_kind(text: str, raw: bytes) -> str | None:
    """The action one replica-log line records, else None."""
    if WATCHDOG in text:
        return "watchdog_kills"
    if PEER_ABORT in text:
        return "peer_watch_aborts"
    if REFUSED in text:
        return "refused_commits"
    if RESTART in text:
        return "restarts_in_place"
    if (m := _EXIT.match(text)) is not None:
        return "bad_exits" if int(m[1]) != 0 else None
    if _REQUEUE.match(text) or logvocab.parse_time_limit(raw) is not None:
        return "requeues"
    if (m := _NOT_REQUEUED.match(text)) is not None:
        return None if m[1].startswith(_BENIGN) else "crash_loop_stops"
    if _DRAIN.match(text):
        return "drains"
    if _PREFLIGHT.match(text):
        return "preflight_refusals"
    if _FENCED.match(text):
        return "fenced"
    if logvocab.BANNER in raw and (ev := logvocab.parse_launch(raw, None)) is not None:
        return "spare_claims" if "taken from task" in ev.detail else None
    return None


def scan_lines(lines: Iterable[bytes], where: str) -> Scan:
    """The actions in a replica log's lines (each at the time of its own timestamp or, for a
    line without one, the last one before it), and its checkpoint saves."""
    out = Scan()
    last: float | None = None
    for raw in lines:
        if logvocab.has_time(raw) and (t := logvocab.parse_time(raw)) is not None:
            last = t
        if any(m in raw for m in SAVE_MARKS) and last is not None:
            out.saves.append(last)
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if QUORUM_RETRY in text:
            out.quorum_retries += 1
        kind = line_kind(text, raw)
        if kind is not None:
            out.actions.append(Action(kind, last, where, printable(text[:300])))
    return out


def scan_log(path: Path, end: int | None = None) -> Scan:
    """`scan_lines` of a log's first `end` bytes (None: all): the part before the run's end."""
    try:
        with open(path, "rb") as f:
            data = f.read() if end is None else f.read(end)
    except OSError:
        return Scan()
    return scan_lines(data.splitlines(keepends=True), path.name)


def report_actions(rep: dict, where: str, cut: float | None = None) -> list[Action]:
    """The report's failures (false drops apart) and failed commits, before `cut`."""
    out: list[Action] = []
    for f in rep.get("failures", []):
        kind = "false_drops" if f.get("false_drop") else "report_failures"
        text = (f"report: replica {f.get('replica')} {f.get('kind')} at step {f.get('step')} "
                f"(quorum {f.get('quorum_id')})")  # fmt: skip
        out.append(Action(kind, _iso_time(f.get("time")), where, printable(text)))
    for c in rep.get("commit_failures", []):
        text = (f"report: replica {c.get('replica')} should_commit=False at step "
                f"{c.get('step')}: {str(c.get('detail') or '')[:200]}")  # fmt: skip
        out.append(Action("failed_commits", _iso_time(c.get("time")), where, printable(text)))
    return [a for a in out if cut is None or a.time is None or a.time < cut]


@dataclass(frozen=True)
class Event:
    """A disturbance's event: a pause, the restart, a save, a hostile request, a USR1."""

    kind: str
    time: float
    detail: str = ""


def attribute(action: Action, events: Sequence[Event], window_s: float,
              background: str | None) -> list[str]:  # fmt: skip
    """The disturbances with an event at most `window_s` s (SHORT_WINDOW_S for theirs)
    before `action`, sorted; else `background` (the continuous one), else 'none'."""
    if action.time is None:
        return ["unknown time"]
    hit = sorted({e.kind for e in events
                  if e.time <= action.time <= e.time + SHORT_WINDOW_S.get(e.kind, window_s)})
    return hit or [background or "none"]


def tally(actions: Iterable[Action]) -> dict[str, int]:
    """Every kind's count (0 included), in KINDS' order."""
    n = Counter(a.kind for a in actions)
    return {k: n.get(k, 0) for k in KINDS}


def by_disturbance(actions: Sequence[Action], events: Sequence[Event], window_s: float,
                   background: str | None) -> dict[str, dict[str, int]]:  # fmt: skip
    """Per disturbance: the count of each kind of action attributed to it (the kinds with
    none left out). An action near two disturbances counts under both."""
    out: dict[str, Counter[str]] = {}
    for a in actions:
        for name in attribute(a, events, window_s, background):
            out.setdefault(name, Counter())[a.kind] += 1
    return {name: {k: n[k] for k in KINDS if n[k]} for name, n in sorted(out.items())}


def failed_lines(actions: Sequence[Action], run: str) -> list[str]:
    """One line per action, for the verdict: the run, the kind, when, and its log line."""
    return [f"{run}: {LABELS[a.kind]} at {log_iso(a.time) or '?'} ({a.where}): {a.line}"
            for a in actions]  # fmt: skip


# ---------------------------------------------------------------- the time limit (pure)


def time_limit_outcome(texts: dict[int, bytes], holders: Sequence[int], gone: bool,
                       states: dict[int, str] | None = None) -> dict:  # fmt: skip
    """How the final job ended, from its task logs (`texts`: task -> log) and Slurm's task
    states where squeue still lists them: FINISHED when it left the queue, every task
    COMPLETED and every launcher exited 0 without a requeue, every replica (`holders`) having
    finished its training and said so for the signal; REQUEUED when a launcher requeued;
    else UNFINISHED."""
    states = states or {}
    codes: dict[int, list[int]] = {}
    said, requeued, completed = [], [], []
    for task, data in sorted(texts.items()):
        lines = data.splitlines()
        codes[task] = [int(m[1]) for raw in lines
                       if (m := _EXIT.match(raw.decode("utf-8", "replace")))]  # fmt: skip
        if any(LAST_STEP_FINISHED.encode() in raw for raw in lines):
            said.append(task)
        if any(line_kind(raw.decode("utf-8", "replace"), raw) == "requeues" for raw in lines):
            requeued.append(task)
        if any((ev := logvocab.parse_line(raw)) is not None and ev.kind == logvocab.FINISHED
               for raw in lines):  # fmt: skip
            completed.append(task)
    ok_exits = all(c and all(x == 0 for x in c) for c in codes.values())
    ok_exits = ok_exits and all(v == "COMPLETED" for v in states.values())
    if requeued:
        state = "REQUEUED"
    elif gone and ok_exits and set(holders) <= set(completed) and set(holders) <= set(said):
        state = "FINISHED"
    else:
        state = "UNFINISHED"
    return {"state": state, "exit_codes": {str(t): c for t, c in codes.items()},
            "said_finished_at_signal": said, "training_completed": completed,
            "requeued": requeued, "job_gone": gone,
            "slurm_states": {str(t): v for t, v in sorted(states.items())}}  # fmt: skip


# ---------------------------------------------------------------- the plan (pure)


@dataclass
class Plan:
    minutes: float
    disturb: tuple[str, ...]
    pause_every_s: float
    pause_s: float
    save_s: float
    checkpoint_interval: int
    final_steps: int
    rogue_every_s: float
    rogue_max: int
    busy: int
    control: str  # after | before | none
    attribute_s: float
    heartbeat_timeout_ms: int | None

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0

    def pauses(self) -> list[float]:
        """Offsets from the main segment's start of each Lighthouse pause."""
        if "lighthouse-pause" not in self.disturb or self.pause_every_s <= 0:
            return []
        n = int((self.seconds - self.pause_s - 5.0) // self.pause_every_s)
        return [k * self.pause_every_s for k in range(1, n + 1)]

    def restart_at(self) -> float | None:
        """The Lighthouse restart's offset: half-way between the two pauses around the middle
        (the middle itself without pauses), so each has its own window."""
        if "lighthouse-restart" not in self.disturb:
            return None
        every, mid = self.pause_every_s, self.seconds / 2
        if self.pauses() and every > 0:
            at = (math.floor(mid / every) + 0.5) * every
            if at < self.seconds - 20.0:
                return at
        return mid

    def schedule(self) -> list[tuple[float, str]]:
        """The timed events of the main segment, in order: (offset s, disturbance)."""
        todo = [(t, "lighthouse-pause") for t in self.pauses()]
        if (r := self.restart_at()) is not None:
            todo.append((r, "lighthouse-restart"))
        return sorted(todo)

    def job_env(self, user_extra: str = "") -> dict[str, str]:
        """What the disturbed job's environment gets beside the demo's (slow-save)."""
        if "slow-save" not in self.disturb:
            return {}
        extra = f"--checkpoint.interval={self.checkpoint_interval} {user_extra}".strip()
        return {"FTSLURM_EMULATE_SAVE_S": f"{self.save_s:g}", "FTSLURM_EXTRA_ARGS": extra}

    def arms(self) -> list[str]:
        if self.control == "none":
            return ["disturbed"]
        return ["control", "disturbed"] if self.control == "before" else ["disturbed", "control"]


def default_interval(minutes: float) -> int:
    """A checkpoint interval that gives several saves in the run: about eight at ~1.5 s a step
    (2 replicas beside busy loops on 2 cores), a multiple of the debug preset's sync_steps (6),
    from 12 to 120 steps."""
    steps = minutes * 60.0 / 1.5 / 8
    return int(min(120, max(12, 6 * round(steps / 6))))


def make_plan(a: argparse.Namespace) -> Plan:
    """The plan of the parsed options; a UserError for a bad one."""
    disturb = tuple(d.strip() for d in a.disturb.split(",") if d.strip())
    if bad := [d for d in disturb if d not in DISTURBANCES]:
        raise UserError(f"--disturb: unknown {bad[0]!r}; any of {', '.join(DISTURBANCES)}")
    for name in ("minutes", "pause_every_s", "pause_s", "save_s", "rogue_every_s",
                 "attribute_s"):  # fmt: skip
        v = getattr(a, name)
        if not (math.isfinite(v) and v > 0):
            raise UserError(f"--{name.replace('_', '-')} must be a number > 0")
    if a.pause_s >= a.pause_every_s:
        raise UserError("--pause-s must be shorter than --pause-every-s")
    if a.final_steps < 6 or a.rogue_max < 0:
        raise UserError("--final-steps must be at least 6, --rogue-max at least 0")
    interval = a.checkpoint_interval or default_interval(a.minutes)
    if interval < 1:
        raise UserError("--checkpoint-interval must be at least 1")
    control = "none" if a.no_control else "before" if a.control_first else "after"
    return Plan(a.minutes, disturb, a.pause_every_s, a.pause_s, a.save_s, interval,
                a.final_steps, a.rogue_every_s, a.rogue_max, os.cpu_count() or 1, control,
                a.attribute_s, a.heartbeat_timeout_ms)  # fmt: skip


def demo_config(outputs: Path, plan: Plan, steps: int = 1_000_000) -> demo.DemoConfig:
    """The demo's configuration of every run here: 2 replicas, 1 warm spare, no failure."""
    return demo.DemoConfig(replicas=REPLICAS, failures=0, backend="slurm", outputs=outputs,
                           spares=SPARES, steps=steps, timeout=300,
                           heartbeat_timeout_ms=plan.heartbeat_timeout_ms)  # fmt: skip


def plan_lines(plan: Plan, user_extra: str = "") -> list[str]:
    """What the bench will do (--dry-run); nothing is started."""
    on = set(plan.disturb)
    env = plan.job_env(user_extra)
    with job_env(env):
        submit = demo.submit_request(demo_config(Path("<outputs>"), plan), "<lighthouse>")
        line = submit.cli_line(["DEVICE", *env])
    m = plan.seconds
    out = [f"{REPLICAS} replicas + {SPARES} warm spare, the FT sbatch array on the local Slurm "
           "(ftslurm demo --backend slurm's code), no failure injected",
           f"arms: {', '.join(plan.arms())}; each: cluster up, Lighthouse, submit, full quorum "
           f"and the spare warm, then {plan.minutes:g} min ({m:.0f} s), then scancel, stop",
           f"disturbed arm's submit: {line}",
           f"disturbances: {', '.join(plan.disturb) or 'none'}"]  # fmt: skip
    if "busy" in on:
        out.append(f"  busy: {plan.busy} busy loops (python, normal priority) from the submit to "
                   "the arm's end, stopped by pid")
    if pauses := plan.pauses():
        shown = ", ".join(f"{p:g}" for p in pauses[:12]) + (" ..." if len(pauses) > 12 else "")
        out.append(f"  lighthouse-pause: SIGSTOP {plan.pause_s:g} s at +{shown} s "
                   f"({len(pauses)} pauses), SIGCONT on every way out")
    if (r := plan.restart_at()) is not None:
        out.append(f"  lighthouse-restart: ftslurm lighthouse restart --state-dir <its dir> at "
                   f"+{r:g} s; then wait for a quorum of {REPLICAS}")
    if "slow-save" in on:
        out.append(f"  slow-save: {' '.join(f'{k}={v}' for k, v in env.items())} (a checkpoint "
                   f"every {plan.checkpoint_interval} steps, each {plan.save_s:g} s longer)")
    if "rogue-client" in on:
        out.append(f"  rogue-client: one request every {plan.rogue_every_s:g} s to "
                   f"127.0.0.1:<Lighthouse port>, at most {plan.rogue_max}: LighthouseClient."
                   f"quorum(shrink_only=True, timeout 1 s) under {len(ROGUE_IDS)} hostile ids, "
                   f"GETs of {len(ROGUE_PATHS)} odd paths; held around the restart and the "
                   "final job's start")
    if "time-limit" in on:
        out.append(f"  time-limit: after the main segment, a second array job with "
                   f"STEPS={plan.final_steps}; `scancel --signal=USR1 --batch <job>_<task>` to "
                   f"each replica's task once it logged step {plan.final_steps - 1}, then to "
                   "the spare's; it must end FINISHED (every launcher exits 0, no requeue)")
    out.append(f"counted: {', '.join(LABELS[k] for k in KINDS)}; attributed to the "
               f"disturbances with an event up to {plan.attribute_s:g} s before; all must be 0")
    return out


# ---------------------------------------------------------------- the job's environment


@contextlib.contextmanager
def job_env(extra: dict[str, str]) -> Iterator[None]:
    """The demo's job environment plus `extra` while inside: the demo has no hook for more,
    so its `_replica_env` is wrapped and put back after."""
    plain = demo._replica_env
    if extra:
        demo._replica_env = lambda cfg, addr: {**plain(cfg, addr), **extra}  # type: ignore[assignment]
    try:
        yield
    finally:
        demo._replica_env = plain  # type: ignore[assignment]


# ---------------------------------------------------------------- the disturbances

BUSY_CODE = "from ftslurm.procs import die_with_parent\ndie_with_parent()\nwhile True:\n    pass\n"


@contextlib.contextmanager
def busy_loops(n: int, say: Callable[[str], None]) -> Iterator[list[int]]:
    """`n` busy loops (they die with this process too), stopped by pid on the way out."""
    kids = []
    try:
        for _ in range(n):
            kids.append(runner.spawn([sys.executable, "-c", BUSY_CODE], cwd=ROOT, detach=True))
        say(f"busy: {n} busy loops started (pids {', '.join(str(k.pid) for k in kids)})")
        yield [k.pid for k in kids]
    finally:
        procs.kill_pids([k.pid for k in kids if k.poll() is None], signal.SIGKILL)
        for k in kids:  # our children: no pid of theirs is reused before this
            with contextlib.suppress(Exception):
                k.wait(timeout=10)
        if kids:
            say(f"busy: {len(kids)} busy loops stopped")


class Paused:
    """The Lighthouse processes SIGSTOPped now, to SIGCONT on every way out."""

    def __init__(self) -> None:
        self.ids: list[procs.ProcId] = []

    def stop(self, pids: Sequence[int]) -> None:
        self.ids = [p for p in map(procs.ProcId.of, pids) if p is not None]
        procs.kill_pids([p.pid for p in self.ids], signal.SIGSTOP)

    def resume(self) -> int:
        """SIGCONT what is still the process that was stopped; how many."""
        alive = [p.pid for p in self.ids if p.present]
        procs.kill_pids(alive, signal.SIGCONT)
        self.ids = []
        return len(alive)


def pause_lighthouse(lh_dir: Path, seconds: float, paused: Paused, say: Callable[[str], None]
                     ) -> bool:  # fmt: skip
    """SIGSTOP the Lighthouse's processes for `seconds`, SIGCONT in every case."""
    from ftslurm import lighthouse

    st = lighthouse.status(lh_dir, probe=False)
    if not st.running or st.pid is None:
        say("lighthouse-pause: no Lighthouse running; skipped")
        return False
    pids = procs.process_tree(st.pid)
    try:
        paused.stop(pids)
        time.sleep(seconds)
    finally:
        n = paused.resume()
    say(f"lighthouse-pause: {len(pids)} process(es) (pid {st.pid}) stopped {seconds:g} s, "
        f"{n} continued")  # fmt: skip
    return True


def new_quorum_of(log: Path, offset: int, n: int) -> bool:
    """A `Quorum!` line of `n` replicas in the Lighthouse log after byte `offset` (from the
    start when the log was rotated since)."""
    try:
        size = log.stat().st_size
        with open(log, "rb") as f:
            f.seek(offset if size >= offset else 0)
            data = f.read()
    except OSError:
        return False
    for raw in data.splitlines():
        if b"Quorum! Quorum {" in raw and (q := logvocab.parse_line(raw)) is not None:
            if len({logvocab.split_replica_id(m.replica_id)[1] for m in q.members}) == n:
                return True
    return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def restart_lighthouse(b: demo.SlurmBackend, rogue: Rogue | None,
                       say: Callable[[str], None]) -> None:  # fmt: skip
    """`ftslurm lighthouse restart` (the CLI users run), then wait for a quorum of all."""
    log = Path(b.lighthouse.log_path)
    offset = _size(log)
    if rogue is not None:
        rogue.hold()
    try:
        out = runner.run([sys.executable, "-m", "ftslurm", "lighthouse", "restart",
                          "--state-dir", str(b.lh_dir)], timeout=120, check=False, cwd=ROOT)
        said = (out.stderr.strip().splitlines() or ["(nothing)"])[-1]
        say(f"lighthouse-restart: exit {out.returncode}: {printable(said[:200])}")
        t0 = time.monotonic()
        try:
            wait_for(lambda: new_quorum_of(log, offset, REPLICAS), 300, interval=0.5,
                     what=f"a quorum of {REPLICAS} after the Lighthouse restart")  # fmt: skip
            say(f"lighthouse-restart: quorum of {REPLICAS} again after "
                f"{time.monotonic() - t0:.1f} s")  # fmt: skip
        except WaitTimeout as e:
            say(f"lighthouse-restart: {e}")
    finally:
        if rogue is not None:
            rogue.release()


# hostile replica ids: each breaks a reader that trusts what an id holds (the status page's
# items, a step inside an id, a huge id, markup and terminal escapes)
ROGUE_IDS = (
    "Step: " + "9" * 5000,
    '<li class="heartbeat old">x: seen 99s ago</li>',
    "r" * 20000,
    "torchtitan_ft_1:rogue-" + "f" * 36,
    "x Step: 1 </div></li><b>&\"'\x1b]0;PWNED\x07\x1b[31m",
    "quorum_id: 999999999999999999999 participants: []",
)
ROGUE_PATHS = (
    "/status/" + "9" * 3000,
    "/replica/" + quote('<li class="heartbeat old">') + "/kill",
    "/../../../../etc/passwd",
    "/status?x=" + quote("Step: " + "9" * 2000),
    "/" + "%00%ff" * 50,
    "/" + "a/" * 500,
)


class Rogue:
    """The hostile client, on a thread: one request every `every_s` s, at most `limit`."""

    def __init__(self, port: int, every_s: float, limit: int, say: Callable[[str], None]):
        self.port, self.every_s, self.limit, self.say = port, every_s, limit, say
        self.held, self.done = threading.Event(), threading.Event()
        self.times: list[float] = []
        self.outcomes: Counter[str] = Counter()
        self.got_quorum: list[str] = []
        self.client: Any = None
        self.thread = threading.Thread(target=self._run, name="rogue-client", daemon=True)

    def hold(self) -> None:
        self.held.set()

    def release(self) -> None:
        self.held.clear()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=15)

    def _run(self) -> None:
        try:
            from torchft._torchft import LighthouseClient
        except ImportError as e:
            self.outcomes[f"no torchft client: {e}"] += 1
            return
        k = 0
        while not self.done.wait(self.every_s):
            if self.held.is_set() or k >= self.limit:
                continue
            self.times.append(log_now())
            try:
                self.outcomes[self._one(k, LighthouseClient)] += 1
            except Exception as e:  # noqa: BLE001 - any answer of a hostile request is fine
                self.outcomes[f"{'quorum' if k % 2 == 0 else 'get'}: {type(e).__name__}"] += 1
                if not isinstance(e, TimeoutError):
                    self.client = None  # connect again (the Lighthouse restarted)
            k += 1

    def _one(self, k: int, client: Any) -> str:
        if k % 2 == 0:
            rid = ROGUE_IDS[(k // 2) % len(ROGUE_IDS)]
            if self.client is None:  # one client: each new one logs its connection
                self.client = client(f"http://127.0.0.1:{self.port}",
                                     connect_timeout=timedelta(seconds=5))  # fmt: skip
            q = self.client.quorum(replica_id=rid, timeout=timedelta(seconds=1),
                                   address="rogue:1", store_address="rogue:2", step=10**9,
                                   world_size=1, shrink_only=True)  # fmt: skip
            members = [printable(p.replica_id[:40]) for p in q.participants]
            self.got_quorum.append(f"quorum {q.quorum_id}: {', '.join(members)}")
            self.say(f"rogue-client: a hostile id GOT a quorum: {self.got_quorum[-1]}")
            return "quorum: answered"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", ROGUE_PATHS[(k // 2) % len(ROGUE_PATHS)])
            return f"get: HTTP {conn.getresponse().status}"
        finally:
            conn.close()

    def figures(self) -> dict:
        return {"requests": len(self.times), "outcomes": dict(sorted(self.outcomes.items())),
                "got_quorum": self.got_quorum}  # fmt: skip


# ---------------------------------------------------------------- one arm


@dataclass
class Arm:
    """What one arm ran and where its logs are."""

    name: str
    run_dirs: list[Path] = field(default_factory=list)
    ends: dict[Path, int] = field(default_factory=dict)  # log -> bytes counted (absent: all)
    cut: dict[Path, float] = field(default_factory=dict)  # run dir -> its end (log clock)
    events: list[Event] = field(default_factory=list)
    load_start: tuple[float, ...] = ()
    load_end: tuple[float, ...] = ()
    wall_s: float = 0.0
    main_s: float = 0.0
    time_limit: dict | None = None
    rogue: dict | None = None


def _usr1(job: int, task: int) -> str:
    """USR1 to array task `task`'s batch step, as Slurm's `--signal=B:USR1@N` sends it."""
    from ftslurm.slurm import client

    out = client.current().call(["scancel", "--signal=USR1", "--batch", f"{job}_{task}"],
                                check=False)  # fmt: skip
    return "sent" if out.returncode == 0 else f"scancel exit {out.returncode}: {out.stderr[:120]}"


def _gone(job: int) -> bool:
    """No task of `job` queued or running (squeue's default states: `squeue --json` also
    lists the jobs that ended a while ago)."""
    from ftslurm.slurm import client

    return str(job) not in client.current().active_job_ids()


def _states(job: int) -> dict[int, str]:
    """Each task's Slurm state as squeue still lists it after the end (empty where it does
    not: the text fallback lists only live jobs)."""
    from ftslurm.slurm import client

    return {j.array_task_id: j.state for j in client.current().jobs(job)
            if j.array_task_id is not None}  # fmt: skip


def _cancel(job: int, say: Callable[[str], None]) -> None:
    from ftslurm.slurm import client

    client.current().scancel(str(job), check=False)
    try:
        wait_for(lambda: _gone(job), 120, interval=1.0, what=f"job {job} to leave the queue")
    except WaitTimeout as e:
        say(str(e))


def _cancel_left(jobs: Sequence[int], say: Callable[[str], None]) -> None:
    """On the way out: cancel this arm's jobs still queued (the teardown cancels the last)."""
    for job in jobs:
        try:
            if not _gone(job):
                _cancel(job, say)
        except (runner.CommandError, UserError) as e:
            say(f"could not cancel job {job}: {e}")


def copy_lighthouse_log(b: demo.SlurmBackend, run_dir: Path) -> None:
    """The Lighthouse's log (its rotated part first) into `run_dir`, for the report."""
    log = Path(b.lighthouse.log_path)
    with open(run_dir / "lighthouse.log", "wb") as out:
        for part in (log.with_name(log.name + ".1"), log):
            with contextlib.suppress(OSError), open(part, "rb") as f:
                shutil.copyfileobj(f, out)


def final_segment(b: demo.SlurmBackend, cfg: demo.DemoConfig, plan: Plan, arm: Arm,
                  rogue: Rogue | None, say: Callable[[str], None]) -> dict:  # fmt: skip
    """The time-limit segment: a job of `final_steps`, each task signalled on its last step."""
    cfg2 = dataclasses.replace(cfg, steps=plan.final_steps, measured=[])
    log = Path(b.lighthouse.log_path)
    offset = _size(log)
    if rogue is not None:
        rogue.hold()  # no quorum known to the Lighthouse yet: it would join the first one
    b.cfg = cfg2
    job = submission.submit(demo.submit_request(cfg2, b.lighthouse.address), say=say).job_id
    b.job, b.run_id = job, str(job)
    b.attach_logs()
    arm.run_dirs.append(b.run_dir)
    say(f"time-limit: submitted job {job} (STEPS={plan.final_steps}); USR1 to each task on its "
        "last step")  # fmt: skip
    sent: dict[int, dict] = {}

    def signal_last_steps() -> bool:
        if rogue is not None and rogue.held.is_set() and new_quorum_of(log, offset, REPLICAS):
            rogue.release()
        for slot in range(cfg2.replicas):
            task = demo._holder(b, slot)[0]
            rl = b.logs[task]
            rl.poll()
            if task not in sent and rl.last_step >= plan.final_steps - 1:
                t = log_now()
                sent[task] = {"slot": slot, "step": rl.last_step, "time": log_iso(t),
                              "scancel": _usr1(job, task)}  # fmt: skip
                arm.events.append(Event("time-limit", t, f"USR1 to task {task}"))
                say(f"time-limit: USR1 to task {task} (replica {slot}) at its step "
                    f"{rl.last_step}: {sent[task]['scancel']}")  # fmt: skip
        return len(sent) == cfg2.replicas

    try:
        wait_for(signal_last_steps, cfg2.timeout, interval=0.2,
                 what="every replica on its last step")  # fmt: skip
    except WaitTimeout as e:  # the verdict says it (UNFINISHED); the main segment's figures stay
        say(f"time-limit: {e}")
    finally:
        if rogue is not None:
            rogue.release()
    holders = sorted(sent)
    for task in range(cfg2.tasks):
        if task not in sent:
            t = log_now()
            sent[task] = {"slot": None, "time": log_iso(t), "scancel": _usr1(job, task)}
            arm.events.append(Event("time-limit", t, f"USR1 to spare task {task}"))
    try:
        wait_for(lambda: _gone(job), FINAL_END_S, interval=1.0, what=f"job {job} to end")
        gone = True
    except WaitTimeout as e:
        say(f"time-limit: {e}")
        gone = False
    texts = {t: rl.path.read_bytes() if rl.path.is_file() else b"" for t, rl in enumerate(b.logs)}
    out = {"job": job, "steps": plan.final_steps, "signalled": {str(t): s for t, s in
                                                               sorted(sent.items())},
           **time_limit_outcome(texts, holders, gone, _states(job))}  # fmt: skip
    say(f"time-limit: job {job} {out['state']}")
    if not gone:
        arm.cut[b.run_dir] = log_now()
        arm.ends.update({rl.path: _size(rl.path) for rl in b.logs})
        _cancel(job, say)
    return out


def main_segment(b: demo.SlurmBackend, plan: Plan, on: set[str], arm: Arm, rogue: Rogue | None,
                 paused: Paused, say: Callable[[str], None]) -> None:  # fmt: skip
    """--minutes of training from now, with the timed disturbances when they are due."""
    t0 = time.monotonic()
    todo = [(t, k) for t, k in plan.schedule() if k in on]
    say(f"{arm.name}: training {plan.minutes:g} min from now"
        + (f"; {len(todo)} timed disturbance event(s)" if todo else ""))
    for at, kind in todo:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        arm.events.append(Event(kind, log_now(), f"+{at:g} s"))
        if kind == "lighthouse-pause":
            pause_lighthouse(b.lh_dir, plan.pause_s, paused, say)
        else:
            restart_lighthouse(b, rogue, say)
    time.sleep(max(0.0, t0 + plan.seconds - time.monotonic()))
    arm.main_s = time.monotonic() - t0


def run_arm(name: str, plan: Plan, out: Path, say: Callable[[str], None]) -> Arm:
    """One arm: the demo's Slurm set-up, the main segment (with the disturbances if `name` is
    'disturbed'), the time-limit segment, everything stopped on every way out."""
    on = set(plan.disturb) if name == "disturbed" else set()
    cfg = demo_config(out, plan)
    cfg.validate()
    arm = Arm(name, load_start=os.getloadavg())
    paused = Paused()
    t_start = time.monotonic()
    env = plan.job_env(knobs.environ().FTSLURM_EXTRA_ARGS or "") if on else {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(job_env(env))
        b = demo.SlurmBackend(cfg, say)
        stack.callback(b.teardown)  # last: the job, the Lighthouse, the cluster
        jobs: list[int] = []
        stack.callback(_cancel_left, jobs, say)
        stack.callback(paused.resume)  # before the Lighthouse is stopped
        b.setup()
        jobs.append(b.job)
        if "busy" in on:
            stack.enter_context(busy_loops(plan.busy, say))
        say(f"{name}: waiting for a quorum of {REPLICAS} and the spare warm ...")
        wait_for(lambda: b.quorum_size() == REPLICAS, cfg.timeout, interval=0.5,
                 what=f"a quorum of {REPLICAS}")  # fmt: skip
        demo._wait_spares(b, cfg, say)
        rogue = None
        if "rogue-client" in on:
            rogue = Rogue(b.lighthouse.port, plan.rogue_every_s, plan.rogue_max, say)
            rogue.start()
            stack.callback(rogue.stop)
        main_segment(b, plan, on, arm, rogue, paused, say)
        arm.load_end = os.getloadavg()
        arm.ends.update({rl.path: _size(rl.path) for rl in b.logs})
        arm.cut[b.run_dir] = log_now()
        arm.run_dirs.append(b.run_dir)
        say(f"{name}: {plan.minutes:g} min done; cancelling job {b.job}")
        _cancel(b.job, say)
        copy_lighthouse_log(b, b.run_dir)
        if "time-limit" in on:
            arm.time_limit = final_segment(b, cfg, plan, arm, rogue, say)
            jobs.append(b.job)
        if rogue is not None:
            rogue.stop()
            arm.rogue = rogue.figures()
            arm.events += [Event("rogue-client", t) for t in rogue.times]
    arm.wall_s = time.monotonic() - t_start
    return arm


# ---------------------------------------------------------------- figures


def _report(run_dir: Path) -> dict:
    from ftslurm.report import build_report

    return build_report(str(run_dir)).to_json()


def arm_figures(arm: Arm, plan: Plan) -> tuple[dict, list[Action]]:
    """An arm's counts, attribution and training figures; its actions."""
    actions: list[Action] = []
    saves: list[float] = []
    retries = 0
    reports = {}
    for run_dir in arm.run_dirs:
        for log in sorted(run_dir.glob("tft-*_*.out")):
            s = scan_log(log, arm.ends.get(log))
            actions += s.actions
            saves += s.saves
            retries += s.quorum_retries
        rep = _report(run_dir)
        reports[run_dir] = rep
        actions += report_actions(rep, run_dir.name, arm.cut.get(run_dir))
    events = list(arm.events)
    if "slow-save" in plan.disturb and arm.name == "disturbed":
        events += [Event("slow-save", t) for t in saves]
    background = BACKGROUND if arm.name == "disturbed" and BACKGROUND in plan.disturb else None
    sm = reports[arm.run_dirs[0]]["summary"] if arm.run_dirs else {}
    counts = Counter(e.kind for e in events)
    fig = {
        "run_dirs": [str(d) for d in arm.run_dirs], "wall_s": round(arm.wall_s, 1),
        "main_s": round(arm.main_s, 1), "actions": tally(actions),
        "total_actions": len(actions),
        "by_disturbance": by_disturbance(actions, events, plan.attribute_s, background),
        "disturbance_events": dict(sorted(counts.items())),
        "events": [f"{log_iso(e.time)} {e.kind} {e.detail}".strip() for e in sorted(
            arm.events, key=lambda e: e.time) if e.kind != "rogue-client"],
        "lines": failed_lines(actions, arm.name)[:MAX_LINES],
        "quorum_retries": retries,
        "replica_steps_trained": sm.get("replica_steps_trained"),
        "goodput_window_s": sm.get("goodput_window_s"),
        "steps_committed": sm.get("steps_committed"),
        "report": {"failures": sm.get("failures"), "false_drops": sm.get("false_drops"),
                   "requeues": sm.get("requeues"), "restarts_in_place":
                   sm.get("restarts_in_place"), "commit_failures": sm.get("commit_failures"),
                   "bad_nodes": len(reports[arm.run_dirs[0]].get("bad_nodes", []))
                   if arm.run_dirs else None},
        "load_avg_start": [round(x, 2) for x in arm.load_start],
        "load_avg_end": [round(x, 2) for x in arm.load_end],
        "time_limit": arm.time_limit, "rogue_client": arm.rogue,
    }  # fmt: skip
    return fig, actions


def _rate(fig: dict) -> float | None:
    trained, window = fig.get("replica_steps_trained"), fig.get("goodput_window_s")
    return trained / window if trained is not None and window else None


def summarize(plan: Plan, arms: dict[str, Arm]) -> dict:
    """The whole result: per arm, the totals, the ratio, the verdict."""
    figs, failed = {}, []
    total = {k: 0 for k in KINDS}
    for name, arm in arms.items():
        fig, actions = arm_figures(arm, plan)
        figs[name] = fig
        for k, v in fig["actions"].items():
            total[k] += v
        failed += failed_lines(actions, name)
        tl = arm.time_limit
        if tl is not None and tl.get("state") != "FINISHED":
            failed.append(f"{name}: time-limit job {tl.get('job')} ended {tl.get('state')}, "
                          "not FINISHED")  # fmt: skip
        if arm.rogue and arm.rogue.get("got_quorum"):
            failed.append(f"{name}: the rogue client got into a quorum: "
                          f"{arm.rogue['got_quorum'][0]}")  # fmt: skip
    out: dict[str, Any] = {
        "minutes": plan.minutes, "disturbances": list(plan.disturb), "replicas": REPLICAS,
        "spares": SPARES, "attribute_s": plan.attribute_s,
        "checkpoint_interval": plan.checkpoint_interval if "slow-save" in plan.disturb else None,
        "arms": figs, "total": total, "pass": not failed, "failed": failed,
    }  # fmt: skip
    if "disturbed" in figs and "control" in figs:
        d, c = _rate(figs["disturbed"]), _rate(figs["control"])
        out["steps_ratio"] = round(d / c, 4) if d is not None and c else None
        try:
            g = soak.report_figures(arms["disturbed"].run_dirs[0],
                                    baseline=arms["control"].run_dirs[0])["goodput"]
        except UserError as e:
            g = f"n/a: {e}"
        out["goodput_vs_control"] = g
    return out


def print_text(res: dict) -> None:
    names = list(res["arms"])
    print(f"false-action soak: {res['replicas']} replicas + {res['spares']} warm spare, "
          f"{res['minutes']:g} min per arm; disturbances: {', '.join(res['disturbances'])}")
    print(f"{'':38}" + "".join(f"{n:>12}" for n in names))
    for k in KINDS:
        print(f"{LABELS[k]:38}" + "".join(f"{res['arms'][n]['actions'][k]:>12}" for n in names))
    for n in names:
        f = res["arms"][n]
        print(f"{n}: replica-steps trained {f['replica_steps_trained']} in "
              f"{f['goodput_window_s']} s; load {f['load_avg_start']} -> {f['load_avg_end']}; "
              f"quorum retries {f['quorum_retries']}; events {f['disturbance_events']}")
        for who, kinds in f["by_disturbance"].items():
            print(f"  {who}: {kinds}")
        if f["time_limit"]:
            print(f"  time limit: job {f['time_limit']['job']} {f['time_limit']['state']}")
        if f["rogue_client"]:
            print(f"  rogue client: {f['rogue_client']}")
    if "steps_ratio" in res:
        print(f"replica-step rate, disturbed / control: {res['steps_ratio']}; goodput against "
              f"the control {res['goodput_vs_control']}")
    print("PASS: no action" if res["pass"] else f"FAIL: {len(res['failed'])} action(s)")


# ---------------------------------------------------------------- main


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="Each arm's length [30].")
    ap.add_argument("--disturb", default=",".join(DISTURBANCES),
                    help="Comma list of disturbances [all].")
    ap.add_argument("--pause-every-s", type=float, default=120.0)
    ap.add_argument("--pause-s", type=float, default=3.0)
    ap.add_argument("--save-s", type=float, default=20.0,
                    help="slow-save: seconds each checkpoint save takes more [20].")
    ap.add_argument("--checkpoint-interval", type=int, default=0,
                    help="slow-save: steps between saves [about 8 saves per arm, 12..120].")
    ap.add_argument("--final-steps", type=int, default=12,
                    help="time-limit: STEPS of the final job [12].")
    ap.add_argument("--rogue-every-s", type=float, default=5.0)
    ap.add_argument("--rogue-max", type=int, default=1000)
    ap.add_argument("--attribute-s", type=float, default=60.0,
                    help="An action is a disturbance's when it came this soon after [60].")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=None,
                    help="The Lighthouse's [ftslurm's default].")
    ap.add_argument("--control-first", action="store_true")
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the runs here.")
    ap.add_argument("--dry-run", action="store_true", help="Print the plan; start nothing.")
    ap.add_argument("--json", action="store_true", help="One JSON object on stdout.")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        plan = make_plan(a)
        user_extra = knobs.environ().FTSLURM_EXTRA_ARGS or ""
        if a.dry_run:
            lines = plan_lines(plan, user_extra)
            print(json.dumps({"plan": lines}, indent=1) if a.json else "\n".join(lines))
            return 0
        if why := demo.slurm_possible():
            raise UserError(f"the false-action soak runs on the local Slurm: {why}")
        out = a.keep or Path(tempfile.mkdtemp(prefix="ftslurm-false-actions-"))
        olds = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            arms = {}
            for name in plan.arms():
                _say(f"arm {name}: outputs {out / name}")
                arms[name] = run_arm(name, plan, out / name, _say)
        finally:
            for s, old in olds.items():
                signal.signal(s, old)
        res = summarize(plan, arms)
    except (UserError, WaitTimeout) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print_text(res)
    for line in res["failed"]:
        print(f"FALSE ACTION: {line}", file=sys.stderr)
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
