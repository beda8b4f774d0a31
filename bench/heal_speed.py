"""How fast a healing replica gets the survivor's state, per checkpoint transport option
(ftslurm/replica/worker/transport.py), against the TCP loopback moving the same bytes.

Why: a heal pauses the job, and torchft's default (one HTTP stream) moves an 8B heal at
0.63-0.73 GB/s on an H100 (docs/benchmarks.md). Here two processes stand for the two replicas
on this machine: the survivor holds a state of --size-gb of float32 tensors shaped like Llama 3 8B
layers (smaller dims for tiny sizes), the joiner holds the same tensors (its own model, to be
overwritten). Per option and run:
- staging: the survivor's `send_checkpoint` until the checkpoint can be fetched (HTTP: a
  copy to host memory, a no-op for CPU tensors; pg: none, its send is the transfer);
- transfer: the joiner's `recv_checkpoint` from then on;
- load: copying what it received into its own tensors (what `load_state_dict` does; with the
  in-place pg receive they are already there, the copy still runs, as in torchtitan);
- end to end: the survivor's start to the joiner's loaded state (the three add up).
Loopback: the survivor's process sends the same tensors' bytes through one plain TCP
connection (`sendall` from the tensors), the joiner's `recv_into`s its tensors: the ceiling
of one Python stream here. Runs alternate (loopback, each option, then the next run) so that
load from other processes hits every option alike; one untimed warm-up round goes first
(each process's first use: threads, the HTTP client, first pages; its rates are in the
JSON), and each run starts after a pause (--settle-s) once both processes are ready: filling
the state wakes torch's threads, which then spin, and the HTTP runs free gigabytes. Every
transfer carries values of its own (the survivor fills them before it); after it the joiner
checks every tensor; a wrong or stale value exits 1.

Other load: this machine (2 CPUs) is shared, and its other users' processes (tests run
outside the heavy lock) can halve a single run: a run's cost is nearly all kernel copying, so a
process taking a CPU for half a second shows at once. So each run waits (at most
--quiet-wait-s) for a quiet machine before it starts, and records where the CPU went while
it ran ("cpu": the machine's busy and steal seconds, each replica's CPU, the busiest other
processes). A run in which other processes (or the hypervisor) took more than 0.1 s + 10% of
its seconds is "disturbed" (DISTURBED_RULE, decided from the CPU record, never from the
speed); while an option or the loopback has fewer than --runs undisturbed runs, up to
--extra-rounds whole rounds are added. The headline median and spread count the undisturbed
runs when there are --runs of them (else every run); every run stays in the JSON, and the
figures over all runs are there too (all_runs_gbps, all_runs_spread).

CPU placement (--cpus): `any` (the default) leaves both replicas to the scheduler; `two` puts
each on a CPU of its own (slower here: a pinned replica cannot move off a CPU another process
takes); `one` puts both on one CPU, so that a run's rate is the inverse of its CPU cost per
byte. Alternated with `any`, `one` does not hold its runs closer (docs/benchmarks-cpu.md,
"Both replicas on one CPU").

Run: python bench/heal_speed.py [--size-gb 2] [--runs 3] [--chunks 8] [--json]
     [--transports http,http-chunked,pg] [--device cpu|cuda] [--warmup 1] [--settle-s 1]
     [--quiet-wait-s 10] [--extra-rounds 3] [--cpus one|two|any]
Prints a table, or with --json one object: size_bytes, results (per option: medians of
end_to_end_gbps, staging_s, transfer_s, load_s over the counted runs; spread =
(max-min)/median of their end-to-end seconds; counted_runs, disturbed_runs, all_runs_gbps,
all_runs_spread; runs: every run's figures with its "cpu" record), loopback_gbps (median of
its counted runs), loopback_spread, loopback_all_runs_spread, loopback_runs_gbps,
loopback_runs_cpu, extra_rounds, warmup (the warm-up rounds' rates), best_ratio_to_loopback
(the best option's median rate / the loopback's median rate).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import socket
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from ftslurm import knobs
from ftslurm.replica.worker import transport

DIM, KV_DIM, HIDDEN = 4096, 1024, 14336  # Llama 3 8B: model dim, 8 KV heads x 128, FFN
TIMEOUT = timedelta(seconds=600)
GB = 1e9


def layer_shapes(scale: int = 1) -> list[tuple[str, tuple[int, ...]]]:
    """One transformer layer's tensors (torchtitan's names), dims divided by `scale`."""
    d, kv, h = DIM // scale, KV_DIM // scale, HIDDEN // scale
    return [("attention.wq.weight", (d, d)), ("attention.wk.weight", (kv, d)),
            ("attention.wv.weight", (kv, d)), ("attention.wo.weight", (d, d)),
            ("feed_forward.w1.weight", (h, d)), ("feed_forward.w2.weight", (d, h)),
            ("feed_forward.w3.weight", (h, d)), ("attention_norm.weight", (d,)),
            ("ffn_norm.weight", (d,))]  # fmt: skip


def state_shapes(size_bytes: int) -> list[tuple[str, tuple[int, ...]]]:
    """Whole layers' tensors, in layer order, up to `size_bytes` of float32 (the last layer may
    be partial); dims shrink by powers of 2 until two layers fit, so a tiny state still has
    many tensors."""

    def nbytes(shape: tuple[int, ...]) -> int:
        n = 4
        for d in shape:
            n *= d
        return n

    scale = 1
    while scale < 64 and 2 * sum(nbytes(s) for _, s in layer_shapes(scale)) > size_bytes:
        scale *= 2
    out, total, layer = [], 0, 0
    while True:
        for name, shape in layer_shapes(scale):
            if total + nbytes(shape) > size_bytes:
                return out
            out.append((f"layers.{layer}.{name}", shape))
            total += nbytes(shape)
        layer += 1


def fill(state: dict[str, Any], seq: int) -> None:
    """Tensor i of transfer `seq` holds one value, different per tensor and transfer."""
    for i, t in enumerate(state.values()):
        t.fill_(float((seq * 1009 + i) % 65521))


def wrong_tensors(state: dict[str, Any], seq: int) -> list[str]:
    return [name for i, (name, t) in enumerate(state.items())
            if not bool((t == float((seq * 1009 + i) % 65521)).all())]  # fmt: skip


def checkpoint(model: dict[str, Any], run: int) -> dict[str, Any]:
    """What a torchft Manager sends: the user's state and torchft's own (non-tensor) leaves."""
    return {
        "user": {"default": {"model": model}},
        "torchft": {"step": run, "batches_committed": 2 * run},
    }


# --------------------------------------------------------------------------------------------
# The two replicas, each in its own process


@dataclass
class Setup:
    shapes: list[tuple[str, tuple[int, ...]]]
    device: str
    choices: list[transport.Choice]
    store_port: int
    cpus: tuple[int, int] | None = None  # (survivor's, joiner's) CPU, or not pinned


def pin(cpu: int | None) -> None:
    """Every thread of this process (and the ones it starts later: gloo's, torch's, the HTTP
    server's) onto one CPU."""
    if cpu is None:
        return
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {cpu})


