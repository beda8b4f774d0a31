"""The per-attempt wrapper the sbatch scripts exec: `python -m ftslurm.replica job|classic`.

Why a wrapper and not a bare torchrun line in the script:
- every attempt starts with one banner line (`[time]  launching replica R (attempt A) on H`)
  that `ftslurm report` uses to tell attempts apart in an appended log;
- torchrun runs as a child in our process group and SIGTERM is forwarded to it, so Slurm's
  cancel / requeue / node-down tears the replica down (torchrun then stops its worker, which
  lives in its own session and would otherwise keep training); with one rank per node the
  training worker itself is that child, without torchrun (FTSLURM_SKIP_TORCHRUN, startup.py);
- a crash that Slurm did not cause (OOM kill, a SIGKILLed worker, a Python exception) on a
  node that is still fine restarts the training in place, in this allocation (up to
  FT_MAX_RESTARTS times): no requeue hold, no new allocation, the imports warm in the page
  cache. Otherwise it is turned into `scontrol requeue <array job>_<task>`: Slurm's --requeue
  only covers node failures, and a replica that simply exits would leave the group short for
  good.
`FTSLURM_DRY_RUN=1` prints the banner and the exact command and runs nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ftslurm import knobs, logfilter, logvocab, paths, procs, runner, safefile, stacks
from ftslurm.errors import UserError
from ftslurm.replica import config_error, exits, handoff, slots
from ftslurm.replica import plan as planlib
from ftslurm.replica.launcher import attempt_guard, lifecycle, warm_restart, watchdog
from ftslurm.replica.launcher import preflight as preflight_mod
from ftslurm.slurm import client


def default_torchrun(env: Mapping[str, str]) -> list[str]:
    """torchrun of the interpreter running us (the sbatch script picks it with
    FTSLURM_PYTHON), so the training runs in the same environment as the launcher."""
    if torchrun := knobs.load(env).FTSLURM_TORCHRUN:
        return [torchrun]
    sibling = Path(sys.executable).parent / "torchrun"
    return [str(sibling)] if sibling.exists() else ["torchrun"]


def head_node(env: Mapping[str, str]) -> str:
    """First host of the allocation, as the cookbook does with `scontrol show hostnames`."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise UserError(
            "SLURM_JOB_NODELIST is not set: run the classic script with sbatch -N <nodes>"
        )
    out = client.current(env=env).hostnames(nodelist)
    if not out:
        raise UserError(f"`scontrol show hostnames {nodelist}` printed nothing; check Slurm")
    return out[0]


def _say(line: str) -> None:
    print(line, flush=True)


def _ensure_cpu_assets(root: Path) -> None:
    """Build assets/local when missing. Array tasks start together on the CPU cluster, so the
    build holds a file lock and re-checks under it: one task builds, the others wait."""
    tok, data = planlib.local_assets(root)

    def present() -> bool:
        # tokenizer_config.json is written last by make_local
        return (tok / "tokenizer_config.json").exists() and (data / "data.jsonl").exists()

    if present():
        return
    tok.parent.mkdir(parents=True, exist_ok=True)
    # never truncated nor followed: a link planted at the lock's name must not make the
    # launcher (root, on some clusters) empty the file it points at
    lock = safefile.open_append(tok.parent / ".build.lock")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if present():
            return
        from ftslurm.replica import assets

        _say(f"local assets missing under {tok.parent}: building them (ftslurm assets make-local)")
        assets.make_local(tok.parent)
    finally:
        os.close(lock)


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run one attempt. argv[0] is `job` (fault-tolerant replica) or `classic`."""
    env = launcher_env(os.environ if env is None else env)
    SIGNALS.clear()
    what = argv[0] if argv else "job"
    if what == "job":
        catch_early_time_limit()
    root = paths.project_root()
    torchrun = default_torchrun(env)
    layout = planlib.slot_layout(env) if what == "job" else None
    if layout is not None:
        return _run_with_slots(env, root, torchrun, layout)
    if what == "job":
        plan = planlib.build_ft_plan(env, root, torchrun, python=[sys.executable])
    elif what == "classic":
        head = "localhost" if knobs.load(env).FTSLURM_SINGLE_NODE else head_node(env)
        plan = planlib.build_classic_plan(env, root, head, torchrun)
    else:
        raise UserError(f"unknown launcher command {what!r}; use `job` or `classic`")

    holder = _warm_holder(plan, env) if what == "job" else None
    restart = 0
    try:
        while True:
            run_env = {**env, RESTART_ENV: str(restart)}
            if _announce(plan, run_env):
                return 0
            _prepare(plan, root)
            code = _run_attempt(plan, run_env, holder)
            if code != RESTART_IN_PLACE:
                return code
            restart += 1
    finally:
        if holder is not None:
            holder.discard()


# The launcher's notes to its worker (set per worker by _spawn_worker): one inherited from the
# submitter's environment (sbatch exports it) would reach the first run's workers, and a
# leaked FTSLURM_WARM_GO_FILE makes them wait before torchft's Manager for ever
LAUNCHER_NOTES = (handoff.GO_ENV, handoff.PROGRESS_ENV, handoff.TIME_LIMIT_ENV,
                  config_error.ENV, "FTSLURM_FENCED_FILE", "FTSLURM_SLOT_FILE",
                  handoff.LAUNCHER_ENV)  # fmt: skip


def launcher_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment: `environ` less the notes only a launcher sets."""
    return {k: v for k, v in environ.items() if k not in LAUNCHER_NOTES}


