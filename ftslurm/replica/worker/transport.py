"""The checkpoint transport a healing replica gets the survivor's state with: one switch,
FTSLURM_HEAL_TRANSPORT (and FTSLURM_HEAL_CHUNKS for `http-chunked`), read by fix 4 (fixes.py).

Why a choice: the heal is a pause of the whole job (the joiner is not training, and with a
synchronous quorum the survivor waits for it at its next cross-replica collective), and
torchft's default, one HTTP stream, moves an 8B heal at 0.63-0.73 GB/s on an H100
(docs/benchmarks.md).
The options, measured against the TCP loopback on the same bytes by bench/heal_speed.py
(figures: docs/benchmarks-cpu.md, "Heal transport"):

- `http`: torchft's HTTPTransport, `num_chunks=0` (torchft's and torchtitan's default): the
  survivor serves the whole state through one `torch.save` stream; the joiner allocates a
  fresh buffer per tensor, then copies it into the model.
- `http-chunked`: the same server, the tensors dealt into FTSLURM_HEAL_CHUNKS groups fetched
  by parallel requests (torchft's `num_chunks`).
- `pg`: torchft's PGTransport over the Manager's own cross-replica process group (gloo on
  CPU, NCCL on GPUs): the survivor sends each tensor's bytes (no pickled stream, no staging
  copy), and the joiner receives them in place, into its own state dict's tensors: no
  allocation, no page faults on fresh memory. The survivor's send ends when the joiner has
  the state, so its next collective does not wait for a download.

Imports torch/torchft lazily: the knob readers run in the launcher too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ftslurm import knobs

OPTIONS = knobs.HEAL_TRANSPORTS


@dataclass(frozen=True)
class Choice:
    """One transport option; `chunks` counts only for `http-chunked`."""

    option: str
    chunks: int = 0

    @property
    def label(self) -> str:
        """The option as the bench and the logs name it (`http-chunked` with its count)."""
        return f"{self.option}:{self.chunks}" if self.option == "http-chunked" else self.option


def choice(env: Mapping[str, str] | knobs.Settings | None = None) -> Choice:
    """The transport FTSLURM_HEAL_TRANSPORT and FTSLURM_HEAL_CHUNKS select (this process's
    settings unless `env` is given)."""
    s = knobs.load(env)
    option = s.FTSLURM_HEAL_TRANSPORT
    chunks = s.FTSLURM_HEAL_CHUNKS if option == "http-chunked" else 0
    return Choice(option, chunks)


def pg_device(pg: Any) -> Any:
    """The device PGTransport moves tensors through: the process group's (NCCL: the current
    CUDA device; gloo: the CPU, CUDA tensors are then copied per tensor)."""
    import torch

    try:
        backend = pg.getBackendName()
    except (AssertionError, NotImplementedError, RuntimeError):  # not configured yet
        backend = type(pg).__name__.lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def build(
    chosen: Choice,
    timeout: timedelta,
    pg: Any = None,
    state_dict: Callable[[], object] | None = None,
    device: Any = None,
) -> Any:
    """The torchft CheckpointTransport for `chosen`. `timeout`: how long the survivor waits for
    a peer's download (HTTP) or each send/receive (pg). For `pg`: the cross-replica process
    group, the joiner's own state dict for the in-place receive (None: fresh tensors), and the
    device (default: the process group's)."""
    if chosen.option == "pg":
        from torchft.checkpointing.pg_transport import PGTransport

        if pg is None:
            raise ValueError("the pg transport needs the Manager's process group")
        device = pg_device(pg) if device is None else device
        return PGTransport(pg, timeout=timeout, device=device, state_dict=state_dict)
    from torchft.checkpointing import HTTPTransport

    return HTTPTransport(timeout=timeout, num_chunks=chosen.chunks)


def describe(transport: Any) -> tuple[str, str]:
    """(class name, how it moves the state) of a built transport, read back from it (not from
    the env), for the log."""
    name = type(transport).__name__
    if name == "PGTransport":
        inplace = "in-place receive" if getattr(transport, "_state_dict", None) else "fresh tensors"
        return name, f"{inplace}, through {getattr(transport, '_device', 'unknown')}"
    chunks = getattr(transport, "_num_chunks", None)
    if chunks is None:
        return name, "unknown"
    return name, "one stream" if chunks == 0 else f"{chunks} parallel chunks"


# --------------------------------------------------------------------------------------------
# How long a heal may hold up a survivor's collectives (fix 6)


def state_bytes(state_dict: object) -> int:
    """Bytes of the tensors a heal moves from this rank: each tensor's (a DTensor's local
    shard's) elements, as the transports walk the state dict (torch's pytree)."""
    import torch
    from torch.utils._pytree import tree_flatten

    total = 0
    for leaf in tree_flatten(state_dict)[0]:
        if isinstance(leaf, torch.Tensor):
            local = leaf.to_local() if hasattr(leaf, "to_local") else leaf
            total += local.numel() * local.element_size()
    return total


@dataclass(frozen=True)
class HealBudget:
    """The cross-replica timeout a survivor needs while a peer heals from it.

    Why: with a synchronous quorum the survivor goes on as soon as its state is servable
    (HTTP) and its next cross-replica collective waits for the joiner's whole download and
    load; a survivor that took no part in the heal (three or more replicas) waits so with any
    transport. The collectives' timeout (PG_TIMEOUT_S: 10 s in the 8B preset) is sized for
    the skew between replicas' steps, not for a heal (12 GB per rank at 0.7 GB/s: ~17 s), so
    the survivor aborted its step at every heal. The heal's expected time, twice (the rate is
    an estimate), is added on top of the configured timeout."""

    state_bytes: int
    mbps: int  # MB/s a heal moves per rank (FTSLURM_HEAL_MBPS)
    configured_s: float  # the process group's timeout as torchtitan built it

    @property
    def heal_s(self) -> float:
        return self.state_bytes / (self.mbps * 1e6)

    @property
    def timeout_s(self) -> float:
        return self.configured_s + math.ceil(2 * self.heal_s)

    def line(self, manager_before_s: float, manager_after_s: float) -> str:
        return (
            f"[ftslurm] heal timeout floor: the state is {self.state_bytes / 1e9:.3f} GB per rank; "
            f"at {self.mbps} MB/s (FTSLURM_HEAL_MBPS) a heal takes ~{self.heal_s:.1f} s; "
            f"cross-replica timeout {self.configured_s:g} s -> {self.timeout_s:g} s (twice the "
            f"heal on top), torchft Manager timeout {manager_before_s:g} s -> "
            f"{manager_after_s:g} s"
        )