PLACEMENTS = ("one", "two", "any")


def cpus_for(placement: str) -> tuple[int, int] | None:
    """(survivor's, joiner's) CPU for --cpus: `one`, both on the first CPU of this process's
    set; `two`, one each (None with fewer than 2); `any`, None: the scheduler's choice."""
    cpus = sorted(os.sched_getaffinity(0))
    if placement == "one":
        return (cpus[0], cpus[0])
    if placement == "two" and len(cpus) >= 2:
        return (cpus[0], cpus[1])
    return None


def _quiet() -> None:
    """No per-request lines from torchft's HTTP server, no torch warnings on the bench's
    stderr (torch.frombuffer on a read-only buffer, inside torchft)."""
    import http.server

    http.server.BaseHTTPRequestHandler.log_message = lambda *a, **k: None  # type: ignore
    warnings.simplefilter("ignore")


def _pg(setup: Setup, rank: int) -> Any:
    from torchft.process_group import ProcessGroupGloo, reconfigure_with_store

    pg = ProcessGroupGloo(timeout=TIMEOUT)
    reconfigure_with_store(pg, f"localhost:{setup.store_port}/heal", rank, 2)
    return pg


def _usage() -> dict[str, float]:
    """This process's CPU seconds (all its threads: gloo's, torch's, the HTTP server's), page
    faults and involuntary context switches so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "sys_s": ru.ru_stime, "minflt": ru.ru_minflt,
            "majflt": ru.ru_majflt, "nivcsw": ru.ru_nivcsw}  # fmt: skip


def _since(before: dict[str, float]) -> dict[str, float]:
    now = _usage()
    return {k: now[k] - before[k] for k in before}


def machine_cpu() -> dict[str, float]:
    """The whole machine's CPU seconds so far (/proc/stat): busy (every process's, the
    kernel's), idle (with iowait) and steal (time the hypervisor ran something else on our
    virtual CPUs). Zeros where /proc/stat is not there."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return {"busy_s": 0.0, "idle_s": 0.0, "steal_s": 0.0}
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    hz = os.sysconf("SC_CLK_TCK")
    return {"busy_s": (user + nice + system + irq + softirq) / hz,
            "idle_s": (idle + iowait) / hz, "steal_s": steal / hz}  # fmt: skip


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def survivor(conn: Connection, barrier: Any, setup: Setup) -> None:
    """Holds the state; per command: fill it, then send it by one option or the loopback."""
    pin(setup.cpus[0] if setup.cpus else None)
    import torch

    _quiet()
    state = {n: torch.empty(s, device=setup.device) for n, s in setup.shapes}
    pg = _pg(setup, 0) if any(c.option == "pg" for c in setup.choices) else None
    made = {c.label: transport.build(c, TIMEOUT, pg=pg, device=torch.device("cpu"))
            for c in setup.choices}  # fmt: skip
    conn.send({label: t.metadata() for label, t in made.items()})
    while (cmd := conn.recv()) is not None:
        what, run, arg = cmd
        fill(state, run)
        host = [t.cpu().view(torch.uint8).reshape(-1) for t in state.values()]  # the wire only
        _sync(setup.device)
        conn.send("ready")
        if conn.recv() != "go":
            break
        barrier.wait()
        used = _usage()
        t0 = time.monotonic()
        if what == "loopback":
            with socket.create_connection(("127.0.0.1", arg)) as sock:
                for t in host:
                    sock.sendall(memoryview(t.numpy()))
            conn.send({"t0": t0, "staged_at": t0, "usage": _since(used)})
            continue
        del host
        chosen = made[what]
        chosen.send_checkpoint([1], run, checkpoint(state, run), TIMEOUT)
        # pg: nothing to stage, send_checkpoint returns when the joiner has everything
        staged_at = t0 if what == "pg" else time.monotonic()
        conn.send({"t0": t0, "staged_at": staged_at})
        if conn.recv() != "done":
            break
        chosen.disallow_checkpoint()  # what the survivor's should_commit does: waits for readers
        conn.send(_since(used))  # HTTP: with its server threads' serving
    for t in made.values():
        t.shutdown(wait=False)