def _warm_holder(plan: planlib.Plan, env: Mapping[str, str]) -> warm_restart.Holder:
    """The warm next run of a replica without spares (warm_restart.py): the same command
    with the next restart's number, its notes in a folder of its own."""

    s = plan.settings

    def spawn(folder: Path, restart: int) -> runner.Child:
        if s.FTSLURM_ATTEMPT_GUARD:
            _guard_attempt_dir(folder)
        notes = lifecycle.Notes(folder)
        return _spawn_worker(plan, {**env, RESTART_ENV: str(restart)}, notes, go=notes.go)

    # the wait for `go` is in torchtitan's FTManager (standby.py): the tiny worker has none;
    # and a restart in place happens only inside a Slurm job array (lifecycle.decide)
    torchtitan = planlib.PRESETS[plan.preset].worker != "tiny"
    in_array = planlib.requeue_target(plan) is not None
    on = (warm_restart.enabled(s, plan.device) and torchtitan and in_array
          and not s.FTSLURM_DRY_RUN)  # fmt: skip
    return warm_restart.Holder(on, s.FT_MAX_RESTARTS,
                               attempt_dir_prefix(socket.gethostname(), os.getpid()), spawn,
                               say=_say)  # fmt: skip


def catch_early_time_limit() -> None:
    """Note Slurm's time-limit signal (USR1) from the launcher's start: its default action
    would end the launcher during the pre-flight check or the asset build, before the
    attempt's own handler is installed (_run_torchrun)."""
    def noted(_signum: int, _frame: object) -> None:
        SIGNALS.time_limit = True

    signal.signal(signal.SIGUSR1, noted)


def _announce(plan: planlib.Plan, env: Mapping[str, str]) -> bool:
    """The banner, env, command and notes; True on a dry run (nothing to start)."""
    host = socket.gethostname()
    _say(logvocab.banner(time.strftime("%Y-%m-%d %H:%M:%S"), plan, host, restart_of(env)))
    _say("env: " + " ".join(f"{k}={v}" for k, v in sorted(plan.env.items())))
    _say("command: " + plan.command_line())
    for note in plan.notes:
        _say(f"note: {note}")
    if plan.settings.FTSLURM_DRY_RUN:
        _say("dry run (FTSLURM_DRY_RUN=1): nothing started")
        return True
    return False


def _prepare(plan: planlib.Plan, root: Path) -> None:
    if plan.device == "cpu" and planlib.PRESETS[plan.preset].worker != "tiny":
        _ensure_cpu_assets(root)
    else:
        _check_tokenizer(plan)


