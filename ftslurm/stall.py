"""`python -m ftslurm.stall check|stall PIDS [SECONDS]`: the half of `simulate-failure --mode
stall` that runs on the worker's node (a step of its job: `srun --overlap`), since ptrace
reaches only processes of the machine it runs on.

`stall` stops the main thread of each training worker in PIDS (a comma list) with ptrace,
holds it SECONDS, and lets it run on; every other thread of the worker (torchft's heartbeat
to the Lighthouse among them) runs throughout: a CUDA kernel or an NCCL call that never
returns. A SIGINT, SIGTERM or SIGHUP ends the hold at once (how the injector undoes it early),
and so does this process's end in any other way (the kernel detaches a tracer's threads when
it exits), so a stall never outlives its injector. `check` says, without stopping anything,
whether `stall` would work. A warm next run that waits (warm_restart.waiting) is left alone:
it is not the replica's training.

Exit codes: 0 done (a worker that exited meanwhile counts: its watchdog ended it), 1 no worker
to stall, 2 ptrace may not stop them here (one line says why), 128+N ended by signal N.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
from collections.abc import Callable, Sequence

from ftslurm import procs
from ftslurm.replica.launcher import warm_restart
from ftslurm.wait import WaitTimeout, wait_for

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
NEEDS = ("ptrace needs kernel.yama.ptrace_scope <= 1 with CAP_SYS_PTRACE (root on the node), "
         "or ptrace_scope 0 as the workers' user")  # fmt: skip


def workers(pids: Sequence[int]) -> list[int]:
    """The pids that still run and are no warm next run waiting to be told to train."""
    return [p for p in pids
            if procs.pid_alive(p) and not warm_restart.waiting(procs.environ(p))]  # fmt: skip


def hold(pids: Sequence[int], seconds: float, say: Callable[[str], None] = print) -> int:
    """Stop the main thread of each of `pids`, hold `seconds` (less when every one exits, or
    a signal of SIGNALS arrives), let them run on; the exit code (0, or 128+N after signal N).
    The signals are only noted (a handler that raised could cut the release short)."""
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, _frame: got.append(signum)) for s in SIGNALS}
    stops: list[procs.ThreadStop] = []
    try:
        for pid in pids:
            if (stop := procs.ptrace_stop(pid)) is not None:
                stops.append(stop)
        say(f"stalled the main thread of pid(s) {','.join(str(s.tid) for s in stops)} for "
            f"{seconds:g} s")  # fmt: skip
        try:
            wait_for(lambda: got or all(procs.ptrace_poll(s).exited for s in stops), seconds,
                     0.1, "the stall's end")  # fmt: skip
        except WaitTimeout:
            pass  # the planned end
    finally:
        gone = [s.tid for s in stops if not procs.ptrace_release(s)]
        say(f"released pid(s) {','.join(str(s.tid) for s in stops if s.tid not in gone)}"
            + (f"; exited while stalled: {','.join(map(str, gone))}" if gone else ""))
        for s, h in old.items():
            signal.signal(s, h)
    return 128 + got[0] if got else 0


def _pids(text: str) -> list[int]:
    pids = [procs.valid_pid(p) for p in text.split(",") if p.strip()]
    if not pids or None in pids:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of pids")
    return pids  # type: ignore[return-value]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, a number >= 0")
    return value


def _say(line: str) -> None:
    """A line on stdout, at once; none when nobody reads it any more (an srun that was
    killed): the threads are let go all the same."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ftslurm.stall", description=__doc__.split(
        "\n\n")[0] + " " + NEEDS + ".")  # fmt: skip
    ap.add_argument("action", choices=("check", "stall"))
    ap.add_argument("pids", type=_pids, help="training workers, a comma list")
    ap.add_argument("seconds", type=_seconds, nargs="?", default=None, help="stall: how long")
    a = ap.parse_args(argv)
    if a.action == "stall" and a.seconds is None:
        ap.error("stall needs SECONDS")
    pids = workers(a.pids)
    if not pids:
        print(f"no training worker to stall among pid(s) {','.join(map(str, a.pids))} (exited, "
              "or a warm next run waiting)", file=sys.stderr)  # fmt: skip
        return 1
    if why := procs.ptrace_refusal(pids):
        print(f"--mode stall: {why} ({NEEDS})", file=sys.stderr)
        return 2
    if a.action == "check":
        print(f"pid(s) {','.join(map(str, pids))}: ptrace may stall them")
        return 0
    try:
        return hold(pids, a.seconds, _say)
    except OSError as e:  # ptrace refused all the same (another tracer holds it: a debugger)
        print(f"--mode stall: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
