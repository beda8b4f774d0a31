"""What torchrun runs on every rank: `python -m ftslurm.replica.worker.train <torchtitan args>`
(with one rank per node the launcher runs it itself, with torchrun's env: startup.py, cut 1).

Order matters, and is the reason this module exists instead of calling torchtitan directly:
1. the worker is made to die with torchrun (PR_SET_PDEATHSIG, procs.die_with_parent): torchrun
   starts it in a session of its own, so a SIGKILLed torchrun would leave it training; one
   that died before the lifeline was set is seen by the launcher no longer being an ancestor;
2. sys.argv is made final: torchtitan 0.2.2 binds `ConfigManager.parse_args(args=
   sys.argv[1:])` as a default argument when torchtitan is first imported (0.3 reads it
   when called);
3. on DEVICE=cpu the CPU shims go in before torchtitan is imported (it picks its device at
   import time), see cpu.py; torchtitan is imported with its import-time torch.compile calls
   deferred (startup.py, cut 2), and without torchrun the worker hosts the c10d store;
4. the healing fixes (fixes.py), the parameter checksum (checksum.py), a restarted
   replica's early first sync (early_sync.py), the spares' fencing (standby.py) and the final
   checkpoint at Slurm's time limit (ft_checkpoints.install_time_limit) patch torchtitan /
   torchft classes before the trainer is built, each through patches.py's installer: where
   two wrap one method (Manager.start_quorum, FTTrainer.train_step, CheckpointManager.save)
   patches.ORDER says which runs first, not the order of the calls below, which only orders
   their log lines;
5. a refused option is noted for the launcher (config_error.py: no requeue for a typo);
6. the stack's FT trainer runs (stacks.py): on torchtitan 0.2.2
   `torchtitan.experiments.ft.train.FTTrainer` (the classic script without FT: the plain
   `torchtitan.train.Trainer`); on 0.3 `torchtitan.train.main()` builds the trainer its
   config function names (ftslurm's presets: `FaultTolerantTrainer`, FT on or off);
7. once training returned, the worker leaves without the interpreter's teardown (exit_now).
The training worker's entry: the launcher never imports it (replica/launcher/ loads no torch).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from ftslurm import knobs, stacks
from ftslurm.replica import handoff


def check_lifeline() -> None:
    """Die with the parent (torchrun, or the launcher for the tiny worker); exit now if it
    is already gone or the launcher is no longer an ancestor."""
    from ftslurm.procs import descends_from, die_with_parent

    parent = os.getppid()
    die_with_parent()
    launcher = knobs.environ()[handoff.LAUNCHER_ENV]
    if os.getppid() != parent or (
        launcher is not None and not descends_from(launcher, os.getpid())
    ):
        sys.exit("torchrun (this worker's parent) is gone: not training as an orphan")


def main() -> None:
    check_lifeline()
    settings = knobs.environ()  # the launcher's knobs: this worker changes none of them
    stack = stacks.installed()
    device = settings.FTSLURM_DEVICE or settings.DEVICE
    fault_tolerant = settings.FTSLURM_FT_MODE is not None
    argv = sys.argv[1:]
    if device == "cpu":
        from ftslurm.replica.worker import cpu

        argv = cpu.fix_argv(argv)
    sys.argv = [sys.argv[0], *argv]
    from ftslurm.replica.worker import startup

    lazy = startup.enabled("lazy_compile")
    with startup.deferred_compile(lazy):
        if device == "cpu":
            cpu.prepare()
        # every torchtitan module the run uses, so all import-time compiles are deferred
        import torchtitan.train  # noqa: F401

        if fault_tolerant:
            importlib.import_module(stack.ft_trainer.rpartition(".")[0])
        if device == "cpu":
            cpu.add_flavors()

    from ftslurm.replica import config_error
    from ftslurm.replica.worker import checksum, early_sync, fixes, ft_checkpoints, standby

    config_error.install()
    print(startup.line("lazy_compile", lazy, "torchtitan's import-time torch.compile calls "
                       "are made on first use"), flush=True)  # fmt: skip
    if settings.FTSLURM_WORKER_STORE:
        port = startup.host_store()
        print(startup.line("skip_torchrun", True, "one rank: no torchrun, this worker hosts "
                           f"its c10d store on port {port}"), flush=True)  # fmt: skip

    if fault_tolerant:
        for line in fixes.apply():
            print(line, flush=True)
        checksum.install()
        if (line := early_sync.install()) is not None:
            print(line, flush=True)
        if (line := standby.install()) is not None:  # warm spares and slot fencing
            print(line, flush=True)
        if flag := settings[handoff.TIME_LIMIT_ENV]:  # job.py: Slurm's signal
            ft_checkpoints.install_time_limit(Path(flag))

    from torchtitan.train import main as torchtitan_main

    if stack.config == "module":  # 0.3: the config function's type names the trainer
        torchtitan_main()
    elif fault_tolerant:
        from ftslurm.replica import patches

        torchtitan_main(patches.resolve(stack.ft_trainer))
    else:
        from torchtitan.train import Trainer

        torchtitan_main(Trainer)
    exit_now()


def exit_now() -> NoReturn:
    """Exit 0 without the interpreter's teardown, once torchtitan's main returned (the trainer
    closed, its checkpoints written, the process groups destroyed: nothing is left to do).
    Why: with torch 2.13 the teardown itself sometimes aborts after a clean run ("terminate
    called without an active exception", SIGABRT, no Python stack: a C++ thread still joinable
    when its owner is destroyed at exit). On the local Slurm's classic 2-node job it hits
    rank 1, which leaves while rank 0 sleeps its 2 s: 1 run in 6 under CPU load.
    torchrun then calls the rank failed and the job FAILED; an FT launcher would requeue a
    replica that had finished. A torchtitan exception still raises: this runs only once main
    has returned."""
    logging.shutdown()  # torchtitan's log handlers
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
