"""Per transfer of loopback_transfers.py (its JSON: start, end, GB/s in CLOCK_MONOTONIC
seconds), the 10 symbols with the most `perf record -a -k CLOCK_MONOTONIC` samples (cpu-clock,
all CPUs), read from `perf script -F comm,time,ip,sym`.
Usage: perf_summary.py TRANSFERS.json PERF.txt"""

import collections
import json
import re
import sys

with open(sys.argv[1]) as f:
    runs = json.load(f)
samples = []
with open(sys.argv[2]) as f:
    for line in f:
        if m := re.match(r"\s*(\S+)\s+(\d+\.\d+):\s+[0-9a-f]+\s+(\S+)", line):
            samples.append((float(m[2]), m[3]))
print(f"{len(samples)} samples; transfers in the order run, GB/s, seconds, samples, top 10")
for i, (a, b, g) in enumerate(runs):
    c = collections.Counter(s for t, s in samples if a <= t <= b)
    print(f"{i:2d} {g:.2f} GB/s {b - a:.2f} s {sum(c.values())} samples", c.most_common(10))
