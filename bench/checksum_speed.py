"""Rate of the launcher's parameter checksum (ftslurm/replica/worker/checksum.py), in GB/s of
parameters hashed, and what the training thread waits for, on CPU or one GPU.

Why it matters: on CUDA every rank hashes its local shard every FTSLURM_CHECKSUM_EVERY (50)
committed steps, and that time is taken from training. An 8B model in fp32 sharded over 8
GPUs is 4 GB per rank: at 0.65 GB/s that is 6 s every 50 steps, at 1.4 GB/s under 3 s.
The hash itself runs on a background thread on CUDA; the host copy it hashes is what
training waits for: 9.6 s for an 11.2 GB shard copied into fresh pageable memory on an H100
machine (`snapshot`), hence `HostCopy` (one pinned buffer, reused).

Run: python bench/checksum_speed.py [--mib 1024] [--tensors 8] [--runs 3] [--device cuda]
Prints the median seconds and GB/s of `checksum.digest` over --tensors float32 tensors of
--mib MiB in all, the same bytes through hashlib.sha256 alone (the ceiling), `snapshot`
(fresh pageable copies), and `HostCopy.take`: first (allocating) and reused, when the copy is
done and when the call returned. Last, it checks that a copy taken just before an in-place
update of the parameters hashes as the parameters did (on CUDA: the stream order), and exits
1 if not.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import torch

from ftslurm.replica.worker import checksum


def median_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def snapshot(named: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """Host copies in fresh pageable memory each call: the cost HostCopy's one reused pinned
    buffer avoids."""
    return [(name, t.to("cpu", copy=True)) for name, t in named]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="MiB of parameters in all [1024]")
    ap.add_argument("--tensors", type=int, default=8, help="number of tensors [8]")
    ap.add_argument("--runs", type=int, default=3, help="runs; the median is printed [3]")
    ap.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="where the parameters live [cpu]"
    )
    args = ap.parse_args()

    cuda = args.device == "cuda"
    numel = args.mib * 1024 * 1024 // 4 // args.tensors
    named = [
        (f"layers.{i}.weight", torch.randn(numel, device=args.device)) for i in range(args.tensors)
    ]
    gigabytes = sum(t.numel() * t.element_size() for _, t in named) / 1e9
    host = [(n, t.cpu()) for n, t in named]

    def sha256_only() -> None:
        h = hashlib.sha256()
        for _, t in host:
            h.update(t.view(torch.uint8).numpy())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    print(
        f"parameters: {gigabytes:.2f} GB, {args.tensors} float32 tensors on {args.device}, "
        f"median of {args.runs}"
    )
    if cuda:
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")

    def row(what: str, seconds: float, note: str = "") -> None:
        print(f"{what:<34} {seconds:7.3f} s  {gigabytes / seconds:6.2f} GB/s{note}")

    row("checksum.digest (inline)", median_seconds(lambda: checksum.digest(named), args.runs))
    row("sha256 alone (host tensors)", median_seconds(sha256_only, args.runs))
    row(
        "snapshot (fresh pageable copy)",
        median_seconds(lambda: (snapshot(named), sync()), args.runs),
        "  (what training waited for before HostCopy)",
    )
    sums = checksum.Checksummer(lambda line: None, background=True)
    t0 = time.perf_counter()
    sums.prepare(named)
    returned = time.perf_counter() - t0
    sums.flush()
    row(
        "Checksummer.prepare: reserve",
        time.perf_counter() - t0,
        f"  (on its thread; training waited {returned:.3f} s)",
    )
    del sums
    copier = checksum.HostCopy()
    t0 = time.perf_counter()
    _, ready = copier.take(named)
    returned = time.perf_counter() - t0
    if ready is not None:
        ready.synchronize()
    row(
        "HostCopy first take, allocates",
        time.perf_counter() - t0,
        f"  (returned after {returned:.3f} s)",
    )
    waits, dones = [], []
    for _ in range(args.runs):
        sync()
        t0 = time.perf_counter()
        copies, ready = copier.take(named)
        waits.append(time.perf_counter() - t0)
        if ready is not None:
            ready.synchronize()
        dones.append(time.perf_counter() - t0)
    row("HostCopy.take reused: copy done", statistics.median(dones))
    row("HostCopy.take reused: returned", statistics.median(waits), "  (what training waits for)")

    # the real use: the optimizer changes the parameters right after take() returns
    before = checksum.digest(named)
    copies, ready = copier.take(named)
    for _, t in named:
        t.add_(1.0)
    if ready is not None:
        ready.synchronize()
    same = checksum.digest(copies) == before
    print(f"copy taken before an in-place update hashes as before it: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
