"""A bit-exact parameter checksum, logged at committed steps, to prove replicas agree.

Why: after a heal the replicas must hold identical weights. A loss curve cannot show a tiny
constant offset (bug 2 in fixes.py); a sha256 over the raw bytes of every parameter can.

When a line is logged (one per rank; each rank hashes its local shard, in name order, so
replicas are compared rank k with rank k: `compare`):
- per-step mode: after every step whose commit succeeded (the torchft manager's step grew),
  every FTSLURM_CHECKSUM_EVERY-th step [1 on cpu, 50 on cuda; 0 = off];
- DiLoCo: right after each successful outer sync, over the fragment that was synced (the
  other fragments are legitimately different between syncs).

Where the hashing runs (FTSLURM_CHECKSUM_ASYNC [1 on cuda, 0 on cpu]): on a GPU each rank's
shard is copied to host memory (HostCopy: one pinned buffer, queued on the stream, training
does not wait) and hashed by one background thread (hashlib releases the GIL): sha256 runs at
~1.5 GB/s (bench/checksum_speed.py), so hashing the 4 GB fp32 shard of one of 8 ranks of the
8B model inline would stop training ~3 s. Lines keep their order and the pending ones are
written at a normal exit. On CPU the copy costs about what it saves (2.25 GB/s vs 1.5 GB/s),
so the hash runs inline there.

Line (greppable, inside torchtitan's log prefix):
  ftslurm-checksum replica=1 rank=0 step=12 manager_step=12 scope=model tensors=57 sha256=<64 hex>
`scope` is `model` (per-step) or `fragment<i>` (DiLoCo).

Per-step mode also logs, at the same steps and just before the checksum line, the learning
rate(s) the committed step trained with (`LrWatch`):
  ftslurm-lr replica=1 rank=0 step=12 manager_step=12 lr=0.0007935871743486974
Why: a healed replica that loads a stale rate (bug 2 in fixes.py) steps once with it and is
different forever after; the checksums show that it differs, this line shows why. The rate is
read off each optimizer's param groups by a step hook (torchtitan's own logged `lr` is its
scheduler's, which never saw the stale value): Python floats, no device sync, no collective.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ftslurm import knobs, stacks
from ftslurm.logvocab import CHECKSUM_LINE, CHECKSUM_PREFIX, LR_LINE, LR_PREFIX
from ftslurm.replica import patches


@dataclass(frozen=True)
class Record:
    """One parsed checksum line."""

    replica: int
    rank: int
    step: int
    manager_step: int
    scope: str
    tensors: int
    sha256: str


def format_line(
    replica: int, rank: int, step: int, manager_step: int, scope: str, tensors: int, digest: str
) -> str:
    return (
        f"{CHECKSUM_PREFIX} replica={replica} rank={rank} step={step} manager_step={manager_step} "
        f"scope={scope} tensors={tensors} sha256={digest}"
    )


def parse(lines: Iterable[str]) -> Iterator[Record]:
    """Checksum records from any log text (other lines ignored)."""
    for line in lines:
        m = CHECKSUM_LINE.search(line)
        if m:
            yield Record(
                replica=int(m["replica"]),
                rank=int(m["rank"]),
                step=int(m["step"]),
                manager_step=int(m["manager_step"]),
                scope=m["scope"],
                tensors=int(m["tensors"]),
                sha256=m["sha256"],
            )


Key = tuple[int, int, str]  # (rank, step, scope)


def by_key(records: Iterable[Record]) -> dict[Key, str]:
    """One replica's checksums by (rank, step, scope): with several ranks, each rank hashes
    its own shard, so rank k of one replica is compared with rank k of another, never with
    another rank (the last line of a key wins)."""
    return {(r.rank, r.step, r.scope): r.sha256 for r in records}


def compare(a: Iterable[Record], b: Iterable[Record]) -> tuple[list[Key], list[Key]]:
    """(keys both replicas logged, those of them whose sha256 differ), sorted."""
    ka, kb = by_key(a), by_key(b)
    both = sorted(ka.keys() & kb.keys())
    return both, [k for k in both if ka[k] != kb[k]]


@dataclass(frozen=True)
class LrRecord:
    """One parsed learning-rate line: every param group's rate, in optimizer order."""

    replica: int
    rank: int
    step: int
    manager_step: int
    lrs: tuple[float, ...]


