"""Rate of the launcher's parameter checksum (ftslurm/replica/checksum.py), in GB/s of
parameters hashed, on CPU tensors.

Why it matters: on CUDA every rank hashes its local shard every FTSLURM_CHECKSUM_EVERY (50)
committed steps, and that time is taken from training. An 8B model in fp32 sharded over 8
GPUs is 4 GB per rank: at 0.65 GB/s that was 6 s every 50 steps, at 1.4 GB/s under 3 s.

Run: python bench/checksum_speed.py [--mib 1024] [--tensors 8] [--runs 3]
Prints the median seconds and GB/s of `checksum.digest` over --tensors float32 tensors of
--mib MiB in all, the same bytes through hashlib.sha256 alone (the ceiling), and
`checksum.snapshot`, the host copy training waits for when the hash runs in the background.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import torch

from ftslurm.replica import checksum


def median_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="MiB of parameters in all [1024]")
    ap.add_argument("--tensors", type=int, default=8, help="number of tensors [8]")
    ap.add_argument("--runs", type=int, default=3, help="runs; the median is printed [3]")
    args = ap.parse_args()

    numel = args.mib * 1024 * 1024 // 4 // args.tensors
    named = [(f"layers.{i}.weight", torch.randn(numel)) for i in range(args.tensors)]
    gigabytes = sum(t.numel() * t.element_size() for _, t in named) / 1e9

    def sha256_only() -> None:
        h = hashlib.sha256()
        for _, t in named:
            h.update(t.view(torch.uint8).numpy())

    ours = median_seconds(lambda: checksum.digest(named), args.runs)
    ceiling = median_seconds(sha256_only, args.runs)
    copy = median_seconds(lambda: checksum.snapshot(named), args.runs)
    print(f"parameters: {gigabytes:.2f} GB, {args.tensors} float32 tensors, median of {args.runs}")
    print(f"checksum.digest   {ours:7.3f} s  {gigabytes / ours:6.2f} GB/s")
    print(f"sha256 alone      {ceiling:7.3f} s  {gigabytes / ceiling:6.2f} GB/s")
    print(
        f"snapshot          {copy:7.3f} s  {gigabytes / copy:6.2f} GB/s"
        "  (what training waits for with FTSLURM_CHECKSUM_ASYNC=1; on CUDA a device->host copy)"
    )


if __name__ == "__main__":
    main()
