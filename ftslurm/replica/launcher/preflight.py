"""Node health for the launcher: a pre-flight check before training, and taking a bad node
out of the array's way; the failure history that decides both is failure_history.py.

Why: a replica that fails is requeued, and without these checks nothing stops it from landing
on the same bad node again (a GPU with uncorrectable ECC errors, one off the bus): every
attempt would fail the same way until the lifetime cap (FT_MAX_REQUEUES) ends the replica for
good. So:

- `run_checks` runs before torchrun: on GPUs the expected GPU count, each GPU answering an
  `nvidia-smi` query, no uncorrectable ECC error or pending row remap, a short allocation on
  each GPU; on CPU a check that the run folder takes a file (a node without the shared
  filesystem fails every attempt). FTSLURM_PREFLIGHT_FAIL=<check>[@<node>] fails one on
  purpose. A failed check ends the attempt with PREFLIGHT_EXIT and its reason.
- `take_out`: drains the node (`scontrol update State=DRAIN Reason="ftslurm: ..."`), or, where
  Slurm refuses (not an admin) or FTSLURM_BAD_NODES=avoid, hands it back for the requeue's
  ExcNodeList; never the last node the array could run on (said loudly instead). Every
  action is a line of `<run folder>/failures/nodes.jsonl` (`status`, `doctor`, `report`).
- `before_training` and `after_failure`: the launcher's two calls, which record a failure in
  the history, ask it whether the replica comes back and whether the node is bad.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ftslurm import knobs, paths, runner, safefile, versions
from ftslurm.errors import UserError
from ftslurm.replica import exits
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher.failure_history import (
    NODE_NAME,
    Failure,
    bad_node,
    counted,
    epoch,
    events_paths,
    failures_dir,
    injected_event,
    open_folder,
    read_history,
    record_failure,
)
from ftslurm.replica.plan import Env
from ftslurm.slurm import client

PREFLIGHT_EXIT = exits.PREFLIGHT
MAX_NODE_LINES_BYTES = 1 << 20
NVIDIA_SMI_TIMEOUT_S = 20.0
ALLOCATION_TIMEOUT_S = 120.0
GPU_CHECKS = ("gpu-count", "nvidia-smi", "ecc", "allocation")
CPU_CHECKS = ("cpu",)
REASON_PREFIX = "ftslurm: "
_UNSUPPORTED = ("[n/a]", "n/a", "[not supported]", "not supported", "")


# ---- the pre-flight check -------------------------------------------------------------------


class CheckFailed(Exception):
    """A pre-flight check failed: `check` is its name, the message the evidence."""

    def __init__(self, check: str, why: str):
        super().__init__(why)
        self.check = check


def forced(env: Env, host: str) -> str | None:
    """The check FTSLURM_PREFLIGHT_FAIL fails on this node (`<check>` or `<check>@<node>`)."""
    raw = (knobs.load(env).FTSLURM_PREFLIGHT_FAIL or "").strip()
    if not raw:
        return None
    check, _, node = raw.partition("@")
    return check if not node or node == host else None


def _smi(args: Sequence[str], run: Callable[..., runner.Completed]) -> list[list[str]]:
    """`nvidia-smi <args> --format=csv,noheader,nounits` as rows of stripped cells."""
    out = run(["nvidia-smi", *args, "--format=csv,noheader,nounits"],
              timeout=NVIDIA_SMI_TIMEOUT_S)  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    return [[c.strip() for c in line.split(",")] for line in lines]


def _set(cell: str) -> bool:
    """A remapped-rows flag: `Yes`, `1` (or any count above 0)."""
    word = cell.strip().lower()
    return word in ("yes", "true") or (word.isdigit() and int(word) > 0)


def _number(cell: str) -> int | None:
    return None if cell.lower() in _UNSUPPORTED or not cell.isdigit() else int(cell)


def gpu_checks(expected: int, python: str,
               run: Callable[..., runner.Completed] = runner.run) -> list[str]:  # fmt: skip
    """The GPU checks in order; the names of those passed. Raises CheckFailed."""
    try:
        rows = _smi(["--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total"], run)
    except runner.CommandError as e:
        raise CheckFailed("nvidia-smi", f"nvidia-smi does not answer: {e.one_line()}") from None
    if len(rows) < expected:
        raise CheckFailed("gpu-count", f"{len(rows)} GPU(s) visible, {expected} expected "
                          "(GPUS_PER_NODE): one may have fallen off the bus")  # fmt: skip
    for row in rows[:expected]:
        try:
            _smi(["-i", row[0], "--query-gpu=index"], run)
        except runner.CommandError as e:
            raise CheckFailed("nvidia-smi", f"GPU {row[0]} ({row[1] if len(row) > 1 else '?'}) "
                              f"does not answer: {e.one_line()}") from None  # fmt: skip
    bad = [f"GPU {r[0]}: {_number(r[2])} uncorrectable ECC error(s)" for r in rows[:expected]
           if len(r) > 2 and (_number(r[2]) or 0) > 0]  # fmt: skip
    try:  # Ampere and later: a separate query, keyed by bus id; older drivers refuse it
        remaps = _smi(["--query-remapped-rows=gpu_bus_id,remapped_rows.pending,"
                       "remapped_rows.failure"], run)  # fmt: skip
    except runner.CommandError:
        remaps = []
    index = {r[1].lower(): r[0] for r in rows[:expected] if len(r) > 1}
    for r in remaps:
        if len(r) > 2 and r[0].lower() in index and (_set(r[1]) or _set(r[2])):
            bad.append(f"GPU {index[r[0].lower()]}: a row remap pending or failed (reset or "
                       "replace the GPU)")  # fmt: skip
    if bad:
        raise CheckFailed("ecc", "; ".join(bad))
    code = (
        f"import torch\nfor i in range({expected}):\n"
        " x = torch.ones(1 << 20, device=f'cuda:{i}')\n"
        " assert float(x.sum().item()) == float(1 << 20), i\n"
    )
    try:
        run([python, "-c", code], timeout=ALLOCATION_TIMEOUT_S)
    except runner.CommandError as e:
        raise CheckFailed("allocation", f"a 4 MB allocation on each GPU failed: "
                          f"{e.one_line()}") from None  # fmt: skip
    return list(GPU_CHECKS)


def cpu_check(run_dir: Path) -> list[str]:
    """The CPU node's check: the run folder (shared between the nodes) takes a file; a node
    without the shared filesystem would fail every attempt later and less clearly."""
    probe = run_dir / f".preflight-{socket.gethostname()}-{secrets.token_hex(4)}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        safefile.real_dir(run_dir)
        safefile.write_atomic(probe, "ok\n")
        probe.unlink()
    except (OSError, UserError) as e:
        raise CheckFailed("cpu", f"the run folder {run_dir} takes no file: {e}") from None
    return list(CPU_CHECKS)


def run_checks(env: Env, device: str, run_dir: Path, host: str,
               run: Callable[..., runner.Completed] = runner.run) -> list[str]:  # fmt: skip
    """This node's pre-flight checks for `device`; the names of those passed. Raises
    CheckFailed with the check's name and the evidence."""
    s = knobs.load(env, device)
    names = GPU_CHECKS if device == "cuda" else CPU_CHECKS
    if (check := forced(s, host)) is not None and check in names:
        raise CheckFailed(check, f"check {check!r} failed on purpose (FTSLURM_PREFLIGHT_FAIL="
                          f"{s.raw('FTSLURM_PREFLIGHT_FAIL').strip()})")  # fmt: skip
    if device == "cuda":
        gpus = s.GPUS_PER_NODE
        python = s.FTSLURM_PYTHON or sys.executable
        return gpu_checks(gpus, python, run)
    return cpu_check(run_dir)