def slot_env(env: Mapping[str, str], root: Path, layout: tuple[int, int, int],
             spare_only: bool = False) -> dict[str, str]:  # fmt: skip
    """The env of this task's next attempt in a run with spares: it claims the slot
    `slots.startup_slot` picks (FTSLURM_REPLICA_ID = the slot, with its fencing epoch), or
    waits as a spare (FTSLURM_SPARE=1, the slot is claimed in the worker, see standby.py).
    `spare_only`: this task was just fenced out of its slot, so it claims nothing now."""
    task, group, _ = layout
    folder = slots.slots_dir(planlib.run_folder(env, root))
    out = {**env, "FTSLURM_TASK": str(task), "FTSLURM_GROUP_SIZE": str(group),
           "FTSLURM_SLOTS_DIR": str(folder)}  # fmt: skip
    for k in ("FTSLURM_SPARE", "FTSLURM_SLOT_EPOCH", "FTSLURM_REPLICA_ID"):
        out.pop(k, None)
    claim = None
    if not spare_only and not knobs.load(env).FTSLURM_DRY_RUN:
        claims = slots.holders(folder, group)
        slot, why = slots.startup_slot(task, group, claims)
        if slot is not None:
            held = claims.get(slot)
            claim = slots.try_claim(
                folder, slot, 0 if held is None else held.epoch + 1, task,
                socket.gethostname(), os.getpid(), time.time(),
                previous_task=None if held is None else held.task, why=why,
            )  # fmt: skip
            if claim is None:
                why = f"another task claimed slot {slot} first: starting as a spare"
        _say(f"slots: {why}")
    elif not spare_only and task < group:  # dry run: what the first start would do
        claim = slots.Claim(task, 0, task, "", 0, 0.0)
    if claim is None:
        out.update({"FTSLURM_SPARE": "1", "FTSLURM_REPLICA_ID": "0"})
    else:
        out.update({"FTSLURM_REPLICA_ID": str(claim.slot),
                    "FTSLURM_SLOT_EPOCH": str(claim.epoch)})  # fmt: skip
    return out


def _run_with_slots(env: Mapping[str, str], root: Path, torchrun: list[str],
                    layout: tuple[int, int, int]) -> int:  # fmt: skip
    """An attempt of a run with warm spares: claim a slot or wait as a spare; a replica fenced
    out of its slot (a spare took it while it was away) carries on as a spare, in this same
    attempt, rather than stopping."""
    spare_only, restart = False, 0
    while True:
        task_env = slot_env({**env, RESTART_ENV: str(restart)}, root, layout, spare_only)
        plan = planlib.build_ft_plan(task_env, root, torchrun)
        if _announce(plan, task_env):
            return 0
        _prepare(plan, root)
        code = _run_attempt(plan, task_env)
        if code == RESTART_IN_PLACE:
            # back as a spare: a warm spare, if one is free, is already taking the slot over;
            # if none is, this task's own standby claims the slot it left
            restart += 1
        elif code != FENCED_EXIT:
            if code == 0 and not plan.spare:
                slots.mark_finished(Path(task_env["FTSLURM_SLOTS_DIR"]), plan.replica_id)
            return code
        spare_only = True


def _check_tokenizer(plan: planlib.Plan) -> None:
    """The gated tokenizer is downloaded by hand on the login node: without it torchtitan
    fails after torchrun and the imports, and every FT requeue fails the same way. Said once,
    before anything starts (exit 2: a user mistake, not requeued)."""
    flag = stacks.installed().assets_flag  # the flag the plan was built with
    given = planlib.flag_values(plan.argv, flag)
    if not given:
        return
    folder = Path(given[-1])
    missing = [n for n in ("tokenizer.json", "tokenizer_config.json") if not (folder / n).is_file()]
    if missing:
        raise UserError(
            f"tokenizer missing: {', '.join(str(folder / n) for n in missing)}; on the login "
            "node: export HF_TOKEN=hf_... && ftslurm assets download (into a folder the nodes "
            f"share), or point FTSLURM_EXTRA_ARGS={flag}=<folder> at one"
        )


CONFIG_ERROR_EXIT = exits.CONFIG_ERROR
FENCED_EXIT = exits.FENCED
TIME_LIMIT_EXIT = exits.TIME_LIMIT
RESTART_IN_PLACE = exits.RESTART_IN_PLACE
# how many restarts in place this allocation has had, for the banner and the worker
RESTART_ENV = "FTSLURM_RESTART"
# the longest wait between two looks at a run that has a warm next run to start
TICK_S = 1.0
# how long an ended worker's last output may take to come through the log filter
OUTPUT_DRAIN_S = 3.0
# the signals this launcher process got (its handlers set them; a run's end reads them)
SIGNALS = lifecycle.Signals()


def restart_of(env: Mapping[str, str]) -> int:
    """The restart in place this attempt is (0: Slurm started it): the one fact an attempt's
    environment adds to the plan's settings (`main` counts them)."""
    return knobs.load(env)[RESTART_ENV]


