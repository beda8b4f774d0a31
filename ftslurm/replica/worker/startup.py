"""A cheaper (re)start of the training worker, each cut with an off switch.

Without these cuts a restarted CPU replica spends ~10.6 s between the launcher's banner and
torchtitan's `Starting job` line beside a training replica (5.98 s alone), all of it process
starts and imports (docs/benchmarks-cpu.md, "Restart speed": the `python -X importtime`
breakdown and the figures with each cut; both: 3.56 s). What nothing on the training path uses
is not paid for; nothing here changes what trains (same argv to torchtitan, same
modules once they are used, same checksums).

1. FTSLURM_SKIP_TORCHRUN (plan.py, job.py; one rank per node, e.g. every DEVICE=cpu replica):
   torchrun costs a whole interpreter start plus `import torch` plus its c10d rendezvous
   (1.4 s alone, ~3 s beside a training replica) to start ONE worker. The launcher runs
   `python -u -m ftslurm.replica.worker.train` itself with the environment torchrun gives that
   worker (plan.ONE_RANK_ENV), and the worker hosts the TCP store torchrun's agent would
   (`host_store`: MASTER_PORT is its port, torch and torchft connect to it as clients, as
   to torchrun's). What torchrun did for us stays:
   SIGTERM is forwarded by the launcher to its direct child now, and the worker's lifeline
   (PR_SET_PDEATHSIG + the launcher-is-an-ancestor check, train.py) is set against the
   launcher. The worker's exit code reaches the launcher unchanged (137 for a SIGKILL;
   torchrun said 1). GPUS_PER_NODE > 1 keeps torchrun: it starts and watches several ranks.
2. FTSLURM_LAZY_COMPILE (this module, `deferred_compile`, around torchtitan's imports):
   torchtitan 0.2.2's `models/attention.py` calls `torch.compile(...)` at import time for
   its flex / varlen attention wrappers and its block masks, even when the model uses sdpa
   and `[compile] enable = false`; each call builds inductor's compiler wrapper, which imports
   `torch._inductor.compile_fx` and its lowerings (~0.9 s of the worker's imports). While
   torchtitan is imported, `torch.compile` returns a `LazyCompiled` that calls the real
   `torch.compile` with the same arguments on its first call (torch.compile only compiles on
   the first call anyway), so a run that never calls them never loads that compiler. Undone
   before the trainer is built: the model's own `torch.compile` (compile.enable) is upstream's.
   (Dynamo itself still loads: torchtitan's float8 module imports `torch._inductor.config`,
   whose package imports dynamo; deferring that would mean standing in for a torch module.)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ftslurm import knobs
from ftslurm.replica import patches

SWITCHES = {"skip_torchrun": "FTSLURM_SKIP_TORCHRUN", "lazy_compile": "FTSLURM_LAZY_COMPILE"}

_STORE: object = None  # the worker's TCPStore server: alive as long as the process


def enabled(name: str, env: Mapping[str, str] | knobs.Settings | None = None) -> bool:
    """A cut is on unless its switch is 0/false/no/off (this process's settings unless `env`
    is given)."""
    return bool(knobs.load(env)[SWITCHES[name]])


def line(name: str, on: bool, summary: str) -> str:
    """One log line per cut, in the form of the fixes' lines (fixes.apply)."""
    switch = SWITCHES[name]
    if on:
        return f"[ftslurm] startup {name}: ON ({summary}; {switch}=0 turns it off)"
    return f"[ftslurm] startup {name}: OFF ({switch}=0)"


def host_store(environ: dict[str, str] | None = None) -> int:
    """Cut 1, in the worker: host the c10d TCP store that torchrun's agent hosts, on a port
    the OS picks (no race for a port chosen earlier), and export it as MASTER_PORT. Returns
    the port."""
    global _STORE
    from torch.distributed import TCPStore

    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    _STORE = TCPStore(environ.get("MASTER_ADDR", "localhost"), 0, world_size=1,
                      is_master=True, wait_for_workers=False)  # fmt: skip
    port = int(_STORE.port)  # type: ignore[attr-defined]
    environ["MASTER_PORT"] = str(port)
    return port


class LazyCompiled:
    """What `torch.compile(*args, **kwargs)` returns while torchtitan is imported: the real
    `torch.compile(*args, **kwargs)`, made on the first call and used for every call."""

    def __init__(self, compile_: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self._compile, self._args, self._kwargs = compile_, args, kwargs
        self._compiled: Callable[..., Any] | None = None

    @property
    def compiled(self) -> Callable[..., Any]:
        if self._compiled is None:
            self._compiled = self._compile(*self._args, **self._kwargs)
        return self._compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled(*args, **kwargs)


def lazy_compile(compile_: Callable[..., Any]) -> Callable[..., Any]:
    """A stand-in for `torch.compile`, also as a decorator (`torch.compile(mode=...)(fn)`)."""

    def stand_in(model: Any = None, **kwargs: Any) -> Any:
        if model is None:
            return lambda fn: LazyCompiled(compile_, (fn,), kwargs)
        return LazyCompiled(compile_, (model,), kwargs)

    return stand_in


@contextlib.contextmanager
def deferred_compile(on: bool = True) -> Iterator[None]:
    """Cut 2: around the first import of torchtitan (before `cpu.prepare` on CPU). Off: a
    no-op. Leaves `torch.compile` upstream's for everything after (the model's own
    compile, compile.enable)."""
    if not on:
        yield
        return
    import torch

    with patches.swapped("lazy_compile.compile", lazy_compile(torch.compile)):
        yield