def format_lr_line(replica: int, rank: int, step: int, manager_step: int,
                   lrs: Sequence[float]) -> str:  # fmt: skip
    """repr of each rate: the shortest text that reads back as the same float, so equal text
    is equal bits and a stale rate one ulp off still shows."""
    text = ",".join(repr(float(lr)) for lr in lrs)
    return (
        f"{LR_PREFIX} replica={replica} rank={rank} step={step} manager_step={manager_step} "
        f"lr={text}"
    )


def parse_lrs(lines: Iterable[str]) -> Iterator[LrRecord]:
    """Learning-rate records from any log text (other lines ignored)."""
    for line in lines:
        m = LR_LINE.search(line)
        if m:
            yield LrRecord(
                replica=int(m["replica"]),
                rank=int(m["rank"]),
                step=int(m["step"]),
                manager_step=int(m["manager_step"]),
                lrs=tuple(float(x) for x in m["lr"].split(",")),
            )


LrKey = tuple[int, int]  # (rank, step)


def lrs_by_key(records: Iterable[LrRecord]) -> dict[LrKey, tuple[str, ...]]:
    """One replica's rates by (rank, step), each as float.hex: compared bit for bit (`==` on
    floats would call 0.0 and -0.0 equal); the last line of a key wins."""
    return {(r.rank, r.step): tuple(x.hex() for x in r.lrs) for r in records}


def compare_lrs(a: Iterable[LrRecord], b: Iterable[LrRecord]) -> tuple[list[LrKey], list[LrKey]]:
    """(keys both replicas logged, those of them whose rates differ in any bit), sorted."""
    ka, kb = lrs_by_key(a), lrs_by_key(b)
    both = sorted(ka.keys() & kb.keys())
    return both, [k for k in both if ka[k] != kb[k]]