ATTEMPT_DIR_PREFIX = attempt_guard.PREFIX
# <prefix><host>-<launcher pid>-<tempfile's random part: [a-z0-9_]>
_ATTEMPT_DIR = re.compile(
    re.escape(ATTEMPT_DIR_PREFIX) + r"(?P<host>.+)-(?P<pid>[0-9]+)-[a-z0-9_]+"
)


def attempt_dir_prefix(host: str, pid: int) -> str:
    """The start of an attempt's temporary folder name: the host and pid of its launcher,
    which tell a later attempt whether the folder's owner is gone (a TMPDIR may be shared
    between nodes, where a pid means nothing)."""
    return f"{ATTEMPT_DIR_PREFIX}{host}-{pid}-"


def remove_stale_attempt_dirs(tmp: Path, host: str) -> list[Path]:
    """Remove the temporary folders of attempts on `host` whose launcher is dead; the ones
    removed. SIGKILL (a node taken down, an OOM kill) skips TemporaryDirectory's cleanup, so
    each killed attempt left one. A live launcher's folder, another host's or another user's
    is kept; a reused pid keeps a stale folder, never removes a live one."""
    removed = []
    for path in tmp.glob(ATTEMPT_DIR_PREFIX + "*"):
        m = _ATTEMPT_DIR.fullmatch(path.name)
        pid = procs.valid_pid(m["pid"]) if m and m["host"] == host else None
        if pid is None or procs.pid_alive(pid):
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _run_attempt(plan: planlib.Plan, env: Mapping[str, str],
                 holder: warm_restart.Holder | None = None) -> int:  # fmt: skip
    if SIGNALS.stopped is not None:  # stopped between a failed run and its restart in place
        return 128 + SIGNALS.stopped
    started = time.time()
    failed = preflight_mod.before_training(plan, _say)  # a bad node trains nothing
    if failed is not None:
        return _conclude(plan, env, lifecycle.Ended(failed[0], preflight=failed[1]), started)
    warm = holder.take(restart_of(env)) if holder is not None else None
    if warm is not None and not warm.release():
        _say(f"warm restart: could not tell the waiting run to train (writing {warm.go_file} "
             "failed); starting cold")  # fmt: skip
        warm.discard(wait_s=0)
        warm = None
    if warm is not None:  # the next run waits warm: its notes are in its own folder
        _say(f"warm restart: this run was started {time.time() - warm.started:.0f} s ago and "
             "waits before torchft's Manager; told to train")  # fmt: skip
        try:
            return _run_torchrun(plan, env, lifecycle.Notes(warm.folder), started, holder, warm)
        finally:
            shutil.rmtree(warm.folder, ignore_errors=True)
    host, tmp_root = socket.gethostname(), Path(tempfile.gettempdir())
    for stale in remove_stale_attempt_dirs(tmp_root, host):
        _say(f"removed {stale}: the temporary folder of an attempt that was killed")
    prefix = attempt_dir_prefix(host, os.getpid())
    with tempfile.TemporaryDirectory(prefix=prefix, dir=tmp_root) as tmp:
        if plan.settings.FTSLURM_ATTEMPT_GUARD:
            _guard_attempt_dir(Path(tmp))
        return _run_torchrun(plan, env, lifecycle.Notes(Path(tmp)), started, holder)


def _guard_attempt_dir(folder: Path) -> None:
    """Start attempt_guard.py for `folder`: it removes the folder once this launcher is gone,
    also after a SIGKILL that skips TemporaryDirectory's cleanup. Its first process exits
    as soon as the guard holds a pidfd of this launcher and has forked away (reaped here)."""
    cmd = [sys.executable, "-m", "ftslurm.replica.launcher.attempt_guard", str(os.getpid()),
           str(folder)]
    try:
        runner.spawn(cmd, detach=True).wait(timeout=60)
    except Exception as e:  # noqa: BLE001 - the guard is a convenience: the attempt runs on
        _say(f"note: no guard for {folder} ({type(e).__name__}: {e}); a later attempt on "
             "this host removes it if this one is killed")  # fmt: skip


def _watchdog(plan: planlib.Plan, progress: Path,
              child: runner.Child) -> watchdog.Watchdog | None:  # fmt: skip
    """The attempt's watchdog (watchdog.py): FT replicas only, off with
    FTSLURM_HANG_TIMEOUT_S=0."""
    s = plan.settings.on(plan.device)
    floor = s.FTSLURM_HANG_TIMEOUT_S
    if plan.kind != "ft" or not floor:
        return None
    return watchdog.Watchdog(
        progress, s.TORCHFT_LIGHTHOUSE, float(floor), stall_floor_s=s.FTSLURM_STALL_TIMEOUT_S,
        stopped=lambda: procs.any_stopped(procs.descendants([child.pid])),
    )