# ---- taking a node out -----------------------------------------------------------------------


@dataclass(frozen=True)
class NodeAction:
    """What was done to a bad node: `drain`, `avoid` (the task's ExcNodeList) or `kept`."""

    time: float
    node: str
    action: str
    reason: str
    job: str | None = None
    task: int | None = None
    note: str = ""

    def undo(self) -> str:
        """The command that brings the node back (nothing to undo for `kept`), its words
        shell-quoted; none for a node name or a job that is not one (a damaged record must
        not put a command of its own into what a person copies)."""
        if not NODE_NAME.fullmatch(self.node):
            return ""
        if self.action == "drain":
            return "sudo scontrol update " + shlex.join([f"NodeName={self.node}",
                                                        "State=RESUME"])  # fmt: skip
        if self.action == "avoid" and _job_id(self.job) and type(self.task) is int:
            return (
                f"scontrol update {shlex.quote(f'JobId={self.job}_{self.task}')} ExcNodeList= "
                "(while it pends; or resubmit)"
            )
        return ""


ACTIONS = ("drain", "avoid", "kept")


def _job_id(job: object) -> bool:
    """Whether `job` is a Slurm job id as the launcher records it (digits)."""
    return isinstance(job, str) and re.fullmatch(r"[0-9]{1,20}", job) is not None