class LrWatch:
    """The learning rates each optimizer last stepped with, recorded by a step hook.

    Why a hook: torchtitan's scheduler moves the rate on right after the optimizer step, inside
    train_step, and a heal loads the optimizer's state mid-train_step (at the quorum), so the
    rate a step used is readable only between the two. Cost: a Python float per param group
    per step (a tensor rate, which torchtitan does not use, would be read with .item()).
    """

    def __init__(self, optimizers: Sequence[Any]) -> None:
        self._used: list[list[float] | None] = [None] * len(optimizers)
        for i, opt in enumerate(optimizers):
            opt.register_step_post_hook(functools.partial(self._record, i))

    def _record(self, index: int, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self._used[index] = [float(g["lr"]) for g in optimizer.param_groups]

    def take(self) -> list[float] | None:
        """Every optimizer's rates since the last take, in order (None unless every optimizer
        stepped: a step it skipped has no rate to log); forgets them."""
        used, self._used = self._used, [None] * len(self._used)
        if any(u is None for u in used):
            return None
        return [lr for u in used for lr in u]  # type: ignore[union-attr]


def inner_optimizers(container: Any) -> list[Any]:
    """The torch optimizers inside torchtitan's OptimizersContainer (one per model part); none
    for a trainer without one: no rate line then, and training is not stopped for it."""
    if container is None:
        return []
    return list(getattr(container, "optimizers", [container]))


def digest(named_tensors: Iterable[tuple[str, Any]]) -> tuple[str, int]:
    """sha256 over (name, dtype, shape, raw bytes) of each tensor, sorted by name. DTensors
    are hashed by their local shard (one line per rank)."""
    import torch

    h = hashlib.sha256()
    count = 0
    for name, t in sorted(named_tensors, key=lambda kv: kv[0]):
        t = _local_shard(t).to("cpu").contiguous().reshape(-1)
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        # the array itself, not .tobytes(): hashlib reads its buffer in place (no copy of
        # the shard), which doubles the rate: 0.65 -> 1.42 GB/s for 256 MB on this CPU
        h.update(t.view(torch.uint8).numpy())
        count += 1
    return h.hexdigest(), count


_ALIGN = 64  # bytes: every dtype's view of a slice of the buffer starts aligned


class HostCopy:
    """Host copies of a rank's parameters, written into one buffer that is kept and reused.

    Why: a copy of an H100's 11.2 GB shard into fresh pageable memory held the training
    thread 9.6 s (every new page is faulted in and zeroed; docs/benchmarks.md), 27x a step.
    Into one page-locked buffer the copy is a DMA queued on the parameters' stream: training
    goes on at once, the stream order keeps the next optimizer step from changing a parameter
    before it is copied, and the hashing thread waits for the returned CUDA event. Cost: the
    shard's size in page-locked host memory for the run (4 GB per rank for the 8B model on 8
    GPUs), and the page-locking itself (9.1 s for 11.2 GB), once: Checksummer.prepare does it
    at the first step, not at the first checksum mid-run. Reuse is safe: Checksummer takes a
    new copy only after the previous hash has finished.
    """

    def __init__(self) -> None:
        self._buffer: Any = None

    @staticmethod
    def size(shards: list[tuple[str, Any]]) -> tuple[list[int], list[int], int, bool]:
        """(offsets, sizes, total bytes, pinned?) of these local shards in the buffer."""
        sizes = [t.numel() * t.element_size() for _, t in shards]
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-size // _ALIGN) * _ALIGN
        return offsets, sizes, total, any(t.is_cuda for _, t in shards)

    def reserve(self, total: int, pinned: bool) -> None:
        """Have a buffer of at least `total` bytes (page-locked if `pinned`)."""
        import torch

        if self._buffer is None or self._buffer.numel() < total:
            self._buffer = None  # the old buffer goes before the new one is allocated
            self._buffer = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pinned)

    def take(self, named_tensors: Iterable[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], Any]:
        """(copies, ready): `copies` alias the buffer; on CUDA they are complete once `ready`
        (a CUDA event, None on CPU) has completed, and the next take() overwrites them."""
        import torch

        shards = [(name, _local_shard(t)) for name, t in named_tensors]
        offsets, sizes, total, on_cuda = self.size(shards)
        self.reserve(total, on_cuda)
        copies = []
        for (name, t), offset, size in zip(shards, offsets, sizes, strict=True):
            dst = self._buffer[offset : offset + size].view(t.dtype).view(t.shape)
            dst.copy_(t, non_blocking=on_cuda)
            copies.append((name, dst))
        ready = None
        if on_cuda:
            ready = torch.cuda.Event()
            ready.record()
        return copies, ready


def _local_shard(t: Any) -> Any:
    """The tensor this rank holds: a DTensor's local shard, without autograd history."""
    t = t.detach()
    return t.to_local() if hasattr(t, "to_local") else t