def joiner(conn: Connection, barrier: Any, setup: Setup) -> None:
    """Holds its own copy of the tensors (its model); per command: receive and load them."""
    pin(setup.cpus[1] if setup.cpus else None)
    import torch

    _quiet()
    live = {n: torch.zeros(s, device=setup.device) for n, s in setup.shapes}  # touched pages
    pg = _pg(setup, 1) if any(c.option == "pg" for c in setup.choices) else None
    target: dict[str, Any] = {}  # the in-place receive's state dict, as the Manager's would be
    made = {c.label: transport.build(c, TIMEOUT, pg=pg, state_dict=lambda: target,
                                     device=torch.device("cpu"))
            for c in setup.choices}  # fmt: skip
    listener = socket.create_server(("127.0.0.1", 0))
    conn.send(listener.getsockname()[1])
    metadata = conn.recv()
    while (cmd := conn.recv()) is not None:
        what, run, _ = cmd
        target.clear()
        target.update(checkpoint(live, run))
        _sync(setup.device)
        conn.send("ready")
        if conn.recv() != "go":
            break
        barrier.wait()
        used = _usage()
        t0 = time.monotonic()
        if what == "loopback":
            sock, _ = listener.accept()
            with sock:
                for t in live.values():
                    view = memoryview(t.view(torch.uint8).numpy().reshape(-1))
                    got = 0
                    while got < len(view):
                        n = sock.recv_into(view[got:])
                        if n == 0:
                            raise ConnectionError("the survivor closed the loopback early")
                        got += n
            done = time.monotonic()
            conn.send({"t0": t0, "received_at": done, "loaded_at": done, "wrong": [],
                       "usage": _since(used)})  # fmt: skip
            continue
        got = made[what].recv_checkpoint(0, metadata[what], run, TIMEOUT)
        received_at = time.monotonic()
        with torch.no_grad():
            for name, t in live.items():  # nn.Module.load_state_dict: param.copy_(input)
                t.copy_(got["user"]["default"]["model"][name])
        _sync(setup.device)
        loaded_at = time.monotonic()
        conn.send({"t0": t0, "received_at": received_at, "loaded_at": loaded_at,
                   "usage": _since(used)})  # fmt: skip
        wrong = wrong_tensors(live, run)  # after the figures: not in the run's CPU time
        if got["torchft"]["step"] != run:
            wrong.append("torchft.step")
        del got
        conn.send(wrong)
    for t in made.values():
        t.shutdown(wait=False)
    listener.close()


