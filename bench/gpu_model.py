"""Benchmark-only additions to torchtitan 0.2.2, loaded INSIDE the training process.

The GPU benchmarks pass `--experimental.custom_import=bench.gpu_model` through the launcher's
FTSLURM_EXTRA_ARGS (the launcher path itself is unchanged: `python -m ftslurm.replica`);
torchtitan imports this module in `Trainer.__init__`, before it looks up the model flavour
and before it parallelizes the model. Why it is needed:

- torchtitan 0.2.2's llama3 flavours are debugmodel, 8B, 70B and 405B (no 1B/3B), and 0.2.2
  has no `--model.n_layers` option. An 8B model does not train on one 80 GB GPU without FSDP
  sharding (fp32 weights + grads + AdamW states = 16 bytes/param = 128 GB). So this module
  registers flavour `8B_bench`: the Llama-3 8B shape (dim 4096, 32 heads, 8 KV heads, FFN
  14336, vocab 128256) with FTSLURM_BENCH_LAYERS of its 32 layers [8: 2.8 B parameters].
- FTSLURM_BENCH_FORCE_FSDP=1: torchtitan 0.2.2 applies FSDP only when dp_shard > 1, and one
  GPU holds one NCCL rank, so a 1-GPU replica never has an FSDP module -- and the survivor
  crash the launcher fixes (fixes.py, bug 1) lives in FSDP2's state-dict hooks. This switch
  makes torchtitan apply FSDP2 over its 1-rank "fsdp" mesh with a real process group (what
  torchtitan 0.3.0 does by default), so the FSDP state-dict path and torchtitan's
  cross-replica all-reduce hook on FSDP modules (the FT-HSDP path of the H100 runs) are
  exercised on one device.
- the checkpoint a survivor serves to a healing peer: torchft logs the joiner's fetch time but
  not its size, and the HTTP body goes out through send(), which /proc/<pid>/io does not
  count. So the serving side counts the bytes `_streaming_save` writes into the HTTP response
  and prints `[ftslurm-bench] checkpoint served: bytes=N seconds=S` (bench/gpu_heal.py reads
  it). One counter per write call of torch's streaming serialiser (one per tensor storage).
"""

from __future__ import annotations

import os
import time
from typing import Any

BENCH_FLAVOR = "8B_bench"


def _register_flavor() -> None:
    from torchtitan.models.llama3 import llama3_args
    from torchtitan.models.llama3.model.args import TransformerModelArgs

    layers = int(os.environ.get("FTSLURM_BENCH_LAYERS", "8"))
    llama3_args[BENCH_FLAVOR] = TransformerModelArgs(
        dim=4096,
        n_layers=layers,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim_multiplier=1.3,
        multiple_of=1024,
        rope_theta=500000,
    )


def _force_fsdp() -> None:
    from torchtitan.distributed.parallel_dims import ParallelDims

    upstream_exist = ParallelDims._mesh_exist

    def mesh_exist(self: ParallelDims, name: str, degree: int) -> bool:
        # a real (1-rank) process group for the fsdp dimension instead of a fake one
        return True if name == "fsdp" else upstream_exist(self, name, degree)

    ParallelDims._mesh_exist = mesh_exist  # type: ignore[method-assign]
    ParallelDims.fsdp_enabled = property(lambda self: True)  # type: ignore[assignment,method-assign]
    print("[ftslurm-bench] FSDP forced on a 1-rank mesh (FTSLURM_BENCH_FORCE_FSDP=1)", flush=True)


class _CountingWriter:
    """A file object that counts the bytes written through it."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.nbytes = 0

    def write(self, b: Any) -> Any:
        self.nbytes += memoryview(b).nbytes
        return self._f.write(b)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _count_checkpoint_bytes() -> None:
    from torchft.checkpointing import http_transport

    upstream = http_transport._streaming_save
    if getattr(upstream, "_ftslurm_bench", False):
        return

    def streaming_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        counter = _CountingWriter(f)
        t0 = time.perf_counter()
        try:
            return upstream(obj, counter, *args, **kwargs)
        finally:
            print(
                f"[ftslurm-bench] checkpoint served: bytes={counter.nbytes} "
                f"seconds={time.perf_counter() - t0:.6f}",
                flush=True,
            )

    streaming_save._ftslurm_bench = True  # type: ignore[attr-defined]
    http_transport._streaming_save = streaming_save


_register_flavor()
_count_checkpoint_bytes()
if os.environ.get("FTSLURM_BENCH_FORCE_FSDP", "0") == "1":
    _force_fsdp()