def _action(rec: object) -> NodeAction | None:
    """One line of nodes.jsonl, or None when a field is not what `take_out` writes: a time
    (`epoch`), an action of ACTIONS, strings, a job id (digits) and a task. A node name that
    is not one (NODE_NAME) stays, to be shown escaped, but gets no undo command (`undo`)."""
    if not isinstance(rec, dict):
        return None
    t, node, action = epoch(rec.get("time")), rec.get("node"), rec.get("action")
    reason, job, task, note = rec.get("reason"), rec.get("job"), rec.get("task"), rec.get(
        "note", "")  # fmt: skip
    if (t is None or not isinstance(node, str) or action not in ACTIONS
            or not isinstance(reason, str)
            or not (job is None or _job_id(job))
            or not (task is None or (type(task) is int and 0 <= task < 1 << 31))
            or not isinstance(note, str)):  # fmt: skip
        return None
    return NodeAction(t, node[:256], action, reason[:512], job, task, note[:512])


def node_actions_path(run_dir: Path) -> Path:
    return failures_dir(run_dir) / "nodes.jsonl"


def record_action(run_dir: Path, action: NodeAction) -> None:
    folder = open_folder(run_dir)
    fd = safefile.open_append(folder / "nodes.jsonl", mode=0o644)
    with os.fdopen(fd, "ab") as f:
        f.write((json.dumps(asdict(action)) + "\n").encode())


def read_actions(run_dir: Path) -> list[NodeAction]:
    """The node actions of one run, oldest first; a damaged line (`_action`: a time that is
    not a clock's, a field of the wrong type) is skipped."""
    text = safefile.read_text(node_actions_path(run_dir), MAX_NODE_LINES_BYTES) or ""
    out = []
    for line in text.splitlines():
        try:
            act = _action(json.loads(line))
        except (ValueError, RecursionError):
            continue
        if act is not None:
            out.append(act)
    return out


_DOWN = ("drain", "down", "fail", "maint", "reboot", "inval", "future", "unk")


def state_usable(state: str) -> bool:
    """Whether a node in sinfo's `state` (%T, with its flag suffixes) can run work: not
    drained, draining, down, failing or unknown."""
    return not state.rstrip("*~#!%$@^").lower().startswith(_DOWN)


def usable_nodes(slurm: client.SlurmClient, partition: str | None) -> list[str]:
    """The nodes of `partition` (None: every partition) that can take a job: not drained,
    draining, down or failing."""
    return sorted({r.name for r in slurm.node_rows()
                   if (partition in (None, r.partition)) and state_usable(r.state)})  # fmt: skip


def node_state(env: Mapping[str, str], node: str) -> str | None:
    """`node`'s state as sinfo prints it; None when Slurm cannot say (the caller then treats
    the node as unknown, never as healthy)."""
    try:
        return client.current(env=env, timeout=15).nodes().get(node)
    except (runner.CommandError, UserError):
        return None


