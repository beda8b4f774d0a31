"""How fast `ftslurm report` reads logs, and whether its memory stays flat.

Builds a synthetic run from the REAL line shapes of tests/fixtures/report/cpu-run1 (the
recorded torchft CPU run: Lighthouse log + two replica logs), repeated with the date moved one
day per copy, quorum ids renumbered and uuids changed so every copy is a new failure, requeue
and recovery to the parser, plus a torchtitan
step line with ANSI colours after every committed step (torchtitan 0.2.2's shape: TITAN_STEP).
Writes it to a temp dir (deleted afterwards), then runs `build_report` in a fresh child process
per size and prints MB/s and the child's peak RSS. Goal: >= 200 MB/s, RSS flat in file size.
Two kinds of run: "failing" (every copy a failure, a requeue and a recovery: the report's own
records grow with them) and "steady" (the steady part of the run repeated: one quorum).

    python bench/report_speed.py            # ~520 MB, and a ~52 MB run to compare RSS
    python bench/report_speed.py --mb 100
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "report" / "cpu-run1"
DAY = b"2026-11-23"
TITAN_STEP = (
    b"[titan] %s %s,%s - root - INFO - \x1b[31mstep: %d  \x1b[32mloss:  8.09969  "
    b"\x1b[38;2;180;60;0mgrad_norm:  0.3656  \x1b[38;2;54;234;195mmemory: -0.00GiB(-0.00%%)  "
    b"\x1b[34mtps: 68  \x1b[36mtflops: 0.00  \x1b[35mmfu: 0.00%%\x1b[39m\n"
)
_COMMITTED = re.compile(
    rb"^(2026-11-23)T(\d\d:\d\d:\d\d)\.(\d{3})Z replica=\d+ iter=\d+ step=(\d+) committed=True.*\n",
    re.M,
)
_QID = re.compile(rb"(quorum_id[:=] ?|quorum_id to |quorum id )(\d+)")
_UUID = re.compile(rb"[0-9a-f]{8}(-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def _with_titan(block: bytes) -> bytes:
    def add(m: re.Match[bytes]) -> bytes:
        return m.group(0) + TITAN_STEP % (m.group(1), m.group(2), m.group(3), int(m.group(4)))

    return _COMMITTED.sub(add, block)


def _steady_part(block: bytes) -> bytes:
    """The lines between 08:51:21 and 08:52:08: both replicas training in quorum 3."""
    out, keep = [], False
    for line in block.splitlines(keepends=True):
        if line[:11] == b"2026-11-23T":
            keep = b"2026-11-23T08:51:21" <= line[:19] <= b"2026-11-23T08:52:08"
        if keep:
            out.append(line)
    return b"".join(out)


def _templates(steady: bool = False) -> dict[str, bytes]:
    def read(name: str) -> bytes:
        with gzip.open(FIXTURE / f"{name}.log.gz", "rb") as fh:
            data = fh.read()
        return _steady_part(data) if steady else data

    return {
        "lighthouse.log": read("lighthouse"),
        "tft-1_0.out": _with_titan(read("replica_0")),
        "tft-1_1.out": _with_titan(read("replica_1")),
    }


def generate(run_dir: Path, target_mb: float, steady: bool = False) -> int:
    """Write a run of about target_mb MB into run_dir; returns its size in bytes.

    steady=True: only the steady part of the run (one quorum, no failure) repeated, so the
    report's own records stay the same size whatever the file size (shows flat memory).
    """
    tpl = _templates(steady)
    per_copy = sum(len(b) for b in tpl.values())
    copies = max(1, int(target_mb * 1e6 / per_copy) + 1)
    run_dir.mkdir(parents=True, exist_ok=True)
    handles = {name: open(run_dir / name, "wb") for name in tpl}  # noqa: SIM115
    day0 = date(2026, 11, 23)
    try:
        for i in range(copies):
            day = (day0 + timedelta(days=i)).isoformat().encode()
            base = i * 10

            def renum(m: re.Match[bytes], base: int = base) -> bytes:
                return m.group(1) + str(int(m.group(2)) + base).encode()

            for name, block in tpl.items():
                out = block.replace(DAY, day)
                if not steady:
                    out = _QID.sub(renum, out)
                    out = _UUID.sub(b"%08x\\1" % i, out)  # every copy: new attempts
                handles[name].write(out)
    finally:
        for fh in handles.values():
            fh.close()
    return sum((run_dir / n).stat().st_size for n in tpl)


CHILD = """
import json, resource, sys, time
from ftslurm.report import build_report
t, c = time.perf_counter(), time.process_time()
rep = build_report([sys.argv[1]])
dt, cpu = time.perf_counter() - t, time.process_time() - c
s = rep.summary()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "rss_kb": rss,
                  "bytes": rep.stats.bytes, "lines": rep.stats.lines, "quorums": s["quorums"],
                  "failures": s["failures"], "recoveries": s["recoveries"]}))
"""


def measure(run_dir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir)], capture_output=True, text=True, check=True,
        timeout=1800,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=520.0, help="size of the big run (MB)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ftslurm-bench-"))
    try:
        rows = []
        for mb, steady in ((args.mb / 10, False), (args.mb, False), (args.mb / 10, True),
                           (args.mb, True)):
            run = tmp / f"tft-{int(mb)}{'s' if steady else ''}"
            t = time.perf_counter()
            size = generate(run, mb, steady)
            gen = time.perf_counter() - t
            r = measure(run)
            r["mb"] = size / 1e6
            r["mb_s"] = size / 1e6 / r["seconds"]
            r["cpu_mb_s"] = size / 1e6 / r["cpu_seconds"]
            rows.append(r)
            print(
                f"{'steady ' if steady else 'failing'} {r['mb']:6.1f} MB  {r['lines']:>8} lines  "
                f"{r['seconds']:5.2f} s  "
                f"{r['mb_s']:6.1f} MB/s wall ({r['cpu_mb_s']:6.1f} MB/s of CPU time)  "
                f"peak RSS {r['rss_kb'] / 1024:6.1f} MiB  "
                f"(generated in {gen:.1f} s; {r['quorums']} quorums, {r['failures']} failures, "
                f"{r['recoveries']} recoveries)",
                flush=True,
            )
            shutil.rmtree(run)
        load = os.getloadavg()[0]
        print(f"load average {load:.2f} on {os.cpu_count()} cores (other work slows the wall time)")
        for label, (small, big) in (("failing", rows[:2]), ("steady", rows[2:])):
            print(f"{label}: RSS growth {small['mb']:.0f} MB -> {big['mb']:.0f} MB: "
                  f"{(big['rss_kb'] - small['rss_kb']) / 1024:+.1f} MiB; goal >= 200 MB/s: "
                  f"{'met' if big['mb_s'] >= 200 else 'NOT met'} ({big['mb_s']:.0f} MB/s wall, "
                  f"{big['cpu_mb_s']:.0f} MB/s CPU)")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