def _wait_watched(child: runner.Child, dog: watchdog.Watchdog | None,
                  tick: Callable[[], object] | None = None) -> int:  # fmt: skip
    """The child's return code; with a watchdog, a worker it finds hung is SIGKILLed with
    every process under the child (torchrun's workers live in sessions of their own), and
    the attempt ends as after a crash. `tick` is called between the checks (at least every
    TICK_S): it starts the warm next run once this one trains."""
    while True:
        wait_s = dog.next_check_s if dog is not None else TICK_S if tick is not None else None
        rc = runner.wait_for_exit(child, wait_s)
        if rc is not None:
            return rc
        if tick is not None:
            tick()
        if dog is None:
            continue
        why = dog.check()
        if why:
            _say(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}]  watchdog: ending the training "
                 f"worker: {why}")  # fmt: skip
            procs.kill_pids(procs.descendants([child.pid]), signal.SIGKILL)
            return child.wait()


def _spawn_worker(plan: planlib.Plan, env: Mapping[str, str], notes: lifecycle.Notes,
                  go: Path | None = None) -> runner.Child:  # fmt: skip
    """Start the run's torchrun (or its one worker). Its notes to and from the launcher are
    the files of `notes`; `go`: a warm next run that waits for it."""
    extra = {**plan.env, config_error.ENV: str(notes.config_error),
             "FTSLURM_FENCED_FILE": str(notes.fenced), "FTSLURM_SLOT_FILE": str(notes.slot),
             handoff.PROGRESS_ENV: str(notes.progress)}  # fmt: skip
    if plan.torchrun_is_child:
        extra[handoff.LAUNCHER_ENV] = str(os.getpid())
    if plan.kind == "ft":
        extra[handoff.TIME_LIMIT_ENV] = str(notes.time_limit)
    if go is not None:
        extra[handoff.GO_ENV] = str(go)
    shorten = logfilter.ReplicaLogFilter() if plan.settings.FTSLURM_LOG_FILTER else None
    return runner.spawn(plan.argv, env=env, extra_env=extra, detach=False, inherit_output=True,
                        output_filter=shorten)  # fmt: skip


def _run_torchrun(plan: planlib.Plan, env: Mapping[str, str], notes: lifecycle.Notes,
                  started: float,
                  holder: warm_restart.Holder | None = None,
                  warm: warm_restart.Standby | None = None) -> int:  # fmt: skip
    cancelled = False
    if warm is not None:  # released by _run_attempt
        child = warm.child
    else:
        child = _spawn_worker(plan, env, notes)
    dog = _watchdog(plan, notes.progress, child)
    restart = restart_of(env)

    def tick() -> None:
        assert holder is not None
        ending = SIGNALS.stopped is not None or SIGNALS.time_limit
        holder.maybe_start(notes.progress, restart, ending)

    def forward(signum: int, _frame: object) -> None:
        nonlocal cancelled
        cancelled = True
        SIGNALS.stop(signum)
        if child.poll() is None:
            child.send_signal(signum)
        if holder is not None and holder.ready is not None and holder.ready.alive():
            holder.ready.child.send_signal(signum)  # the warm next run ends too

    def at_time_limit(_signum: int, _frame: object) -> None:
        # Slurm's `--signal=B:USR1@<s>` before the time limit: the worker sees the file after
        # its step, saves a final checkpoint and ends training (not forwarded: torchrun dies
        # of an unhandled SIGUSR1)
        SIGNALS.time_limit = True  # a restart in place saves at once too
        notes.time_limit.touch()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    if plan.kind == "ft":
        signal.signal(signal.SIGUSR1, at_time_limit)
        if SIGNALS.time_limit:
            notes.time_limit.touch()
        if line := handoff.signal_margin_line(plan.settings):
            _say(line)
    if SIGNALS.stopped is not None:  # a signal that came before the handlers above: forwarded
        forward(SIGNALS.stopped, None)
    rc = _wait_watched(child, dog, tick if holder is not None and holder.enabled else None)
    # the worker's last lines (a traceback) before the launcher's verdict; a process that
    # inherited its output and lives on does not hold the attempt up for longer than this
    runner.output_done(child, OUTPUT_DRAIN_S)
    code = rc if rc >= 0 else 128 - rc
    # without torchrun (FTSLURM_SKIP_TORCHRUN) the code is the worker's own: 137 for SIGKILL
    what = "training worker" if plan.env.get(planlib.WORKER_STORE_ENV) else "torchrun"
    _say(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}]  {what} exited with code {code}")
    refused = config_error.read(notes.config_error) if rc != 0 else None
    if refused:
        _say(f"torchtitan refused its options: {refused}; fix FTSLURM_EXTRA_ARGS (or the "
             "TOML) and submit again")  # fmt: skip
    return _conclude(plan, env, notes.ended(code, plan.kind == "ft", cancelled, refused), started)