def take_out(env: Env, run_dir: Path, node: str, evidence: str,
             say: Callable[[str], None]) -> NodeAction:  # fmt: skip
    """Drain `node` with a reason naming ftslurm and the evidence, or mark it to be avoided
    (the caller adds it to the requeue's ExcNodeList), per FTSLURM_BAD_NODES; never the last
    node the array could run on (kept, said loudly). The action is recorded for `status`,
    `doctor` and `report`."""
    s = knobs.load(env)
    mode = s.FTSLURM_BAD_NODES
    job, task = s.env.get("SLURM_ARRAY_JOB_ID"), s.env.get("SLURM_ARRAY_TASK_ID")
    task_id = int(task) if task and task.isdigit() else None
    reason = (REASON_PREFIX + evidence)[:200].replace("\n", " ")

    def done(action: str, note: str = "") -> NodeAction:
        act = NodeAction(time.time(), node, action, reason, job, task_id, note)
        try:
            record_action(run_dir, act)
        except (OSError, UserError) as e:
            say(f"bad node: could not record the {action} of {node} ({e})")
        return act

    if mode == "off":
        say(f"bad node {node}: {evidence}; left in service (FTSLURM_BAD_NODES=off)")
        return done("kept", "FTSLURM_BAD_NODES=off")
    slurm = client.current(env=s.env, timeout=60)
    try:
        usable = usable_nodes(slurm, s.env.get("SLURM_JOB_PARTITION") or None)
    except (runner.CommandError, UserError) as e:
        usable = []
        say(f"bad node {node}: sinfo failed ({e}); treating it as the last node")
    if not [n for n in usable if n != node]:
        say("!" * 78)
        say(f"!!! WARNING: {node} is bad ({evidence}) but it is the LAST node this array can "
            "run on: NOT draining nor avoiding it. Fix or replace it, or add nodes; the "
            f"replica keeps landing there. Drain by hand: sudo scontrol update NodeName={node} "
            f"State=DRAIN Reason=\"{reason}\"")  # fmt: skip
        say("!" * 78)
        return done("kept", "the last node the array could run on")
    if mode == "drain":
        try:
            slurm.update_node(node, "DRAIN", reason)
            say(f"drained {node}: {reason} (undo: sudo scontrol update NodeName={node} "
                "State=RESUME)")  # fmt: skip
            return done("drain")
        except (runner.CommandError, UserError) as e:
            say(f"could not drain {node} ({e}): avoiding it through the task's ExcNodeList")
    return done("avoid")


def requeue(env: Mapping[str, str], target: str, avoid: Sequence[str]) -> None:
    """`scontrol requeue target`, with `avoid` added to its ExcNodeList when not empty."""
    slurm = client.current(env=env, timeout=60)
    if avoid:
        slurm.requeue_excluding(target, avoid)
    else:
        slurm.requeue(target)


# ---- the launcher's two calls ---------------------------------------------------------------


def _task(plan: planlib.Plan) -> int:
    """The array task whose history this attempt adds to (with spares the slot may differ)."""
    task = plan.settings.env.get("SLURM_ARRAY_TASK_ID", "").strip()
    if plan.task is not None:
        return plan.task
    return int(task) if task.isdigit() and len(task) < 7 else plan.replica_id


def _array_size(plan: planlib.Plan) -> int:
    """How many task histories this array can have: Slurm's highest task id + 1 (the
    array's size when it has gaps), else its count, else the group (and its spares); never
    less than this task's id + 1. `histories` caps it at MAX_TASK_FILES."""
    s = plan.settings
    for name, extra in (("SLURM_ARRAY_TASK_MAX", 1), ("SLURM_ARRAY_TASK_COUNT", 0)):
        value = s.env.get(name, "").strip()
        if re.fullmatch(r"[0-9]{1,6}", value):
            return max(int(value) + extra, _task(plan) + 1)
    return max(plan.group_size + s.FT_SPARES, _task(plan) + 1)


def _remember(plan: planlib.Plan, failure: Failure,
              say: Callable[[str], None]) -> tuple[planlib.Plan, list[float]]:  # fmt: skip
    """Record `failure`; the plan and the failure times the caps count. A history that
    cannot be written falls back to the lifetime cap (FT_MAX_REQUEUES), so a crash loop ends
    anyway."""
    run_dir = planlib.run_folder(plan.settings, paths.project_root())
    try:
        return plan, counted(record_failure(run_dir, _task(plan), failure))
    except (OSError, UserError) as e:
        say(f"failure history not written ({e}): FT_MAX_REQUEUES={plan.max_requeues} caps "
            "the requeues instead")  # fmt: skip
        return replace(plan, lifetime_cap=True), [] if failure.injected else [failure.t]


