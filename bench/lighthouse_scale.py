"""One real Lighthouse against N simulated replicas: quorum times, its memory and log, the
replicas' log volume, failure detection, and the status commands, per N.

Why: a job of hundreds of replicas talks to one Lighthouse on the login node, and each replica
logs every quorum it gets (its whole member list, so O(N) bytes a replica a step). The figures
say how far one Lighthouse and the replicas' logs go before they are the limit.

How: the Lighthouse is started the way users start it (`lighthouse.start`: its own state dir,
a free loopback port, the launcher that writes <state>/lighthouse.log), with ftslurm's default
options except --heartbeat-timeout-ms. Each simulated replica is a real torchft ManagerServer
(torchft's Rust code, heartbeating every 100 ms) with its ManagerClient; nothing is trained.
The replicas live in several processes (--procs, default one per 64 replicas), threads of
which call `ManagerClient._quorum` for step s together, once a step, as a Manager does; each
process's stderr (where the Rust code logs) goes to a file of its own. torchft's compiled
module is loaded directly, so no simulator imports torch; each ManagerServer's Rust runtime
gets --tokio-threads workers (default 2; torchft's default, one per CPU, would put N x CPUs
threads on this one machine, where a real job has one replica a node).

Figures per N (each a median/min/max over what was measured; `--repeats` runs everything
again on a fresh Lighthouse and fresh replicas, and pools the figures):
- first_quorum_s: from the last of the N ManagerServers started to the first quorum that
  holds all N (every replica has its answer);
- round_s: one quorum round of the measured steps (--rounds): from asking, all together, to
  the last replica's answer;
- lighthouse_rss_mb: VmRSS of the process that holds the Lighthouse's port (the launcher runs
  the Rust Lighthouse in a child), after the measured rounds; lighthouse_tree_rss_mb: the
  launcher and that child together; lighthouse_peak_rss_mb: the holder's VmHWM at the end;
- lighthouse_log_bytes_per_round: growth of <state>/lighthouse.log over the measured rounds,
  per round, as the launcher writes it: folded by ftslurm.logfilter unless FTSLURM_LOG_FILTER=0
  (lighthouse_log_filter says which; None where this ftslurm has no such switch);
- replica_log_bytes_per_replica_step: growth of the simulators' stderr files over the
  measured rounds / (replicas x rounds), raw and through `ftslurm.logfilter`'s
  ReplicaLogFilter (one per replica, its lines told apart by their `[Replica torchtitan_ft_K]` tag;
  "n/a" while that module is not there). The files are emptied after this count, so that
  N = 1024 (a quarter of a megabyte a line) does not fill the disk;
- status_cmd_s, status_json_s, metrics_show_s: wall time of `ftslurm lighthouse status`,
  `... status --json` and `ftslurm metrics show` (subprocesses, FTSLURM_LIGHTHOUSE_DIR set
  to this Lighthouse's state dir), --cli-repeats each, while the quorum rounds go on (one
  started every --step-s, default 1 s: a step's length; rounds_during_cli counts them);
  the order of the commands rotated each repeat. They read the launcher's copy of the page
  (status_page_from "snapshot", status_page_age_s its age) when one is fresh; the control,
  status_live_json_s, is `... status --json --live`, which reads the page from the
  Lighthouse itself (status_live_ok: how often it came);
  status_json_bytes, status_text_lines: the size of their output; lighthouse_up: whether
  every `metrics show` said `ftslurm_lighthouse_up 1`;
- failure_to_quorum_s: one replica's ManagerServer shut down (its heartbeats stop) during the
  steady rounds, to the first quorum without it (the others' answers to the next step),
  beside heartbeat_timeout_ms; live_replicas_dropped: replicas missing from a quorum that
  were not shut down, over every round after the first full quorum; unanswered: quorum calls
  that failed;
- load_before/load_after (os.getloadavg), cpus, versions.

Run: python bench/lighthouse_scale.py [--replicas 64,256,1024] [--rounds 10] [--repeats 1]
     [--heartbeat-timeout-ms 2000] [--join-timeout-ms 10000] [--procs P] [--cli-repeats 5]
     [--step-s 1] [--tokio-threads 2] [--work-dir DIR] [--json]
Prints a table, or with --json one object: per N (the key, as a string) a dict of the
figures above. Progress goes to stderr. Everything it started (the Lighthouse through
`lighthouse.stop`, the simulators by pid) is stopped on the way out, also on an error, Ctrl-C
or SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's ftslurm, not another one installed
    sys.path.insert(0, str(ROOT))

from ftslurm import knobs, procs, runner  # noqa: E402
from ftslurm import lighthouse as lh  # noqa: E402
from ftslurm.errors import UserError  # noqa: E402
from ftslurm.lighthouse import ports  # noqa: E402
from ftslurm.lighthouse.config import LighthouseConfig, check_heartbeat_timeout  # noqa: E402

# replica ids as the FT job names them (torchtitan_ft_<index>:<uuid>, the uuid a Manager adds), so
# that the logs have a real job's lines
PREFIX = "torchtitan_ft_"
PER_PROC = 64  # replicas per simulator process by default
HEARTBEAT_MS = 100  # torchft's Manager default
QUORUM_TIMEOUT_S = 120.0  # longer than a join timeout plus a heartbeat timeout
REPLY_SLACK_S = 30.0  # a simulator's answer may come this long after its quorum timeout
FIRST_QUORUM_ROUNDS = 20  # rounds allowed until the first quorum holds all N
_TAG = re.compile(rb"\[Replica " + PREFIX.encode() + rb"(\d+)\]")
_UP = re.compile(r"^ftslurm_lighthouse_up\s+(\S+)\s*$", re.MULTILINE)

# --------------------------------------------------------------------------------------------
# Pure helpers


def spread(xs: Iterable[float], digits: int = 4) -> dict[str, float] | None:
    """Median, min and max of `xs` (None when there is none)."""
    v = list(xs)
    if not v:
        return None
    r = lambda x: round(x, digits)  # noqa: E731
    return {"median": r(statistics.median(v)), "min": r(min(v)), "max": r(max(v)), "n": len(v)}


def parse_replicas(text: str) -> list[int]:
    """`64,256` -> [64, 256]; a UserError for anything but whole numbers of at least 2 (one
    replica is shut down and the quorum must go on without it)."""
    try:
        ns = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--replicas {text!r}: give whole numbers, e.g. 64,256") from None
    if not ns or min(ns) < 2:
        raise UserError(f"--replicas {text!r}: each N must be at least 2")
    return ns


def split(n: int, procs_: int) -> list[range]:
    """Replica indices 0..n-1 in `procs_` contiguous, nearly equal parts (none empty)."""
    k = max(1, min(procs_, n))
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def default_procs(n: int) -> int:
    return max(1, math.ceil(n / PER_PROC))


def index_of(replica_id: str) -> int | None:
    """torchtitan_ft_12:uuid -> 12 (None for an id not ours)."""
    head = replica_id.split(":", 1)[0]
    if head.startswith(PREFIX) and head[len(PREFIX):].isdigit():
        return int(head[len(PREFIX):])
    return None


def replica_of(line: bytes) -> int | None:
    """The replica a torchft Manager log line is about (`[Replica torchtitan_ft_12] ...`),
    else None."""
    m = _TAG.search(line)
    return int(m.group(1)) if m else None


def vm_kb(status: str, name: str) -> int | None:
    """A `/proc/PID/status` field in kB (`VmRSS:  1234 kB` -> 1234), None when missing."""
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key == name:
            parts = rest.split()
            return int(parts[0]) if parts and parts[0].isdigit() else None
    return None


def lighthouse_up(text: str) -> bool:
    """Whether a scrape (`ftslurm metrics show`) says the Lighthouse answered."""
    m = _UP.search(text)
    try:
        return m is not None and float(m.group(1)) == 1.0
    except ValueError:
        return False


def lines_of(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a byte stream given in pieces, each with its newline (the last one
    without, when the stream does not end with one)."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for line in whole:
            yield line + b"\n"
    if rest:
        yield rest


LineFilter = Callable[[bytes], "bytes | None"]


def filter_factory() -> Callable[[], LineFilter] | None:
    """A maker of one replica's line filter (ftslurm.logfilter's ReplicaLogFilter), or None
    where that module is not there (the bench then reports `filtered: n/a`)."""
    try:
        from ftslurm import logfilter  # type: ignore[attr-defined]
    except ImportError:
        return None
    cls = getattr(logfilter, "ReplicaLogFilter", None)
    if cls is None:
        return None

    def make() -> LineFilter:
        f = cls()
        if hasattr(f, "filter_line"):
            return f.filter_line
        return lambda line: f.feed(line)  # a stream filter: fed one whole line at a time

    return make


def filtered_bytes(lines: Iterable[bytes], make: Callable[[], LineFilter],
                   seen: Iterable[bytes] = ()) -> int:  # fmt: skip
    """Bytes left of `lines` after each replica's own filter (lines of no replica share one).
    `seen`: the lines before them, filtered first and not counted: a launcher's filter has
    seen the replica's quorum before the window, so a window's first round is not a change."""
    filters: dict[int | None, LineFilter] = {}
    total = 0
    for counted, part in ((False, seen), (True, lines)):
        for line in part:
            who = replica_of(line)
            f = filters.get(who) or filters.setdefault(who, make())
            out = f(line)
            total += len(out) if out and counted else 0
    return total


# --------------------------------------------------------------------------------------------
# The simulator: one process, many replicas


@dataclass(frozen=True)
class SimSpec:
    ext: str  # torchft's compiled module
    lighthouse: str  # http://127.0.0.1:PORT
    indices: range
    log: str  # this process's stderr
    tokio_threads: int  # each ManagerServer's runtime workers (0: torchft's, one per CPU)
    quiet: bool = False  # RUST_LOG=warn: its replicas log no INFO line (see Fleet.spawn)


def load_torchft(ext: str) -> ModuleType:
    """torchft._torchft loaded from its file (torchft's __init__ would import torch)."""
    spec = importlib.util.spec_from_file_location("torchft._torchft", ext)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stderr_to(path: str) -> None:
    """fd 2 (where the Rust code logs) appended to `path`: O_APPEND, so the bench may empty
    the file while it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)


class Replicas:
    """The ManagerServers of one simulator and their clients."""

    def __init__(self, tft: ModuleType, spec: SimSpec) -> None:
        wait_s = timedelta(seconds=60)
        self.servers: dict[int, Any] = {}
        self.clients: dict[int, Any] = {}
        for i in spec.indices:
            s = tft.ManagerServer(
                replica_id=f"{PREFIX}{i}:{uuid.uuid4()}", lighthouse_addr=spec.lighthouse,
                hostname="127.0.0.1", bind="127.0.0.1:0", store_addr="127.0.0.1:1",
                world_size=1, heartbeat_interval=timedelta(milliseconds=HEARTBEAT_MS),
                connect_timeout=wait_s, quorum_retries=0,
            )  # fmt: skip
            self.servers[i] = s
            self.clients[i] = tft.ManagerClient(s.address(), connect_timeout=wait_s)
        self.pool = ThreadPoolExecutor(max(1, len(self.servers)), thread_name_prefix="quorum")
        self.told: set[int] = set()  # quorum ids whose members this process has sent

    def ask(self, i: int, step: int) -> tuple[int, float, Any, str | None]:
        """Replica `i`'s quorum call for `step`, as a Manager makes it: (i, answered at, the
        result or None, the error or None)."""
        try:
            q = self.clients[i]._quorum(
                group_rank=0, step=step, checkpoint_metadata="", shrink_only=False,
                timeout=timedelta(seconds=QUORUM_TIMEOUT_S), commit_failures=0,
                reconfigure_handle="", init_sync=True,
            )  # fmt: skip
            return i, time.monotonic(), q, None
        except Exception as e:  # noqa: BLE001 - reported, counted as unanswered
            return i, time.monotonic(), None, f"{type(e).__name__}: {e}"[:300]

    def round(self, step: int) -> dict[str, Any]:
        """Every live replica asks at once; when each got its answer, its quorum id, and the
        members of each quorum id not sent before (read from one answer only: reading every
        answer's member list would cost the probe O(N) a replica)."""
        got = list(self.pool.map(lambda i: self.ask(i, step), list(self.clients)))
        out: dict[str, Any] = {"done": {}, "qid": {}, "members": {}, "errors": {}}
        for i, t, q, err in got:
            out["done"][i] = t
            if q is None:
                out["errors"][i] = err
                continue
            out["qid"][i] = q.quorum_id
            if q.quorum_id not in self.told:
                self.told.add(q.quorum_id)
                out["members"][q.quorum_id] = [index_of(r) for r in q.replica_ids]
        return out

    def shut_down(self, i: int) -> float:
        """Replica `i`'s ManagerServer shut down (its heartbeats stop); when, just before."""
        t = time.monotonic()
        self.servers.pop(i).shutdown()
        self.clients.pop(i, None)
        return t


def simulator(conn: Connection, spec: SimSpec) -> None:
    """A simulator process's main: start its replicas, then answer the bench's commands
    (`round` STEP, `kill` INDEX, `stop`) until told to stop."""
    _stderr_to(spec.log)
    procs.die_with_parent()  # a bench killed outright takes its simulators with it
    if spec.tokio_threads:  # read by each runtime the Rust code builds
        os.environ["TOKIO_WORKER_THREADS"] = str(spec.tokio_threads)
    if spec.quiet:  # read when torchft's Rust logger starts, at the first ManagerServer
        os.environ["RUST_LOG"] = "warn"
    try:
        reps = Replicas(load_torchft(spec.ext), spec)
        conn.send(("ready", os.getpid()))
        while True:
            cmd, arg = conn.recv()
            if cmd == "round":
                conn.send(("round", reps.round(arg)))
            elif cmd == "kill":
                conn.send(("killed", reps.shut_down(arg)))
            else:
                return
    except (EOFError, KeyboardInterrupt):
        return
    except Exception as e:  # noqa: BLE001 - the bench reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))


# --------------------------------------------------------------------------------------------
# The bench's side


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Round:
    """One quorum round as the bench saw it."""

    step: int
    asked: float  # monotonic, just before the first simulator was told
    done: dict[int, float] = field(default_factory=dict)
    qid: dict[int, int] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.done.values()) - self.asked