def _requeue_at_time_limit(plan: planlib.Plan, env: Mapping[str, str],
                           target: str | None) -> int:  # fmt: skip
    """The worker saved its final checkpoint at Slurm's time-limit signal: requeue this array
    task so training goes on to STEPS (no failure counted, no cap applies). TIME_LIMIT_EXIT,
    not 0: the replica has not finished (a warm-spare run must not mark its slot done).
    `target`: this array task (`planlib.requeue_target`), None outside an array."""
    _say(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}]  {logvocab.time_limit_line(target, None)}")
    if target is not None:
        try:
            preflight_mod.requeue(env, target, ())
        except (runner.CommandError, UserError) as e:
            _say(f"requeue failed: {e}; resubmit the job to go on from the final checkpoint")
    return TIME_LIMIT_EXIT


def _in_place(plan: planlib.Plan, env: Mapping[str, str]) -> lifecycle.InPlace:
    """This allocation as a place for the next attempt (FT_MAX_RESTARTS, the signals that
    came, the node as Slurm sees it: a node down, draining or unknown requeues, so Slurm
    places the replica)."""
    node = env.get("SLURMD_NODENAME") or socket.gethostname()

    def state() -> tuple[str | None, bool]:
        got = preflight_mod.node_state(env, node)
        return got, got is not None and preflight_mod.state_usable(got)

    return lifecycle.InPlace(SIGNALS.stopped is not None, SIGNALS.time_limit, restart_of(env),
                             plan.settings.FT_MAX_RESTARTS, node, state)  # fmt: skip


def _conclude(plan: planlib.Plan, env: Mapping[str, str], ended: lifecycle.Ended,
              started: float) -> int:  # fmt: skip
    """Carry out lifecycle.decide's action for the run that ended (say it; requeue, restart
    in place, wait as a spare); the launcher's exit code. The failure history
    (preflight.after_failure: the rate cap, the node taken out) is asked only for a failure."""
    target = planlib.requeue_target(plan)

    def verdict() -> lifecycle.Verdict:
        requeue, why, avoid = preflight_mod.after_failure(
            plan, ended.code, ended.cancelled, ended.refused, started, _say, ended.preflight)
        return lifecycle.Verdict(requeue, why, tuple(avoid))

    action = lifecycle.decide(ended, verdict, target is not None, lambda: _in_place(plan, env))
    if action.note:
        _say(action.note)
    act = action.act
    if act is lifecycle.Act.REQUEUE_AT_TIME_LIMIT:
        return _requeue_at_time_limit(plan, env, target)
    if act is lifecycle.Act.BECOME_SPARE:
        _say(f"fenced: slot {plan.replica_id} has a newer claim; not requeueing, waiting as a "
             "spare instead")  # fmt: skip
    elif act in (lifecycle.Act.FINISH, lifecycle.Act.STOP) and ended.ft:
        _say(f"not requeueing ({action.why}): not inside a Slurm job array"
             if action.outside_array else f"not requeueing: {action.why}")  # fmt: skip
    elif act is lifecycle.Act.RESTART_IN_PLACE:
        where = action.where
        assert where is not None and action.state is not None
        line = logvocab.restart_line(where.node, action.state, action.why, where.used + 1,
                                     where.cap, plan.attempt)  # fmt: skip
        _say(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}]  {line}")
    elif act is lifecycle.Act.REQUEUE:
        assert target is not None
        away = (f"; it will not start on {', '.join(action.avoid)} (ExcNodeList)"
                if action.avoid else "")  # fmt: skip
        _say(f"requeueing {target}: {action.why} (attempt {plan.attempt}){away}")
        try:
            preflight_mod.requeue(env, target, action.avoid)
        except (runner.CommandError, UserError) as e:
            _say(f"requeue failed: {e}")
    return action.exit_code
