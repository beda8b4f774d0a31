"""What one Prometheus scrape of `ftslurm metrics serve` costs with N replicas in the quorum:
uncached (every scrape fetches the Lighthouse's /status page and rebuilds the report) vs
cached (the default TTLs: 2 s for /status, 10 s for the report).

Run: python bench/metrics_scrape.py [--replicas 64] [--repeats 40] [--run DIR] [--json]

A real torchft Lighthouse on a free loopback port; N replicas (torchft's own LighthouseClient,
threads of one helper process) form one quorum and keep heartbeating every 0.5 s; two
exporters on free ports read it and the run's logs (`--run`, default: a recorded 3-replica run
in tests/fixtures): A with `--status-ttl 0 --report-ttl 0`, B with the defaults. Scrapes
alternate A, B, A, B ...; each figure is a wall time of one HTTP GET /metrics from this
process, median with min and max over --repeats. Everything started is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ftslurm import lighthouse as lh
from ftslurm import runner
from ftslurm.wait import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
RUN3 = ROOT / "tests" / "fixtures" / "report" / "slurm-3-replicas-tft-3"

CLIENTS = textwrap.dedent(
    """
    import importlib.util, sys, threading, time
    from datetime import timedelta
    spec = importlib.util.spec_from_file_location("torchft._torchft", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    c = m.LighthouseClient(sys.argv[2], timedelta(seconds=30))
    n = int(sys.argv[3])
    ids = [f"torchtitan_ft_{i}:uuid{i}" for i in range(n)]
    def q(i):
        c.quorum(replica_id=ids[i], timeout=timedelta(seconds=60), address=f"http://w{i}:1",
                 store_address=f"w{i}:2", step=100, world_size=8, shrink_only=False)
    ts = [threading.Thread(target=q, args=(i,)) for i in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print("QUORUM OK", flush=True)
    while True:
        for rid in ids:
            c.heartbeat(rid)
        time.sleep(0.5)
    """
)


def _stop(proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
            proc.wait(5)


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2),
            "max": round(max(xs), 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--run", type=Path, default=RUN3, help="run dir whose logs are read")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    ext = lh.torchft_extension()
    if ext is None:
        sys.exit("torchft's extension module is missing")
    tmp = Path(tempfile.mkdtemp(prefix="metrics-scrape-"))
    state = tmp / "lighthouse"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FTSLURM_OUTPUTS": str(tmp / "out"),
           "FTSLURM_EVENTS": str(tmp / "events.jsonl"), "FTSLURM_LIGHTHOUSE_DIR": str(state)}
    procs = []
    info = lh.start(bind="127.0.0.1:0", min_replicas=args.replicas, state_dir=state)
    try:
        log = tmp / "clients.log"
        t0 = time.perf_counter()
        procs.append(runner.spawn([sys.executable, "-c", CLIENTS, str(ext),
                                   f"http://127.0.0.1:{info.port}", str(args.replicas)],
                                  log_path=log, env=env))  # fmt: skip
        wait_for(lambda: "QUORUM OK" in log.read_text(), timeout=120,
                 what=f"{args.replicas} clients forming a quorum")  # fmt: skip
        quorum_s = time.perf_counter() - t0
        urls = {}
        for name, ttl in (("uncached", ["--status-ttl", "0", "--report-ttl", "0"]),
                          ("cached", [])):  # fmt: skip
            port = free_port()
            procs.append(runner.spawn(
                [sys.executable, "-m", "ftslurm", "metrics", "serve", str(args.run),
                 "--lighthouse-url", f"http://127.0.0.1:{info.port}", "--host", "127.0.0.1",
                 "--port", str(port), *ttl], log_path=tmp / f"serve-{name}.log", env=env))
            urls[name] = f"http://127.0.0.1:{port}/metrics"
            wait_for(lambda u=urls[name]: lh.answers(u), timeout=30, what=f"{name} exporter")
        times: dict[str, list[float]] = {k: [] for k in urls}
        body = ""
        for _ in range(args.repeats):
            for name, url in urls.items():
                t = time.perf_counter()
                code, body = lh.http_get(url, 30)
                times[name].append((time.perf_counter() - t) * 1000)
                assert code == 200 and f"ftslurm_quorum_size {args.replicas}.0" in body, body[:500]
        samples = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        out = {
            "replicas": args.replicas, "run": str(args.run), "repeats": args.repeats,
            "quorum_formed_s": round(quorum_s, 2),
            "uncached_scrape_ms": stats(times["uncached"]),
            "cached_scrape_ms": stats(times["cached"]),
            "samples": samples, "bytes": len(body.encode()),
        }  # fmt: skip
    finally:
        for p in reversed(procs):
            _stop(p)
        lh.stop(state, grace=2)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['replicas']} replicas in one quorum (formed in {out['quorum_formed_s']} s), "
              f"logs of {args.run.name}; {out['samples']} samples, {out['bytes']} bytes a scrape")
        for k in ("uncached_scrape_ms", "cached_scrape_ms"):
            s = out[k]
            print(f"  {k:20s} median {s['median']} ms (min {s['min']}, max {s['max']}) over "
                  f"{args.repeats} scrapes, alternating")


if __name__ == "__main__":
    main()