@dataclass
class Worker:
    """A simulator process, the bench's end of its pipe, its replicas and its stderr file."""

    proc: Any  # a multiprocessing Process
    conn: Connection
    indices: range
    log: Path
    logs_info: bool = True  # its replicas log as torchft does (the replica-log figures)


class Fleet:
    """The simulator processes, and what they answered."""

    def __init__(self) -> None:
        self.workers: list[Worker] = []
        self.members: dict[int, frozenset[int]] = {}  # quorum id -> replica indices
        self.live: set[int] = set()
        self.dropped: set[int] = set()  # live replicas a quorum left out
        self.unanswered = 0
        self.step = 0

    def spawn(self, spec: dict[str, Any], n: int, nprocs: int, logs: Path,
              logging_procs: int = 0) -> None:  # fmt: skip
        """Start the simulators of replicas 0..n-1 (each one noted at once, so that `stop`
        finds it whatever fails after). Only the first `logging_procs` (0: all) log torchft's
        INFO lines: each replica's quorum line lists every member, so N replicas on one
        machine format N x N members a round, work a real array spreads over N nodes; the
        replica-log figures come from those that log."""
        ctx = mp.get_context("spawn")  # no fork of a process with threads
        for k, part in enumerate(split(n, nprocs)):
            log = logs / f"sim-{k}.err"
            info = not logging_procs or k < logging_procs
            ours, theirs = ctx.Pipe()
            p = ctx.Process(target=simulator, args=(theirs, SimSpec(indices=part, log=str(log),
                            quiet=not info, **spec)), name=f"lh-sim-{k}", daemon=True)  # fmt: skip
            p.start()
            theirs.close()
            self.workers.append(Worker(p, ours, part, log, info))
            self.live.update(part)

    def _reply(self, w: Worker, timeout: float) -> tuple[str, Any]:
        """The next message of `w`; an error when it died, failed or did not answer."""
        ready = wait([w.conn, w.proc.sentinel], timeout)
        if w.conn not in ready:
            why = "exited" if ready else f"did not answer in {timeout:g} s"
            raise RuntimeError(f"simulator {w.proc.name} {why}; see {w.log}")
        kind, value = w.conn.recv()
        if kind == "error":
            raise RuntimeError(f"simulator {w.proc.name}: {value}; see {w.log}")
        return kind, value

    def ready(self, timeout: float) -> float:
        """Wait until every simulator started its replicas; when the last one did."""
        for w in self.workers:
            self._reply(w, timeout)
        return time.monotonic()

    def round(self) -> Round:
        """Every live replica asks for a quorum at the next step; the answers, checked."""
        r = Round(self.step, time.monotonic())
        self.step += 1
        for w in self.workers:
            w.conn.send(("round", r.step))
        for w in self.workers:
            _, got = self._reply(w, QUORUM_TIMEOUT_S + REPLY_SLACK_S)
            r.done.update(got["done"])
            r.qid.update(got["qid"])
            r.errors.update(got["errors"])
            self.members.update({q: frozenset(m) for q, m in got["members"].items()})
        return r

    def full(self, r: Round) -> bool:
        """Every live replica answered, each with a quorum of all of them."""
        return not r.errors and all(self.members[q] == self.live for q in set(r.qid.values()))

    def count(self, r: Round) -> None:
        """Note the live replicas a quorum of `r` left out, and the calls that failed."""
        self.unanswered += len(r.errors)
        for q in set(r.qid.values()):
            self.dropped |= self.live - self.members[q]

    def kill(self, i: int) -> float:
        """Shut replica `i`'s ManagerServer down; when that happened."""
        w = next(w for w in self.workers if i in w.indices)
        w.conn.send(("kill", i))
        _, t = self._reply(w, REPLY_SLACK_S)
        self.live.discard(i)
        return t

    def log_sizes(self) -> list[int]:
        return [size(w.log) for w in self.workers]

    def stop(self) -> None:
        """SIGKILL every simulator still running (its replicas with it) and reap it."""
        alive = [w.proc for w in self.workers if w.proc.is_alive()]
        procs.kill_pids([p.pid for p in alive], signal.SIGKILL)
        for w in self.workers:
            w.proc.join(10)
            w.conn.close()


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_growth(path: Path, before: int) -> int:
    """Bytes written to a log since it was `before` bytes long, also across one rotation (the
    launcher renames it to <log>.1 past its cap and goes on in a new file)."""
    now = size(path)
    if now >= before:
        return now - before
    return max(0, size(path.with_name(path.name + ".1")) - before) + now