class Checksummer:
    """Computes and emits checksum lines, inline or on one background thread (the lines then
    come out in the order they were asked for). `emit` receives the finished line."""

    def __init__(self, emit: Callable[[str], None], background: bool) -> None:
        self._emit = emit
        self._pending: Future[None] | None = None
        self._host = HostCopy()
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ftslurm-checksum")
            if background
            else None
        )

    def prepare(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Reserve the host copy's buffer for these tensors on the background thread: the
        page-locking happens at the first step, not at the first checksum mid-run (inline mode:
        no copy, nothing to reserve)."""
        if self._pool is None:
            return
        _, _, total, pinned = HostCopy.size([(n, _local_shard(t)) for n, t in named_tensors])
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self._reserve, total, pinned)

    def _reserve(self, total: int, pinned: bool) -> None:
        try:
            self._host.reserve(total, pinned)
        except Exception as e:  # take() tries again on the training thread
            self._emit(f"ftslurm-checksum: reserving the host copy failed: {type(e).__name__}: {e}")

    def log(
        self, named_tensors: Iterable[tuple[str, Any]], line: Callable[[str, int], str]
    ) -> None:
        """Hash `named_tensors` as they are now and emit `line(sha256, count)`."""
        if self._pool is None:
            self._emit(line(*digest(named_tensors)))
            return
        if self._pending is not None:
            self._pending.result()  # the host copy's buffer is free again only now
        copies, ready = self._host.take(named_tensors)
        self._pending = self._pool.submit(self._hash_and_emit, copies, ready, line)

    def _hash_and_emit(
        self, named: list[tuple[str, Any]], ready: Any, line: Callable[[str, int], str]
    ) -> None:
        try:
            if ready is not None:
                ready.synchronize()
            self._emit(line(*digest(named)))
        except Exception as e:  # a lost line must not pass silently (a Future would keep it)
            self._emit(f"ftslurm-checksum failed: {type(e).__name__}: {e}")

    def flush(self) -> None:
        """Wait for the pending lines (an interpreter exit waits for them too)."""
        if self._pending is not None:
            self._pending.result()  # one worker: the last one submitted finishes last


def _settings(env: Mapping[str, str] | knobs.Settings) -> knobs.Settings:
    """`env`'s settings with the defaults of the device the launcher resolved for this worker
    (cuda when run without it)."""
    s = knobs.load(env)
    return s.on(s.FTSLURM_DEVICE or "cuda")


def _every(env: Mapping[str, str] | knobs.Settings) -> int:
    return _settings(env).FTSLURM_CHECKSUM_EVERY


def _background(env: Mapping[str, str] | knobs.Settings) -> bool:
    return _settings(env).FTSLURM_CHECKSUM_ASYNC


def install() -> None:
    """Hook the checksum into torchtitan's FT trainer and torchft's DiLoCo fragments."""
    settings = _settings(knobs.environ())
    every = _every(settings)
    if every <= 0 or not patches.ready("checksum.train_step", "checksum.perform_sync"):
        return
    from torchtitan.tools.logging import logger

    rank = int(os.environ.get("RANK", "0"))
    sums = Checksummer(logger.info, _background(settings))
    # the trainer, read live: a heal inside a DiLoCo sync reloads trainer.step mid-train_step
    state: dict[str, Any] = {
        "trainer": None,
        "replica": settings.FTSLURM_REPLICA_ID or 0,
    }

    def wrap_train_step(upstream_train_step: Callable[..., None]) -> Callable[..., None]:
        def train_step(self: Any, data_iterator: Any) -> None:
            state["trainer"] = self
            ft = self.ft_manager
            state["manager"] = ft.manager if ft.enabled else None
            # the FT manager's, not the trainer config's: on 0.3 a spare's slot reaches only
            # the manager (standby.ft_config_of)
            state["replica"] = getattr(ft, "replica_id", state["replica"])
            manager = state["manager"]
            before = manager.current_step() if manager else None
            if not state.get("prepared"):
                state["prepared"] = True
                sums.prepare([(n, p) for m in self.model_parts for n, p in m.named_parameters()])
                state["lrs"] = LrWatch(inner_optimizers(getattr(self, "optimizers", None)))
            upstream_train_step(self, data_iterator)
            lrs = state["lrs"].take()
            if manager is None or stacks.trainer_config(self).fault_tolerance.semi_sync_method:
                return
            after = manager.current_step()
            if after > before and self.step % every == 0:
                if lrs:
                    logger.info(format_lr_line(state["replica"], rank, self.step, after, lrs))
                named = [(n, p) for m in self.model_parts for n, p in m.named_parameters()]
                replica, step = state["replica"], self.step
                sums.log(named, lambda hexd, count: format_line(replica, rank, step, after,
                                                               "model", count, hexd))  # fmt: skip

        return train_step

    def wrap_sync(upstream_sync: Callable[..., bool]) -> Callable[..., bool]:
        def perform_sync(self: Any) -> bool:
            committed = upstream_sync(self)
            if committed:
                manager_step = self._manager.current_step()
                trainer = state["trainer"]
                replica, step = state["replica"], trainer.step if trainer is not None else -1
                scope = f"fragment{self._fragment_id}"
                sums.log(
                    self._model_fragment.named_parameters(),
                    lambda hexd, count: format_line(
                        replica, rank, step, manager_step, scope, count, hexd
                    ),
                )
            return committed

        return perform_sync

    patches.install("checksum.train_step", wrap_train_step)
    patches.install("checksum.perform_sync", wrap_sync)