# --------------------------------------------------------------------------------------------
# The bench: both processes, the runs in turn, the figures


QUIET_BUSY = 0.15  # CPUs' worth of busy time below which the machine counts as quiet
QUIET_WINDOW_S = 0.5


def wait_quiet(limit_s: float) -> float | None:
    """Wait (at most `limit_s`) until the machine was quiet for a whole window: less than
    QUIET_BUSY of a CPU busy (both replica processes are idle then, so this is other load: the
    machine is shared, and a run that starts under someone's test measures both). Returns the
    seconds waited, None when the limit passed first (the run then goes ahead: every run is
    reported, with the other load it met in its "cpu" record)."""
    if limit_s <= 0:
        return 0.0
    start = time.monotonic()
    while True:
        before = machine_cpu()
        time.sleep(QUIET_WINDOW_S)
        busy = machine_cpu()["busy_s"] - before["busy_s"]
        waited = time.monotonic() - start
        if busy < QUIET_BUSY * QUIET_WINDOW_S:
            return round(waited, 2)
        if waited >= limit_s:
            return None


PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread


def process_cpu() -> dict[int, tuple[str, float]]:
    """Every process's name and CPU seconds so far, from /proc; a kernel thread's name gets a
    leading "[" (ksoftirqd does the loopback's packets, the bench's own traffic)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name, rest = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
        if int(rest[6]) & PF_KTHREAD:
            name = f"[{name}]"
        out[int(pid)] = (name, (int(rest[11]) + int(rest[12])) / hz)  # utime, stime
    return out


def _others_since(before: dict[int, tuple[str, float]], ours: set[int]) -> list[list[Any]]:
    """The other processes (and kernel threads) that ran since `before`, busiest first:
    [name, CPU seconds]. One that started and ended in between is not seen."""
    used = []
    for pid, (name, cpu) in process_cpu().items():
        if pid not in ours:
            d = cpu - before.get(pid, (name, 0.0))[1]
            if d > 0:
                used.append([name, round(d, 2)])
    return sorted(used, key=lambda u: -u[1])


def _busiest_others(
    before: dict[int, tuple[str, float]], ours: set[int], top: int = 3
) -> list[list[Any]]:
    """The `top` other processes that ran most since `before`: [name, CPU seconds]."""
    return _others_since(before, ours)[:top]


def _cpu_record(
    machine: dict[str, float],
    survivor: dict[str, float],
    joiner: dict[str, float],
    procs_before: dict[int, tuple[str, float]] | None = None,
    ours: set[int] | None = None,
) -> dict[str, Any]:
    """Where the CPU went during one run: the machine's busy and steal seconds (from just
    before the start to both processes' end), the bench's two processes' own CPU seconds, page
    faults and involuntary switches, and the rest of the machine's busy time ("others": other
    processes and the kernel's work on no one's account). A run that is slow because of other
    load shows it here."""
    after = machine_cpu()
    busy = after["busy_s"] - machine["busy_s"]
    bench_s = survivor["cpu_s"] + joiner["cpu_s"]
    steal = after["steal_s"] - machine["steal_s"]
    return {"machine_busy_s": round(busy, 2), "steal_s": round(steal, 2),
            "ours_s": round(bench_s, 2), "others_s": round(max(busy - bench_s, 0.0), 2),
            "survivor_cpu_s": round(survivor["cpu_s"], 2),
            "joiner_cpu_s": round(joiner["cpu_s"], 2),
            "kernel_s": round(survivor["sys_s"] + joiner["sys_s"], 2),
            "minflt": int(survivor["minflt"] + joiner["minflt"]),
            "majflt": int(survivor["majflt"] + joiner["majflt"]),
            "nivcsw": int(survivor["nivcsw"] + joiner["nivcsw"]),
            **_others_record(procs_before or {}, ours or set())}  # fmt: skip


def _others_record(before: dict[int, tuple[str, float]], ours: set[int]) -> dict[str, Any]:
    """other_processes_s: what other user processes (not kernel threads) ran during the run,
    the load a run can be disturbed by; and the busiest three of all."""
    used = _others_since(before, ours)
    user = sum(cpu for name, cpu in used if not name.startswith("["))
    return {"other_processes_s": round(user, 2), "busiest_others": used[:3]}


DISTURBED_RULE = (
    "other user processes' CPU (kernel threads such as ksoftirqd, which carry the bench's own "
    "packets, not counted) or steal during the run above 0.1 s + 10% of the run's seconds, or "
    "no quiet start within --quiet-wait-s"
)


def disturbed(cpu: dict[str, Any], seconds: float) -> bool:
    """Whether other load shared the machine during a run (DISTURBED_RULE), judged from the
    CPU record alone, never from the run's speed."""
    limit = 0.1 + 0.1 * seconds
    return (
        cpu["other_processes_s"] > limit
        or cpu["steal_s"] > limit
        or cpu["waited_for_quiet_s"] is None
    )


