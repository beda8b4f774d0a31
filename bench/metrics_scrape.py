"""What one Prometheus scrape of `ftslurm metrics serve` costs with N replicas in the quorum:
uncached (every scrape fetches the Lighthouse's /status page and rebuilds the report) vs
cached (the default TTLs: 2 s for /status, 10 s for the report).

Run: python bench/metrics_scrape.py [--replicas 64] [--repeats 40] [--run DIR] [--json]
     python bench/metrics_scrape.py --logs 10000 [--repeats 20] [--json]

A real torchft Lighthouse on a free loopback port; N replicas (torchft's own LighthouseClient,
threads of one helper process) form one quorum and keep heartbeating every 0.5 s; two
exporters on free ports read it and the run's logs (`--run`, default: a recorded 3-replica run
in tests/fixtures): A with `--status-ttl 0 --report-ttl 0`, B with the defaults. Scrapes
alternate A, B, A, B ...; each figure is a wall time of one HTTP GET /metrics from this
process, median with min and max over --repeats. Everything started is stopped by pid.

`--logs N`: no Lighthouse; a run folder of N small replica logs (the first 20 lines of a
recorded replica log each, its replica index made the file's), one exporter with the
default TTLs reading it. Figures: the first scrape (the logs not read yet), the time until
a scrape shows them (`ftslurm_logs_up 1`), --repeats scrapes while no log changes, and
--repeats scrapes after one log grew (the logs are read again meanwhile), 1.1 s apart so
that each crosses the report's TTL as a dashboard's would.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
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


def _log_folder(root: Path, n: int) -> Path:
    """A run folder of `n` logs: the first 20 lines of replica 0's recorded log, each with
    its own replica index."""
    head = b"".join(gzip.open(RUN3 / "tft-3_0.out.gz").readlines()[:20])
    run = root / "torchft" / "tft-77"
    run.mkdir(parents=True)
    for i in range(n):
        (run / f"tft-77_{i}.out").write_bytes(head.replace(b"_ft_0", b"_ft_%d" % i))
    return run


def _timed_get(url: str) -> tuple[float, str]:
    t = time.perf_counter()
    code, body = lh.http_get(url, 300)
    assert code == 200, code
    return (time.perf_counter() - t) * 1000, body


def bench_logs(args: argparse.Namespace) -> dict[str, object]:
    """Scrapes of an exporter reading a run folder of `args.logs` logs (see the docstring)."""
    tmp = Path(tempfile.mkdtemp(prefix="metrics-scrape-logs-"))
    t0 = time.perf_counter()
    run = _log_folder(tmp, args.logs)
    made_s = time.perf_counter() - t0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FTSLURM_OUTPUTS": str(tmp / "out"),
           "FTSLURM_EVENTS": str(tmp / "events.jsonl"),
           "FTSLURM_LIGHTHOUSE_DIR": str(tmp / "lighthouse")}  # fmt: skip
    port = free_port()
    proc = runner.spawn([sys.executable, "-m", "ftslurm", "metrics", "serve", str(run),
                         "--lighthouse-url", f"http://127.0.0.1:{free_port()}",
                         "--host", "127.0.0.1", "--port", str(port)],
                        log_path=tmp / "serve.log", env=env)  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"

    def accepts() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_for(accepts, timeout=60, what="the exporter's port")
        first_ms, body = _timed_get(url)
        t0 = time.perf_counter()
        while "ftslurm_logs_up 1.0" not in body:
            time.sleep(0.5)
            body = _timed_get(url)[1]
        logs_up_s = time.perf_counter() - t0
        steady, grown = [], []
        for times in (steady, grown):
            if times is grown:
                with open(run / "tft-77_0.out", "ab") as fh:
                    fh.write(b"[2026-11-23 10:09:00]  launching replica 0 (attempt 1) on w-9\n")
            for _ in range(args.repeats):
                time.sleep(1.1)
                times.append(_timed_get(url)[0])
    finally:
        _stop(proc)
    return {"logs": args.logs, "made_s": round(made_s, 1), "first_scrape_ms": round(first_ms),
            "logs_up_after_s": round(logs_up_s, 1), "repeats": args.repeats,
            "unchanged_scrape_ms": stats(steady), "after_growth_scrape_ms": stats(grown)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--run", type=Path, default=RUN3, help="run dir whose logs are read")
    ap.add_argument("--logs", type=int, default=0,
                    help="instead: a run folder of this many small logs, no Lighthouse")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    if args.logs:
        out = bench_logs(args)
        if args.json:
            print(json.dumps(out))
            return
        print(f"{out['logs']} logs in one run folder (written in {out['made_s']} s); first "
              f"scrape {out['first_scrape_ms']} ms; logs shown after {out['logs_up_after_s']} s")
        for k in ("unchanged_scrape_ms", "after_growth_scrape_ms"):
            s = out[k]
            print(f"  {k:24s} median {s['median']} ms (min {s['min']}, max {s['max']}) over "
                  f"{out['repeats']} scrapes, 1.1 s apart")
        return
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