def before_training(plan: planlib.Plan,
                    say: Callable[[str], None]) -> tuple[int, str] | None:  # fmt: skip
    """The pre-flight check of this node (FTSLURM_PREFLIGHT): None when it passed, else
    (PREFLIGHT_EXIT, the evidence), the failure recorded and the node taken out. First the
    training stack's versions (versions.check_stack): an unsupported build is the user's
    to fix (UserError, exit code 2), not the node's."""
    versions.check_stack(planlib.PRESETS[plan.preset].worker)
    s = plan.settings
    if plan.kind != "ft" or not s.FTSLURM_PREFLIGHT:
        return None
    host = socket.gethostname()
    run_dir = planlib.run_folder(s, paths.project_root())
    t0 = time.monotonic()
    try:
        passed = run_checks(s, plan.device, run_dir, host)
    except CheckFailed as e:
        evidence = f"pre-flight check {e.check} failed: {e}"
        say(f"pre-flight: {evidence}; not training on {host} (exit code {PREFLIGHT_EXIT})")
        _remember(plan, Failure(time.time(), host, PREFLIGHT_EXIT, "preflight",
                                  detail=evidence), say)  # fmt: skip
        return PREFLIGHT_EXIT, evidence
    say(f"pre-flight: {', '.join(passed)} passed on {host} ({time.monotonic() - t0:.1f} s)")
    return None


def after_failure(plan: planlib.Plan, returncode: int, cancelled: bool,
                  refused: str | None, started: float, say: Callable[[str], None],
                  preflight: str | None = None) -> tuple[bool, str, list[str]]:  # fmt: skip
    """Whether the attempt requeues itself, why, and the nodes its requeue must avoid.
    A failure is recorded in the task's history (a failed pre-flight check already is), the
    rate cap decides, and a node found bad (its pre-flight check, or FT_NODE_MAX_FAILS) is
    taken out. A failure simulate-failure injected is neither counted nor held against the
    node unless it was marked --count-as-bad."""
    s = plan.settings
    if returncode == 0 or cancelled or refused or planlib.requeue_target(plan) is None:
        # outside a job array nothing requeues: no history to keep, no node to take out
        return (*planlib.should_requeue(plan, returncode, cancelled, refused), [])
    host = socket.gethostname()
    run_dir = planlib.run_folder(s, paths.project_root())
    now = time.time()
    if preflight is None:
        logs = events_paths(s, planlib.outputs_folder(s, paths.project_root()), run_dir)
        ev = injected_event(logs, started, plan.array_job_id,
                            sorted({plan.replica_id, _task(plan)}), host)
        injected = ev is not None and not ev.count_as_bad
        if ev is not None:
            say(
                f"the failure was injected by simulate-failure ({ev.action} at {ev.time}"
                f"{', --count-as-bad' if ev.count_as_bad else ''}): "
                f"{'counted against the node' if ev.count_as_bad else 'not counted'}"
            )
        code = returncode if returncode >= 0 else 128 - returncode
        plan, times = _remember(plan, Failure(now, host, code, injected=injected), say)
    else:  # before_training recorded it; no history readable: the lifetime cap, as there
        injected = False
        times = counted(read_history(run_dir, _task(plan)))
        if not times:
            plan, times = replace(plan, lifetime_cap=True), [now]
    requeue, why = planlib.should_requeue(plan, returncode, cancelled, refused, times, now)
    evidence = preflight or (
        None
        if injected
        else bad_node(run_dir, host, now, plan.fail_window_s, s.FT_NODE_MAX_FAILS,
                      _array_size(plan), say)  # fmt: skip
    )
    avoid = []
    if evidence:
        act = take_out(s, run_dir, host, evidence, say)
        if act.action == "avoid":
            avoid.append(host)
    return requeue, why, avoid