def _counted(runs: list[dict[str, Any]], wanted: int) -> list[dict[str, Any]]:
    """The runs the headline figures count: the undisturbed ones when there are `wanted` of
    them, else every run (the JSON says which: counted_runs, disturbed_runs)."""
    calm = [r for r in runs if not r["cpu"]["disturbed"]]
    return calm if len(calm) >= wanted else runs


def _enough(per_option: list[list[dict[str, Any]]], wanted: int) -> bool:
    return all(sum(not r["cpu"]["disturbed"] for r in runs) >= wanted for runs in per_option)


def _median_spread(values: list[float]) -> tuple[float, float]:
    mid = statistics.median(values)
    return mid, (max(values) - min(values)) / mid if mid else 0.0


def measure(args: argparse.Namespace, choices: list[transport.Choice]) -> dict[str, Any]:
    """Start both replicas, run every option and the loopback `args.runs` times in turn."""
    ctx = mp.get_context("spawn")  # a forked child of a process that ran torch ops can hang
    shapes = state_shapes(int(args.size_gb * GB))
    size = sum(4 * _numel(s) for _, s in shapes)
    cpus = cpus_for(args.cpus)
    if args.cpus == "one" and cpus:  # this process too (its store thread, the monitor), as
        pin(cpus[0])  # `taskset -c` pins a whole command
    store = None
    if any(c.option == "pg" for c in choices):
        from torch.distributed import TCPStore

        store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    setup = Setup(shapes, args.device, choices, store.port if store is not None else 0,
                  cpus)  # fmt: skip
    barrier = ctx.Barrier(2)
    (s_conn, s_child), (j_conn, j_child) = ctx.Pipe(), ctx.Pipe()
    procs = [ctx.Process(target=survivor, args=(s_child, barrier, setup), daemon=True),
             ctx.Process(target=joiner, args=(j_child, barrier, setup), daemon=True)]  # fmt: skip
    for p in procs:
        p.start()
    ours = {os.getpid(), *(p.pid for p in procs)}
    rows: dict[str, list[dict[str, float]]] = {c.label: [] for c in choices}
    loopback: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []  # the warm-up rounds' rates, reported, not counted
    try:
        port = j_conn.recv()
        j_conn.send(s_conn.recv())  # the survivor's addresses (HTTP) to the joiner
        seq = 0  # each transfer carries values of its own: a stale tensor cannot pass
        run = 1 - args.warmup  # runs < 1: the warm-up rounds
        every = [loopback, *rows.values()]
        while run <= args.runs or (
            run <= args.runs + args.extra_rounds and not _enough(every, args.runs)
        ):
            for what in ["loopback", *rows]:
                seq += 1
                s_conn.send((what, seq, port))
                j_conn.send((what, seq, None))
                if (s_conn.recv(), j_conn.recv()) != ("ready", "ready"):
                    raise SystemExit(f"{what}, run {run}: a replica process did not get ready")
                # the fill's and the last run's after-effects (idle threads spinning, freed
                # memory) settle first: a heal does not start right after either
                time.sleep(args.settle_s)
                waited = wait_quiet(args.quiet_wait_s)
                procs_before = process_cpu()
                machine = machine_cpu()
                s_conn.send("go")
                j_conn.send("go")
                sent, got = s_conn.recv(), j_conn.recv()
                if what != "loopback":
                    s_conn.send("done")
                    sent["usage"] = s_conn.recv()
                cpu = _cpu_record(machine, sent["usage"], got["usage"], procs_before, ours)
                cpu["waited_for_quiet_s"] = waited
                if what != "loopback":
                    got["wrong"] = j_conn.recv()
                seconds = got["loaded_at"] - sent["t0"]
                cpu["disturbed"] = disturbed(cpu, seconds)
                if what == "loopback":
                    gbps = size / seconds / GB
                    (loopback if run > 0 else warm).append({"transport": what, "gbps": gbps,
                                                            "cpu": cpu})  # fmt: skip
                    continue
                if got["wrong"]:
                    raise SystemExit(f"{what}, run {run}: wrong values in {got['wrong'][:5]}")
                start, staged = sent["t0"], max(sent["staged_at"], sent["t0"])
                seconds = got["loaded_at"] - start
                row = {"end_to_end_s": seconds, "end_to_end_gbps": size / seconds / GB,
                       "staging_s": staged - start, "transfer_s": got["received_at"] - staged,
                       "load_s": got["loaded_at"] - got["received_at"], "cpu": cpu}  # fmt: skip
                if run > 0:
                    rows[what].append(row)
                else:
                    warm.append({"transport": what, "gbps": row["end_to_end_gbps"]})
                if not args.json:
                    label = f"run {run}" if run > 0 else "warm-up"
                    print(f"  {label:<7} {what:<16} {row['end_to_end_gbps']:5.2f} GB/s"
                          f"{'  (disturbed)' if cpu['disturbed'] else ''}", flush=True)  # fmt: skip
            run += 1
    finally:
        for conn in (s_conn, j_conn):
            try:
                conn.send(None)
            except OSError:
                pass
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    results = []
    for label, every in rows.items():
        runs = _counted(every, args.runs)
        gbps, _ = _median_spread([r["end_to_end_gbps"] for r in runs])
        _, spread = _median_spread([r["end_to_end_s"] for r in runs])
        all_gbps, _ = _median_spread([r["end_to_end_gbps"] for r in every])
        _, all_spread = _median_spread([r["end_to_end_s"] for r in every])
        results.append({"transport": label, "end_to_end_gbps": round(gbps, 3),
                        "staging_s": round(statistics.median(r["staging_s"] for r in runs), 4),
                        "transfer_s": round(statistics.median(r["transfer_s"] for r in runs), 4),
                        "load_s": round(statistics.median(r["load_s"] for r in runs), 4),
                        "spread": round(spread, 3), "counted_runs": len(runs),
                        "disturbed_runs": sum(r["cpu"]["disturbed"] for r in every),
                        "all_runs_gbps": round(all_gbps, 3),
                        "all_runs_spread": round(all_spread, 3),
                        "runs": [{k: v if isinstance(v, dict) else round(v, 4)
                                  for k, v in r.items()} for r in every],
                        })  # fmt: skip
    counted_loop = _counted(loopback, args.runs)
    loop_gbps, loop_spread = _median_spread([r["gbps"] for r in counted_loop])
    _, loop_all_spread = _median_spread([r["gbps"] for r in loopback])
    best = max((r["end_to_end_gbps"] for r in results), default=0.0)
    return {"size_bytes": size, "tensors": len(shapes), "device": args.device,
            "runs": args.runs, "warmup_rounds": args.warmup, "results": results,
            "cpus": args.cpus, "pinned_cpus": list(setup.cpus) if setup.cpus else None,
            "loopback_gbps": round(loop_gbps, 3),
            "loopback_spread": round(loop_spread, 3),
            "loopback_counted_runs": len(counted_loop),
            "loopback_all_runs_spread": round(loop_all_spread, 3),
            "extra_rounds": run - 1 - args.runs, "disturbed_rule": DISTURBED_RULE,
            "loopback_runs_gbps": [round(r["gbps"], 3) for r in loopback],
            "loopback_runs_cpu": [r["cpu"] for r in loopback],
            "warmup": [{**r, "gbps": round(r["gbps"], 3)} for r in warm],
            "best_ratio_to_loopback": round(best / loop_gbps, 3) if loop_gbps else 0.0}  # fmt: skip


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _choices(names: str, chunks: str) -> list[transport.Choice]:
    out = []
    for name in names.split(","):
        if name not in transport.OPTIONS:
            raise ValueError(f"--transports: {name!r} is not one of {', '.join(transport.OPTIONS)}")
        if name == "http-chunked":
            try:
                counts = [int(n) for n in chunks.split(",")]
            except ValueError:
                raise ValueError(
                    f"--chunks {chunks!r}: expected whole numbers, e.g. 4 or 2,4,8"
                ) from None
            out += [transport.Choice(name, n) for n in counts]
        else:
            out.append(transport.Choice(name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gb", type=float, default=2.0, help="state size, GB (1e9 bytes) [2]")
    ap.add_argument("--runs", type=int, default=3, help="runs per option [3]")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed rounds first [1]: each process's first use of a transport "
                    "(threads, the HTTP client, first pages) that a trainer has paid")  # fmt: skip
    chunks = str(knobs.KNOBS["FTSLURM_HEAL_CHUNKS"].default)
    ap.add_argument(
        "--chunks",
        default=chunks,
        help=f"http-chunked chunk counts, comma-separated [{chunks}, FTSLURM_HEAL_CHUNKS's]",
    )
    ap.add_argument("--transports", default=",".join(transport.OPTIONS),
                    help=f"options, comma-separated [{','.join(transport.OPTIONS)}]")  # fmt: skip
    ap.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="where both states live [cpu]"
    )
    ap.add_argument("--settle-s", type=float, default=1.0,
                    help="pause before each run, seconds [1]: after filling the survivor's "
                    "state and the previous run's frees, torch's idle threads stop")  # fmt: skip
    ap.add_argument("--quiet-wait-s", type=float, default=10.0,
                    help="before each run, wait up to this long for a quiet machine (other "
                    "load under 0.15 CPU for 0.5 s) [10]; 0: do not wait")  # fmt: skip
    ap.add_argument("--extra-rounds", type=int, default=3,
                    help="rounds added, at most, while an option has fewer than --runs runs "
                    "that other load did not disturb [3]")  # fmt: skip
    ap.add_argument("--cpus", choices=PLACEMENTS, default="any",
                    help="where the two replicas run [any]: `any`, the scheduler's choice; "
                    "`two`, a CPU each; `one`, both on one CPU (a run's rate is then the "
                    "inverse of its CPU cost per byte)")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        choices = _choices(args.transports, args.chunks)
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    if args.runs < 1 or args.warmup < 0 or args.extra_rounds < 0 or args.size_gb <= 0:
        print("Error: --runs must be at least 1, --warmup and --extra-rounds 0 or more, "
              "--size-gb above 0",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(f"Error: --device cuda: no CUDA device here (torch {torch.__version__})",
                  file=sys.stderr)  # fmt: skip
            return 2
    figures = measure(args, choices)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"state: {figures['size_bytes'] / GB:.3f} GB, {figures['tensors']} float32 tensors on "
          f"{args.device}; medians of the counted runs (those other load did not disturb, when "
          f"{args.runs} of them); spread = (max-min)/median")  # fmt: skip
    print(f"{'option':<16} {'GB/s':>6} {'staging':>8} {'transfer':>9} {'load':>7} {'spread':>7}"
          f"  counted/disturbed  all runs: GB/s, spread")  # fmt: skip
    for r in figures["results"]:
        print(f"{r['transport']:<16} {r['end_to_end_gbps']:6.2f} {r['staging_s']:7.3f}s "
              f"{r['transfer_s']:8.3f}s {r['load_s']:6.3f}s {r['spread']:7.1%}  "
              f"{r['counted_runs']:>7}/{r['disturbed_runs']:<9}  {r['all_runs_gbps']:6.2f}, "
              f"{r['all_runs_spread']:.1%}")  # fmt: skip
    loop = figures["loopback_gbps"]
    print(f"{'TCP loopback':<16} {loop:6.2f}{'':27} {figures['loopback_spread']:7.1%}  "
          f"{figures['loopback_counted_runs']:>7}  all runs' spread "
          f"{figures['loopback_all_runs_spread']:.1%}")  # fmt: skip
    print(f"best / loopback: {figures['best_ratio_to_loopback']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