def read_window(path: Path, start: int, end: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of `path` from `start` to `end`, in pieces."""
    with path.open("rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(chunk, left))
            if not data:
                return
            left -= len(data)
            yield data


def replica_log_figures(fleet: Fleet, before: list[int], after: list[int], n: int,
                        rounds: int) -> dict[str, float | str]:  # fmt: skip
    """Replica log bytes per replica per step over the window, raw and filtered, over the
    replicas that log (Fleet.spawn)."""
    logging = [i for i, w in enumerate(fleet.workers) if w.logs_info]
    fleet_workers = [fleet.workers[i] for i in logging]
    before, after = [before[i] for i in logging], [after[i] for i in logging]
    steps = sum(len(w.indices) for w in fleet_workers) * rounds
    raw = sum(a - b for a, b in zip(after, before, strict=True))
    out: dict[str, float | str] = {"raw": round(raw / steps, 1), "filtered": "n/a"}
    make = filter_factory()
    if make is not None:
        kept = sum(filtered_bytes(lines_of(read_window(w.log, b, a)), make,
                                  seen=lines_of(read_window(w.log, 0, b)))
                   for w, b, a in zip(fleet_workers, before, after, strict=True))  # fmt: skip
        out["filtered"] = round(kept / steps, 1)
    return out


def log_filter_switch() -> bool | None:
    """FTSLURM_LOG_FILTER as `lighthouse start` reads it: whether the launcher folds the
    Lighthouse's log (None: this ftslurm has no such switch, and writes it whole)."""
    if "FTSLURM_LOG_FILTER" not in knobs.KNOBS:
        return None
    return bool(knobs.environ()["FTSLURM_LOG_FILTER"])


def proc_status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def port_holder(pids: list[int], port: int) -> int | None:
    """The one of `pids` that has the listening socket of `port` open."""
    targets = {f"socket:[{i}]" for i in ports.listening_inodes(port)}
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    return pid
            except OSError:
                continue
    return None


def lighthouse_memory(info: lh.LighthouseInfo) -> dict[str, float | None]:
    """RSS of the port holder, of the launcher's whole tree, and the holder's peak, in MB."""
    tree = procs.process_tree(info.pid)
    holder = port_holder(tree, info.port) or info.pid
    mb = lambda kb: None if kb is None else round(kb / 1024, 1)  # noqa: E731
    status = proc_status(holder)
    return {
        "rss": mb(vm_kb(status, "VmRSS")),
        "tree": mb(sum(vm_kb(proc_status(p), "VmRSS") or 0 for p in tree)),
        "peak": mb(vm_kb(status, "VmHWM")),
    }


def ftslurm_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("ftslurm")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ftslurm"]


@dataclass
class CliTimes:
    status_s: list[float] = field(default_factory=list)
    json_s: list[float] = field(default_factory=list)
    metrics_s: list[float] = field(default_factory=list)
    live_json_s: list[float] = field(default_factory=list)
    page_age_s: list[float] = field(default_factory=list)  # of the copies the commands read
    page_from: list[str] = field(default_factory=list)
    live_ok: list[bool] = field(default_factory=list)
    json_bytes: int = 0
    text_lines: int = 0
    up: list[bool] = field(default_factory=list)


def time_cli(state: Path, work: Path, repeats: int) -> CliTimes:
    """Time the status commands, as a user on the login node runs them."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "FTSLURM_LIGHTHOUSE_DIR": str(state), "PYTHONPATH": path,
           "FTSLURM_OUTPUTS": str(work / "outputs"), "FTSLURM_EVENTS": str(work / "events.jsonl")}
    base = ftslurm_cmd()
    out = CliTimes()

    def timed(args: list[str]) -> tuple[float, str]:
        t = time.perf_counter()
        done = runner.run([*base, *args], env=env, cwd=work, timeout=300)
        return time.perf_counter() - t, done.stdout

    def status_text() -> None:
        dt, text = timed(["lighthouse", "status"])
        out.status_s.append(dt)
        out.text_lines = len(text.splitlines())

    def status_json() -> None:
        dt, text = timed(["lighthouse", "status", "--json"])
        out.json_s.append(dt)
        out.json_bytes = len(text.encode())
        st = json.loads(text or "{}")
        out.page_from.append(str(st.get("page_from")))
        if st.get("page_age_s") is not None:
            out.page_age_s.append(float(st["page_age_s"]))

    def live_json() -> None:  # the control: the page read from the Lighthouse itself
        if not has_live:
            return
        dt, text = timed(["lighthouse", "status", "--json", "--live"])
        out.live_json_s.append(dt)
        out.live_ok.append(bool(json.loads(text or "{}").get("http_ok")))

    def metrics_show() -> None:
        dt, text = timed(["metrics", "show"])
        out.metrics_s.append(dt)
        out.up.append(lighthouse_up(text))

    has_live = "--live" in runner.run([*base, "lighthouse", "status", "--help"], env=env,
                                      cwd=work, timeout=60).stdout  # fmt: skip
    order = [status_text, status_json, live_json, metrics_show]
    for i in range(repeats):  # the order rotated each repeat
        for measure in order[i % len(order):] + order[: i % len(order)]:
            measure()
    return out


def rounds_meanwhile(fleet: Fleet, busy: Callable[[], Any], step_s: float
                     ) -> tuple[Any, list[Round]]:  # fmt: skip
    """Run `busy()` here while another thread keeps the quorum rounds going, one started
    every `step_s` seconds (back to back when a round takes longer, as a Manager whose step is
    done waits for its quorum); its result and the rounds that ran."""
    stop = threading.Event()
    done: list[Round] = []
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            while not stop.is_set():
                r = fleet.round()
                done.append(r)
                stop.wait(max(0.0, r.asked + step_s - time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            errors.append(e)

    t = threading.Thread(target=drive, name="rounds", daemon=True)
    t.start()
    try:
        result = busy()
    finally:
        stop.set()
        t.join(QUORUM_TIMEOUT_S + REPLY_SLACK_S)
    if errors:
        raise errors[0]
    return result, done


@dataclass
class Options:
    rounds: int
    procs: int | None
    heartbeat_timeout_ms: int
    cli_repeats: int
    step_s: float
    tokio_threads: int
    work: Path
    logging_procs: int = 1
    join_timeout_ms: int = LighthouseConfig.join_timeout_ms


def first_quorum(fleet: Fleet, started: float) -> float:
    """Rounds until one holds all N; seconds from `started` to its last answer."""
    for _ in range(FIRST_QUORUM_ROUNDS):
        r = fleet.round()
        if fleet.full(r):
            return max(r.done.values()) - started
    raise RuntimeError(f"no quorum of all {len(fleet.live)} replicas in {FIRST_QUORUM_ROUNDS} "
                       "rounds")  # fmt: skip


def failure(fleet: Fleet, victim: int) -> float:
    """Shut `victim` down between two steady rounds; seconds to the answers of the first
    quorum without it."""
    t = fleet.kill(victim)
    for _ in range(FIRST_QUORUM_ROUNDS):  # the next quorum leaves it out: it never asks again
        r = fleet.round()
        fleet.count(r)
        if r.qid and all(victim not in fleet.members[q] for q in set(r.qid.values())):
            return max(r.done.values()) - t
    raise RuntimeError(f"replica {victim} still in the quorum {FIRST_QUORUM_ROUNDS} rounds "
                       "after it was shut down")  # fmt: skip


def run_once(n: int, opt: Options, tag: str) -> dict[str, Any]:
    """One Lighthouse, N replicas, every figure once."""
    ext = lh.torchft_extension()
    if ext is None:
        raise UserError("torchft's compiled module (_torchft*.so) not found: pip install "
                        "torchft-nightly")  # fmt: skip
    work = opt.work / tag
    state, logs = work / "lighthouse", work / "replica-logs"
    logs.mkdir(parents=True)
    nprocs = len(split(n, opt.procs or default_procs(n)))
    out: dict[str, Any] = {"load_before": [round(x, 2) for x in os.getloadavg()],
                           "join_timeout_ms": opt.join_timeout_ms,
                           "lighthouse_log_filter": log_filter_switch()}
    progress(f"N={n} ({tag}): starting the Lighthouse in {state}")
    info = lh.start(bind="127.0.0.1:0", state_dir=state, join_timeout_ms=opt.join_timeout_ms,
                    heartbeat_timeout_ms=opt.heartbeat_timeout_ms)  # fmt: skip
    fleet = Fleet()
    try:
        progress(f"N={n}: {n} replicas in {nprocs} simulator process(es) -> {info.address}")
        fleet.spawn({"ext": str(ext), "lighthouse": info.address,
                     "tokio_threads": opt.tokio_threads}, n, nprocs, logs,
                    opt.logging_procs)  # fmt: skip
        started = fleet.ready(QUORUM_TIMEOUT_S)
        out["first_quorum_s"] = first_quorum(fleet, started)
        progress(f"N={n}: first quorum of all after {out['first_quorum_s']:.2f} s")
        out.update(steady(fleet, info, opt, n))
        progress(f"N={n}: timing the status commands, {opt.cli_repeats} each, rounds going on")
        cli, more = rounds_meanwhile(fleet, lambda: time_cli(state, work, opt.cli_repeats),
                                     opt.step_s)  # fmt: skip
        for r in more:
            fleet.count(r)
        out["cli"], out["cli_rounds"] = cli, len(more)
        # said now: a run stopped later (a failure phase stuck on a starved machine) keeps them
        progress(f"N={n}: lighthouse status {_fmt(spread(cli.status_s), ' s')}; --json "
                 f"{_fmt(spread(cli.json_s), ' s')} (page from {sorted(set(cli.page_from))}, "
                 f"age {_fmt(spread(cli.page_age_s), ' s')}); --live "
                 f"{_fmt(spread(cli.live_json_s), ' s')}; metrics show "
                 f"{_fmt(spread(cli.metrics_s), ' s')} (up {cli.up}); {len(more)} rounds")
        progress(f"N={n}: shutting replica {n - 1} down")
        out["failure_to_quorum_s"] = failure(fleet, n - 1)
        fleet.count(fleet.round())  # one steady round without it
        out["live_replicas_dropped"] = len(fleet.dropped)
        out["unanswered"] = fleet.unanswered
        out["lighthouse_peak_rss_mb"] = lighthouse_memory(info)["peak"]
    finally:
        fleet.stop()
        progress(f"N={n}: stopping the Lighthouse: {lh.stop(state, grace=5)}")
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["procs"], out["tokio_threads"] = nprocs, opt.tokio_threads
    out["logging_procs"] = opt.logging_procs
    return out


def steady(fleet: Fleet, info: lh.LighthouseInfo, opt: Options, n: int) -> dict[str, Any]:
    """The measured rounds: their times, and what the logs and the Lighthouse grew by."""
    lh_log = Path(info.log_path)
    lh_before, sim_before = size(lh_log), fleet.log_sizes()
    rounds = [fleet.round() for _ in range(opt.rounds)]
    lh_bytes, sim_after = log_growth(lh_log, lh_before), fleet.log_sizes()
    for r in rounds:
        fleet.count(r)
    mem = lighthouse_memory(info)
    figures = {
        "round_s": [r.seconds for r in rounds],
        "lighthouse_rss_mb": mem["rss"], "lighthouse_tree_rss_mb": mem["tree"],
        "lighthouse_log_bytes_per_round": round(lh_bytes / opt.rounds, 1),
        "replica_log": replica_log_figures(fleet, sim_before, sim_after, n, opt.rounds),
    }  # fmt: skip
    for w in fleet.workers:  # counted: emptied, the writers append on (O_APPEND)
        os.truncate(w.log, 0)
    progress(f"N={n}: {opt.rounds} rounds, median {statistics.median(figures['round_s']):.3f} s")
    return figures


def versions() -> dict[str, str | None]:
    def v(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {"torchft": v("torchft-nightly") or v("torchft"), "ftslurm": v("ftslurm"),
            "python": sys.version.split()[0]}  # fmt: skip


def pooled(n: int, runs: list[dict[str, Any]], hb_ms: int, rounds: int) -> dict[str, Any]:
    """The figures of one N over its repeats: each a median/min/max of what was measured."""
    cli = [r["cli"] for r in runs]
    filt = [r["replica_log"]["filtered"] for r in runs]
    return {
        "replicas": n, "rounds": rounds, "repeats": len(runs), "procs": runs[0]["procs"],
        "tokio_threads": runs[0]["tokio_threads"],
        "logging_procs": runs[0]["logging_procs"],
        "first_quorum_s": spread(r["first_quorum_s"] for r in runs),
        "round_s": spread(x for r in runs for x in r["round_s"]),
        "lighthouse_rss_mb": spread(r["lighthouse_rss_mb"] for r in runs if r["lighthouse_rss_mb"]),
        "lighthouse_tree_rss_mb": spread(r["lighthouse_tree_rss_mb"] for r in runs),
        "lighthouse_peak_rss_mb": spread(r["lighthouse_peak_rss_mb"] for r in runs
                                         if r["lighthouse_peak_rss_mb"]),
        "failure_to_quorum_s": spread(r["failure_to_quorum_s"] for r in runs),
        "heartbeat_timeout_ms": hb_ms,
        "join_timeout_ms": runs[0].get("join_timeout_ms"),
        "live_replicas_dropped": sum(r["live_replicas_dropped"] for r in runs),
        "unanswered": sum(r["unanswered"] for r in runs),
        "lighthouse_log_bytes_per_round": spread(r["lighthouse_log_bytes_per_round"] for r in runs),
        "lighthouse_log_filter": runs[0]["lighthouse_log_filter"],
        "replica_log_bytes_per_replica_step": {
            "raw": spread(r["replica_log"]["raw"] for r in runs),
            "filtered": "n/a" if "n/a" in filt else spread(filt),
        },
        "status_cmd_s": spread(x for c in cli for x in c.status_s),
        "status_json_s": spread(x for c in cli for x in c.json_s),
        "metrics_show_s": spread(x for c in cli for x in c.metrics_s),
        "status_live_json_s": spread(x for c in cli for x in c.live_json_s),
        "status_live_ok": sum(ok for c in cli for ok in c.live_ok),
        "status_page_age_s": spread(x for c in cli for x in c.page_age_s),
        "status_page_from": sorted({x for c in cli for x in c.page_from}),
        "status_json_bytes": max(c.json_bytes for c in cli),
        "status_text_lines": max(c.text_lines for c in cli),
        "lighthouse_up": all(all(c.up) for c in cli) and any(c.up for c in cli),
        "rounds_during_cli": sum(r["cli_rounds"] for r in runs),
        "load_before": runs[0]["load_before"], "load_after": runs[-1]["load_after"],
        "cpus": os.cpu_count(), "versions": versions(),
    }  # fmt: skip


def measure(n: int, repeats: int, opt: Options) -> dict[str, Any]:
    runs = [run_once(n, opt, f"n{n}-r{k}") for k in range(repeats)]
    return pooled(n, runs, opt.heartbeat_timeout_ms, opt.rounds)


# --------------------------------------------------------------------------------------------
# Output


def _fmt(s: Any, unit: str = "") -> str:
    if not isinstance(s, dict):
        return str(s)
    if s["n"] == 1:
        return f"{s['median']:g}{unit}"
    return f"{s['median']:g}{unit} (min {s['min']:g}, max {s['max']:g}, n {s['n']})"


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for n, f in results.items():
        rl = f["replica_log_bytes_per_replica_step"]
        rows += [
            f"N = {n}: {f['procs']} simulator process(es) ({f['tokio_threads']} Rust runtime "
            f"workers a replica), {f['rounds']} rounds x "
            f"{f['repeats']} repeat(s); {f['cpus']} CPUs, load {f['load_before']} -> "
            f"{f['load_after']}; torchft {f['versions']['torchft']}",
            f"  first_quorum_s                      {_fmt(f['first_quorum_s'], ' s')}",
            f"  round_s                             {_fmt(f['round_s'], ' s')}",
            f"  failure_to_quorum_s                 {_fmt(f['failure_to_quorum_s'], ' s')}"
            f"  (heartbeat timeout {f['heartbeat_timeout_ms']} ms, join timeout "
            f"{f.get('join_timeout_ms')} ms)",
            f"  live replicas dropped / unanswered  {f['live_replicas_dropped']} / "
            f"{f['unanswered']}",
            f"  lighthouse_rss_mb                   {_fmt(f['lighthouse_rss_mb'], ' MB')}"
            f"  (tree {_fmt(f['lighthouse_tree_rss_mb'], ' MB')}, peak "
            f"{_fmt(f['lighthouse_peak_rss_mb'], ' MB')})",
            f"  lighthouse_log_bytes_per_round      {_fmt(f['lighthouse_log_bytes_per_round'])}"
            f"  (FTSLURM_LOG_FILTER: {f['lighthouse_log_filter']})",
            f"  replica log bytes / replica / step  raw {_fmt(rl['raw'])}, "
            f"filtered: {_fmt(rl['filtered'])}",
            f"  status_cmd_s                        {_fmt(f['status_cmd_s'], ' s')}"
            f"  ({f['status_text_lines']} lines)",
            f"  status --json                       {_fmt(f['status_json_s'], ' s')}"
            f"  ({f['status_json_bytes']} bytes; page from {f['status_page_from']},"
            f" age {_fmt(f['status_page_age_s'], ' s')})",
            f"  status --json --live (control)      {_fmt(f['status_live_json_s'], ' s')}"
            f"  (page came {f['status_live_ok']} time(s))",
            f"  metrics_show_s                      {_fmt(f['metrics_show_s'], ' s')}"
            f"  (lighthouse_up: {f['lighthouse_up']})",
        ]  # fmt: skip
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--replicas", default="64,256", help="N per run, comma separated")
    ap.add_argument("--rounds", type=int, default=10, help="quorum rounds measured per run")
    ap.add_argument("--repeats", type=int, default=1, help="runs per N, each from scratch")
    ap.add_argument("--heartbeat-timeout-ms", type=int,
                    default=LighthouseConfig.heartbeat_timeout_ms)  # fmt: skip
    ap.add_argument("--join-timeout-ms", type=int, default=LighthouseConfig.join_timeout_ms,
                    help="the Lighthouse's --join-timeout-ms: how long a quorum waits for "
                    "the heartbeating replicas that have not asked yet; a round longer than "
                    "this splits the array (half of it forms a quorum)")
    ap.add_argument("--procs", type=int, default=None,
                    help=f"simulator processes (default: one per {PER_PROC} replicas)")
    ap.add_argument("--cli-repeats", type=int, default=5, help="runs of each status command")
    ap.add_argument("--step-s", type=float, default=1.0,
                    help="a step's length while the status commands are timed: one quorum "
                    "round started this often (0: back to back)")
    ap.add_argument("--tokio-threads", type=int, default=2,
                    help="runtime workers of each simulated ManagerServer (0: torchft's "
                    "default, one per CPU: N x CPUs threads on this one machine)")
    ap.add_argument("--logging-procs", type=int, default=1,
                    help="simulator processes whose replicas log torchft's INFO lines (the "
                    "replica-log figures; 0: all). The others run with RUST_LOG=warn: on one "
                    "machine N replicas' quorum lines are N x N members a round to format")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="where state and logs go (default: a temporary folder, removed)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


def check(a: argparse.Namespace) -> list[int]:
    ns = parse_replicas(a.replicas)
    for name in ("rounds", "repeats", "cli_repeats"):
        if getattr(a, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if a.procs is not None and a.procs < 1:
        raise UserError("--procs must be at least 1")
    if a.tokio_threads < 0:
        raise UserError("--tokio-threads must be 0 or more")
    if not 0 <= a.step_s <= 3600:
        raise UserError("--step-s must be from 0 to 3600")
    check_heartbeat_timeout(a.heartbeat_timeout_ms)
    if not 0 <= a.join_timeout_ms <= 3_600_000:
        raise UserError("--join-timeout-ms must be from 0 to 3600000")
    return ns


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # the finally blocks stop what was started


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        ns = check(a)
    except UserError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="lh-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    opt = Options(a.rounds, a.procs, a.heartbeat_timeout_ms, a.cli_repeats, a.step_s,
                  a.tokio_threads, work, a.logging_procs, a.join_timeout_ms)  # fmt: skip
    try:
        results = {str(n): measure(n, a.repeats, opt) for n in ns}
    except UserError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # a simulator failed or hung: said in one line, its log named
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress("interrupted: everything started is stopped")
        return 130
    finally:
        if a.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2) if a.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
