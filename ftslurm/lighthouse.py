"""torchft's Lighthouse as a managed daemon, and a parser of its HTTP status page.

The Lighthouse is the one process every replica of an FT job talks to, so on a Slurm cluster
it runs on the login node, started once and left running across jobs. This module starts the
real Lighthouse from torchft (never a reimplementation) detached, with its stderr in a log
file, a pidfile and a state file in one directory (`ftslurm.paths.lighthouse_dir()`), waits
until it answers HTTP, and prints the address job scripts need.

How it is launched. torchft's `torchft_lighthouse` console script is three lines that call
`torchft._torchft.lighthouse_main()` (compiled Rust), but importing `torchft._torchft` runs
`torchft/__init__.py`, which imports torch: ~3 s of a 2-core machine before the Rust code
starts. By default we write a tiny launcher into the state directory that loads the same
compiled extension module from torchft's install directory without running the package
`__init__`, and calls the same `lighthouse_main()` with the same arguments (~0.1 s). The
process shows as `python .../torchft_lighthouse <args>`. `binary=`/`--binary` (or
`FTSLURM_LIGHTHOUSE_BIN`) runs a given executable instead, e.g. the console script itself.

Python API (used by the CLI, the tests and the demo): `start`, `stop`, `status`, `restart`,
`parse_status_html`. Errors a user can fix are `UserError` (one line, no traceback).
"""

from __future__ import annotations

import contextlib
import errno
import html
import importlib.util
import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from ftslurm import daemon, procs
from ftslurm.errors import UserError
from ftslurm.paths import lighthouse_dir

NAME = "lighthouse"
MARKER = "torchft_lighthouse"  # in the command line of both launchers (pid-reuse check)
DEFAULT_PORT = 29510
DEFAULT_MIN_REPLICAS = 1
DEFAULT_QUORUM_TICK_MS = 100
DEFAULT_JOIN_TIMEOUT_MS = 10000
DEFAULT_LOG_MAX_MB = 64.0
DEFAULT_READY_TIMEOUT_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
_ADDR_IN_USE = "Address already in use"
_LISTENING_RE = re.compile(r"Lighthouse listening on: (\S+)")


# --------------------------------------------------------------------------------------------
# Configuration and addresses (pure)


def default_bind_host() -> str:
    """`[::]` (what the binary binds by default: IPv4 and IPv6) where the kernel has IPv6,
    else `0.0.0.0` (binding `[::]` fails on hosts with IPv6 disabled)."""
    try:
        has_v6 = bool(Path("/proc/net/if_inet6").read_text().strip())
    except OSError:
        has_v6 = False
    return "[::]" if has_v6 else "0.0.0.0"


def parse_bind(bind: str | None) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT` -> (host without brackets, port).

    An empty host means the default wildcard host; port 0 means "any free port".
    """
    if bind is None or bind.strip() == "":
        return _unbracket(default_bind_host()), DEFAULT_PORT
    bind = bind.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.%\w]*)\](?::(\d+))?", bind)
    if m:
        host, port_s = m.group(1), m.group(2)
    elif bind.isdigit():
        host, port_s = "", bind
    elif bind.count(":") == 1:
        host, port_s = bind.split(":")
        if port_s == "":
            port_s = str(DEFAULT_PORT)
    elif ":" not in bind:
        host, port_s = bind, str(DEFAULT_PORT)
    else:
        raise UserError(f"--bind {bind!r}: use HOST:PORT, [IPV6]:PORT or :PORT")
    if not port_s or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise UserError(f"--bind {bind!r}: the port must be a number from 0 to 65535")
    if host == "":
        host = _unbracket(default_bind_host())
    return host, int(port_s)


def format_bind(host: str, port: int) -> str:
    """The `--bind` argument for the binary: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _unbracket(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _is_wildcard(host: str) -> bool:
    return host in WILDCARD_HOSTS


def advertised_host(bind_host: str, advertise: str | None = None) -> str:
    """The host name compute nodes use to reach the Lighthouse.

    `advertise` wins; a specific bind address is the only one that answers, so it is used;
    otherwise this machine's hostname (on the local test cluster: `--advertise login-0`).
    """
    if advertise:
        return advertise
    if not _is_wildcard(bind_host):
        return f"[{bind_host}]" if ":" in bind_host else bind_host
    return socket.gethostname()


def probe_host(bind_host: str) -> str:
    """Where this machine reaches the Lighthouse for the readiness check and `status`."""
    if _is_wildcard(bind_host):
        return "127.0.0.1"
    return f"[{bind_host}]" if ":" in bind_host else bind_host


@dataclass(frozen=True)
class LighthouseConfig:
    """The Lighthouse's arguments. Defaults follow the cluster guide:
    `--min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000`, port 29510."""

    bind: str = f":{DEFAULT_PORT}"
    min_replicas: int = DEFAULT_MIN_REPLICAS
    quorum_tick_ms: int = DEFAULT_QUORUM_TICK_MS
    join_timeout_ms: int = DEFAULT_JOIN_TIMEOUT_MS
    heartbeat_timeout_ms: int | None = None  # None: the binary's default (5000 ms)
    advertise: str | None = None

    def validate(self) -> None:
        parse_bind(self.bind)
        for name in ("min_replicas", "quorum_tick_ms", "join_timeout_ms"):
            if getattr(self, name) < (1 if name == "min_replicas" else 0):
                raise UserError(f"--{name.replace('_', '-')} must be positive")
        if self.heartbeat_timeout_ms is not None and self.heartbeat_timeout_ms <= 0:
            raise UserError("--heartbeat-timeout-ms must be positive")

    def args(self) -> list[str]:
        """Arguments of `torchft_lighthouse` (its flags use underscores)."""
        host, port = parse_bind(self.bind)
        out = [
            "--bind", format_bind(host, port),
            "--min_replicas", str(self.min_replicas),
            "--quorum_tick_ms", str(self.quorum_tick_ms),
            "--join_timeout_ms", str(self.join_timeout_ms),
        ]  # fmt: skip
        if self.heartbeat_timeout_ms is not None:
            out += ["--heartbeat_timeout_ms", str(self.heartbeat_timeout_ms)]
        return out


# --------------------------------------------------------------------------------------------
# Launching the real binary


_LAUNCHER = '''\
#!{python}
# Written by ftslurm (ftslurm/lighthouse.py). Runs torchft's own Lighthouse entry point,
# torchft._torchft.lighthouse_main -- the function the `torchft_lighthouse` console script
# calls -- loading the compiled module directly so the torchft package __init__ (which
# imports torch, ~3 s) is skipped. Same code, same arguments (read from argv by the Rust side).
#
# Started by `ftslurm lighthouse start` (FTSLURM_LIGHTHOUSE_LOG set), the Lighthouse runs in a
# child whose output comes through a pipe; this process appends it to the log and, when the log
# passes FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES, renames it to <log>.1 (replacing the older one) at a
# line end and goes on in a new file: a Lighthouse left running for weeks keeps a bounded log
# (at most about twice the cap) whose two files hold the newest lines, whole.
# (lighthouse_main holds the GIL while it runs, so a thread beside it could not do this.)
import importlib.util
import os
import signal
import sys


def lighthouse():
    spec = importlib.util.spec_from_file_location("torchft._torchft", {ext!r})
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.lighthouse_main()


def write_all(data):
    while data:
        data = data[os.write(1, data):]


def rotate(log):
    """Rename the log to .1 and go on in a new one; on any error go on in the same file (the
    Lighthouse must never die of its log)."""
    try:
        fd = os.open(log + ".new", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return
    try:
        os.replace(log, log + ".1")
        os.replace(log + ".new", log)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    except OSError:
        try:
            os.unlink(log + ".new")  # not left beside the log for every failed try
        except OSError:
            pass
    finally:
        os.close(fd)


def main():
    log = os.environ.pop("FTSLURM_LIGHTHOUSE_LOG", "")
    cap = int(os.environ.pop("FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES", "0") or 0)
    if not log or cap <= 0:
        return lighthouse()
    r, w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: die with the writer
        if os.getppid() != parent:
            os._exit(1)
        sys.exit(lighthouse())
    os.close(w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
    size = os.fstat(1).st_size
    while True:
        data = os.read(r, 1 << 16)
        if not data:
            break
        cut = data.rfind(b"\\n") + 1
        if size + len(data) > cap and cut:
            write_all(data[:cut])
            rotate(log)
            write_all(data[cut:])
            size = len(data) - cut
        else:
            write_all(data)
            size += len(data)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


sys.exit(main())
'''


def _torchft_extension() -> Path | None:
    """Path of torchft's compiled `_torchft` module, found without importing torchft."""
    try:
        spec = importlib.util.find_spec("torchft")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        for cand in sorted(Path(loc).glob("_torchft*.so")):
            return cand
    return None


def _effective_binary(binary: str | None) -> str | None:
    return binary or os.environ.get("FTSLURM_LIGHTHOUSE_BIN") or None


def lighthouse_command(state_dir: Path, binary: str | None = None) -> list[str]:
    """The command (without Lighthouse arguments) that runs torchft's Lighthouse.

    `binary` (or FTSLURM_LIGHTHOUSE_BIN): an executable such as `torchft_lighthouse`. Default:
    the fast launcher (see the module docstring), else the console script on PATH.
    """
    binary = _effective_binary(binary)
    if binary:
        path = shutil.which(binary)
        if path is None:
            raise UserError(f"Lighthouse binary {binary!r} not found (not on PATH, not a file)")
        return [path]
    ext = _torchft_extension()
    if ext is not None:
        launcher = state_dir / MARKER
        text = _LAUNCHER.format(python=sys.executable, ext=str(ext))
        if not launcher.exists() or launcher.read_text() != text:
            launcher.write_text(text)
        return [sys.executable, str(launcher)]
    # torchft not importable from this Python: maybe another environment provides the script.
    script = shutil.which("torchft_lighthouse")
    if script is None:
        raise UserError(
            "torchft is not installed: `pip install torchft-nightly` (or `pip install "
            "'ftslurm[cpu]'`), or name the binary with --binary / FTSLURM_LIGHTHOUSE_BIN"
        )
    return [script]


# --------------------------------------------------------------------------------------------
# Ports


class PortInUse(UserError):
    """The port is held by another program (named when /proc tells us)."""


def port_free(host: str, port: int) -> bool:
    """Can we bind `host:port` right now? Same SO_REUSEADDR as the Lighthouse (tokio), so a
    port with only TIME_WAIT leftovers (a just-stopped Lighthouse) counts as free. Port 0
    checks only the host (an address of this machine): a UserError if it is not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = "::" if host in ("::", "[::]") else host
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # dual-stack like `[::]`: also collides with IPv4 listeners
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((bind_host, port))
            s.listen(1)
    except socket.gaierror as e:  # before OSError: a subclass
        raise UserError(
            f"--bind {format_bind(host, port)}: cannot resolve {host!r} ({e.strerror}); give "
            "an address or host name of this machine, or :PORT for all interfaces"
        ) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return False
        if e.errno == errno.EADDRNOTAVAIL:
            raise UserError(f"--bind {format_bind(host, port)}: {host} is not an address "
                            "of this machine") from e
        if e.errno == errno.EACCES:
            raise UserError(f"port {port}: permission denied (ports < 1024 need root)") from e
        raise
    return True


def listening_inodes(port: int) -> set[int]:
    """Socket inodes in LISTEN state on TCP `port` (any address), from /proc/net/tcp{,6}."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A = TCP_LISTEN
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(parts[9]))
    return inodes


def port_owner(port: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes listening on TCP `port`.

    Matches /proc/net/tcp inodes against /proc/*/fd links; other users' processes are only
    visible to root, so this may be empty even when the port is taken.
    """
    inodes = listening_inodes(port)
    if not inodes:
        return []
    targets = {f"socket:[{i}]" for i in inodes}
    owners: list[tuple[int, str]] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    owners.append((int(proc.name), daemon.proc_cmdline(int(proc.name))))
                    break
            except OSError:
                continue
    return owners


def port_in_use_error(host: str, port: int) -> PortInUse:
    """A one-line error naming the port and, when known, its owner."""
    owners = port_owner(port)
    where = format_bind(host, port)
    if owners:
        who = "; ".join(f"pid {pid} ({_short(cmd)})" for pid, cmd in owners)
        hint = ""
        managed = [m.group(1) for _, cmd in owners
                   if (m := re.search(r"(\S+)/" + MARKER + r"\s", cmd))
                   and Path(m.group(1), f"{NAME}.json").exists()]  # fmt: skip
        if managed:
            hint = (f" -- the managed Lighthouse of state dir {managed[0]}; stop it with "
                    f"`ftslurm lighthouse stop --state-dir {managed[0]}` or choose another "
                    "port with --bind")
        elif any(MARKER in cmd for _, cmd in owners):
            hint = (" -- another Lighthouse, not managed from this state directory; stop it or "
                    "choose another port with --bind")
        else:
            hint = "; choose another port with --bind HOST:PORT"
        return PortInUse(f"port {port} ({where}) is already in use by {who}{hint}")
    why = ("no process of this machine holds it now: one may be exiting (try again in a few "
           "seconds), or a container sharing this network holds it"
           if os.geteuid() == 0 else "not visible to this user")
    return PortInUse(
        f"port {port} ({where}) is already in use (owner unknown: {why}); "
        "choose another port with --bind HOST:PORT"
    )


def _short(cmd: str, n: int = 100) -> str:
    return cmd if len(cmd) <= n else cmd[: n - 3] + "..."


# --------------------------------------------------------------------------------------------
# The HTTP status page (pure parser + fetch)


@dataclass
class Member:
    """A participant of the previous quorum, as the /status page shows it."""

    replica_id: str
    step: int | None = None
    manager: str | None = None
    store: str | None = None
    world_size: int | None = None
    recovering: bool = False


@dataclass
class Heartbeat:
    """A replica id the Lighthouse has heard from (dead ids stay listed, marked old)."""

    replica_id: str
    age_s: float | None
    old: bool = False


@dataclass
class QuorumPage:
    """What the Lighthouse's /status HTML fragment says (there is no JSON endpoint)."""

    quorum_id: int | None = None
    next_status: str | None = None
    previous_quorum_id: int | None = None
    num_participants: int | None = None
    quorum_age_s: float | None = None
    members: list[Member] = field(default_factory=list)
    heartbeats: list[Heartbeat] = field(default_factory=list)

    @property
    def live_heartbeats(self) -> list[Heartbeat]:
        return [h for h in self.heartbeats if not h.old]


_DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, "m": 60.0}


def parse_duration(text: str) -> float | None:
    """`0.084761762s` (what the page shows), also `84.7ms` etc. (Rust's Debug form) -> s."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|ms|µs|us|ns|m)\s*", text)
    if not m:
        return None
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def _int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _text(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.S)
    return html.unescape(m.group(1).strip()) if m else None


def parse_status_html(page: str) -> QuorumPage:
    """Parse the /status fragment. Pure and lenient: a missing piece is None / empty, never an
    exception (formats drift between nightlies)."""
    q = QuorumPage()
    q.quorum_id = _int(r"Current quorum_id:\s*(\d+)", page)
    q.next_status = _text(r"Next quorum status:\s*(.*?)\s*(?:<br\s*/?>|<h\d|\n\s*\n|$)", page)
    q.previous_quorum_id = _int(r"Previous quorum id:\s*(\d+)", page)
    q.num_participants = _int(r"Num participants:\s*(\d+)", page)
    age = _text(r"Quorum age:\s*([^<\s]+)", page)
    q.quorum_age_s = parse_duration(age) if age else None
    blocks = re.split(r'<div class="member', page)[1:]
    for block in blocks:
        classes, _, body = block.partition(">")
        body = body.split("</div>")[0]
        rid = _text(r"<b>(.*?)</b>", body)
        if rid is None:
            continue
        q.members.append(
            Member(
                replica_id=rid,
                step=_int(r"Step:\s*(-?\d+)", body),
                manager=_text(r"Manager:\s*(\S+?)\s*<br", body),
                store=_text(r"TCPStore:\s*(\S+?)\s*<br", body),
                world_size=_int(r"World size:\s*(\d+)", body),
                recovering="recovering" in classes,
            )
        )
    for m in re.finditer(
        r'<li class="heartbeat([^"]*)">\s*(.*?):\s+seen\s+(\S+)\s+ago\s*</li>', page, re.S
    ):
        q.heartbeats.append(
            Heartbeat(
                replica_id=html.unescape(m.group(2).strip()),
                age_s=parse_duration(m.group(3)),
                old="old" in m.group(1).split(),
            )
        )
    return q


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """GET `url` directly (http_proxy ignored: the Lighthouse is local). Raises OSError."""
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


def _answers(url: str, timeout: float = 1.0) -> bool:
    try:
        return http_get(url, timeout)[0] == 200
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# Lifecycle


@dataclass
class LighthouseInfo:
    """A running Lighthouse, as `start` returns it."""

    pid: int
    address: str  # http://<advertised host>:<port>: what replicas use
    host: str
    port: int
    bind: str  # actual --bind (real port)
    probe_url: str  # where this machine reaches it
    state_dir: str
    log_path: str
    started_at: float
    config: dict[str, Any]
    cmd: list[str]
    already_running: bool = False
    stale_pid: int | None = None  # a stale pidfile that start found and removed
    # option name (as `start` spells it) -> how the running one differs from the request
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def env_line(self) -> str:
        """The line the job scripts need."""
        return f"TORCHFT_LIGHTHOUSE={self.address}"

    @property
    def uptime_s(self) -> float | None:
        return max(0.0, time.time() - self.started_at) if self.started_at else None


@dataclass
class LighthouseStatus:
    """`status`: running or not, and what the Lighthouse says about the quorum."""

    running: bool
    state_dir: str
    log_path: str
    pid: int | None = None
    address: str | None = None
    bind: str | None = None
    started_at: float | None = None
    uptime_s: float | None = None
    config: dict[str, Any] | None = None
    stale_pid: int | None = None  # found a dead/reused pid, cleaned
    http_ok: bool | None = None
    http_error: str | None = None
    quorum: QuorumPage | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _daemon(state_dir: str | Path | None) -> daemon.Daemon:
    d = Path(state_dir) if state_dir else lighthouse_dir()
    # both launchers live in the state dir: this path in a command line is this dir's Lighthouse
    return daemon.Daemon(d, NAME, marker=str(d / MARKER))


@contextlib.contextmanager
def _locked(d: daemon.Daemon) -> Iterator[None]:
    """The state dir's lock; an unwritable state dir or a stuck holder is a one-line error."""
    try:
        cm = d.locked()
        cm.__enter__()
    except TimeoutError as e:  # (an OSError too: first)
        raise UserError(f"{e} (another `ftslurm lighthouse` command still running?)") from None
    except OSError as e:  # permission, not a directory, read-only file system...
        raise UserError(
            f"cannot write the Lighthouse state dir {d.state_dir} ({e.strerror}); choose one "
            "with --state-dir or FTSLURM_LIGHTHOUSE_DIR"
        ) from None
    try:
        yield
    finally:
        cm.__exit__(None, None, None)


def log_path(state_dir: str | Path | None = None) -> Path:
    """The Lighthouse's log file (its stderr) for `state_dir`."""
    return _daemon(state_dir).logfile


def _info(state: daemon.DaemonState, d: daemon.Daemon, **kw: Any) -> LighthouseInfo:
    x = state.extra
    return LighthouseInfo(
        pid=state.pid,
        address=x.get("address", ""),
        host=x.get("host", ""),
        port=int(x.get("port", 0)),
        bind=x.get("bind", ""),
        probe_url=x.get("probe_url", ""),
        state_dir=str(d.state_dir),
        log_path=str(d.logfile),
        started_at=state.started_at,
        config=dict(x.get("config", {})),
        cmd=list(state.cmd),
        **kw,
    )


def _log_since(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""


def _listening_port(path: Path, offset: int) -> int | None:
    m = _LISTENING_RE.search(_log_since(path, offset))
    if not m:
        return None
    port = m.group(1).rstrip("/").rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def _config(
    bind: str | None,
    min_replicas: int,
    quorum_tick_ms: int,
    join_timeout_ms: int,
    heartbeat_timeout_ms: int | None,
    advertise: str | None,
) -> LighthouseConfig:
    """The validated config of `start` and `exec_foreground` (port 29510 when none is given)."""
    cfg = LighthouseConfig(
        bind=bind if bind is not None else f":{DEFAULT_PORT}",
        min_replicas=min_replicas,
        quorum_tick_ms=quorum_tick_ms,
        join_timeout_ms=join_timeout_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
        advertise=advertise,
    )
    cfg.validate()
    return cfg


def start(
    bind: str | None = None,
    min_replicas: int = DEFAULT_MIN_REPLICAS,
    quorum_tick_ms: int = DEFAULT_QUORUM_TICK_MS,
    join_timeout_ms: int = DEFAULT_JOIN_TIMEOUT_MS,
    heartbeat_timeout_ms: int | None = None,
    advertise: str | None = None,
    state_dir: str | Path | None = None,
    *,
    binary: str | None = None,
    log_max_mb: float = DEFAULT_LOG_MAX_MB,
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
) -> LighthouseInfo:
    """Start the Lighthouse detached and return once it answers HTTP; idempotent.

    `bind` `HOST:PORT` (default `[::]:29510`); port 0 picks a free port (read back from the
    Lighthouse's `listening on` log line). When one already runs from `state_dir`, nothing is
    started and its info comes back with `already_running=True` (differences from the requested
    options are listed in `notes`). A stale pidfile is removed first. Raises `PortInUse` (a
    UserError) when another program holds the port.
    """
    cfg = _config(
        bind, min_replicas, quorum_tick_ms, join_timeout_ms, heartbeat_timeout_ms, advertise
    )
    d = _daemon(state_dir)
    created = _first_missing(d.state_dir)
    try:
        with _locked(d):
            found = d.lookup()
            if found.state is not None:
                info = _info(found.state, d, already_running=True)
                info.notes = _differences(cfg, found.state, binary, log_max_mb)
                return info
            stale_pid = found.stale.pid if found.stale else None
            return _start_locked(d, cfg, binary, log_max_mb, ready_timeout, stale_pid)
    except BaseException:
        if created is not None:
            _remove_if_unused(d, created)
        raise


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what a start would create)."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_if_unused(d: daemon.Daemon, created: Path) -> None:
    """A start that failed before anything ran (port taken, bad --bind) does not leave behind
    the folders it created, e.g. a mistyped --state-dir; a log it wrote is kept (the error
    names it)."""
    if d.pidfile.exists() or d.statefile.exists():
        return  # something was started (Ctrl-C while waiting for it): its files stay
    for path in (d.lockfile, d.state_dir / MARKER):
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in (d.state_dir, *d.state_dir.parents):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            return
        if folder == created:
            return


def _orphan_gone(
    d: daemon.Daemon, host: str, port: int, crashed: bool, timeout: float = 5.0
) -> bool:
    """After a crash of the log writer (SIGKILL), its Lighthouse child is killed by the kernel
    (PR_SET_PDEATHSIG) but may hold the port a moment longer: wait for that one, only. While
    it exits, the socket may be listed with no process owning it yet: after a `crashed`
    Lighthouse of this state dir (a stale pidfile just removed), that counts as it too."""
    if not _held_by_this_lighthouse(d, port, ownerless=crashed):
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_free(host, port):
            return True
        time.sleep(0.05)
    return False


def _held_by_this_lighthouse(
    d: daemon.Daemon, port: int, ownerless: bool, pid: int | None = None
) -> bool:
    """Every listener on `port` is this state dir's Lighthouse: its launcher path is in the
    command line, or (a --binary has no such path) it is the running `pid` or its child.
    `ownerless`: the answer when no process owns the socket (yet/any more)."""
    owners = port_owner(port)
    if not owners:
        return ownerless
    ours = set(procs.process_tree(pid)) if pid else set()
    return all(d.marker in cmd or p in ours for p, cmd in owners)


def _differences(
    cfg: LighthouseConfig,
    state: daemon.DaemonState,
    binary: str | None = None,
    log_max_mb: float | None = None,
) -> dict[str, str]:
    running = state.extra.get("config", {})
    host, port = parse_bind(cfg.bind)
    notes = {}
    if port not in (0, state.extra.get("port")):
        notes["bind"] = f"requested port {port}, running on {state.extra.get('port')}"
    for key in ("min_replicas", "quorum_tick_ms", "join_timeout_ms", "heartbeat_timeout_ms"):
        if key in running and running[key] != getattr(cfg, key):
            notes[key] = f"requested {key}={getattr(cfg, key)}, running with {running[key]}"
    if cfg.advertise and cfg.advertise != state.extra.get("host"):
        notes["advertise"] = (
            f"requested --advertise {cfg.advertise}, running as {state.extra.get('host')}"
        )
    binary = _effective_binary(binary)
    if "binary" in state.extra and binary != state.extra["binary"]:
        notes["binary"] = (
            f"requested --binary {binary or '(the fast launcher)'}, running "
            f"{state.extra['binary'] or 'the fast launcher'}"
        )
    if log_max_mb is not None and state.extra.get("log_max_mb") not in (None, log_max_mb):
        notes["log_max_mb"] = (
            f"requested --log-max-mb {log_max_mb:g}, running with {state.extra['log_max_mb']:g}"
        )
    return notes


def _start_locked(
    d: daemon.Daemon,
    cfg: LighthouseConfig,
    binary: str | None,
    log_max_mb: float,
    ready_timeout: float,
    stale_pid: int | None,
) -> LighthouseInfo:
    host, port = parse_bind(cfg.bind)
    if not port_free(host, port) and not _orphan_gone(d, host, port, stale_pid is not None):
        raise port_in_use_error(host, port)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    binary = _effective_binary(binary)
    cmd = lighthouse_command(d.state_dir, binary) + cfg.args()
    # binary and log cap are recorded too: `restart` must bring back the same Lighthouse
    extra: dict[str, Any] = {
        "config": asdict(cfg), "requested_bind": cfg.bind, "binary": binary,
        "log_max_mb": log_max_mb,
    }  # fmt: skip
    cap = int(log_max_mb * 1024 * 1024)
    proc, state, offset = d.start(
        cmd,
        marker=MARKER,
        log_max_bytes=cap,
        # the fast launcher also caps the log while it runs (see _LAUNCHER)
        extra_env={"RUST_BACKTRACE": "1", "FTSLURM_LIGHTHOUSE_LOG": str(d.logfile),
                   "FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES": str(cap)},
        extra=extra,
    )
    try:
        if port == 0:
            port = daemon.wait_ready(
                lambda: _listening_port(d.logfile, offset),
                pid=proc.pid, poll=proc.poll, timeout=ready_timeout,
                what="the Lighthouse's 'listening on' log line",
            )  # fmt: skip
        probe_url = f"http://{probe_host(host)}:{port}/status"
        daemon.wait_ready(
            lambda: _answers(probe_url),
            pid=proc.pid, poll=proc.poll, timeout=ready_timeout,
            what=f"the Lighthouse to answer on {probe_url}",
        )  # fmt: skip
    except daemon.ProcessExited as e:
        d.clear()
        log = _log_since(d.logfile, offset)
        if _ADDR_IN_USE in log:
            raise port_in_use_error(host, port) from None
        last = log.strip().splitlines()[-1] if log.strip() else "(nothing logged)"
        raise UserError(
            f"the Lighthouse exited at start (code {e.returncode}): {last} -- see {d.logfile}"
        ) from None
    except TimeoutError as e:
        daemon.stop(proc.pid, grace=2.0)
        d.clear()
        raise UserError(f"{e}; stopped it -- see {d.logfile}") from None
    adv = advertised_host(host, cfg.advertise)
    state.extra.update(
        host=adv,
        port=port,
        bind=format_bind(host, port),
        address=f"http://{adv}:{port}",
        probe_url=probe_url,
    )
    d.write_state(state)
    _last_file(d).write_text(json.dumps(state.extra, indent=2) + "\n")
    return _info(state, d, stale_pid=stale_pid)


def _last_file(d: daemon.Daemon) -> Path:
    """Options and port of the last successful start; kept after `stop` so that `restart`
    of a stopped (or crashed) Lighthouse comes back on the same address."""
    return d.state_dir / f"{NAME}.last.json"


def stop(state_dir: str | Path | None = None, grace: float = DEFAULT_STOP_GRACE_S) -> str:
    """Stop the Lighthouse (SIGTERM, SIGKILL after `grace` s). Idempotent.

    Returns "terminated", "killed", "not-running" or "stale" (a stale pidfile was removed).
    """
    d = _daemon(state_dir)
    if not d.state_dir.is_dir():
        return "not-running"  # a mistyped --state-dir is not created by a stop
    with _locked(d):
        outcome, _ = d.stop(grace)
    return outcome


def status(state_dir: str | Path | None = None, http_timeout: float = 2.0) -> LighthouseStatus:
    """Running or not (a stale pidfile is detected and removed), uptime, address, and the
    quorum as the Lighthouse's /status page shows it."""
    d = _daemon(state_dir)
    found = d.lookup(clean_stale=False)
    if found.stale is not None:
        with contextlib.suppress(TimeoutError), d.locked(timeout=5.0):
            found = d.lookup(clean_stale=True)  # re-checked under the lock
    st = LighthouseStatus(running=False, state_dir=str(d.state_dir), log_path=str(d.logfile))
    if found.state is None:
        st.stale_pid = found.stale.pid if found.stale else None
        return st
    s = found.state
    st.running = True
    st.pid = s.pid
    st.address = s.extra.get("address")
    st.bind = s.extra.get("bind")
    if s.started_at:  # unknown (0) when only a bare pidfile was left
        st.started_at = s.started_at
        st.uptime_s = s.uptime_s
    st.config = s.extra.get("config")
    url = s.extra.get("probe_url")
    if url:
        try:
            code, page = http_get(url, http_timeout)
            st.http_ok = code == 200
            if st.http_ok:
                st.quorum = parse_status_html(page)
            else:
                st.http_error = f"HTTP {code} from {url}"
        except (OSError, ValueError) as e:
            st.http_ok = False
            st.http_error = f"{url}: {getattr(e, 'reason', e)}"
    return st


def restart(
    state_dir: str | Path | None = None,
    grace: float = DEFAULT_STOP_GRACE_S,
    **overrides: Any,
) -> LighthouseInfo:
    """Stop and start again with the same options and the SAME address and port (also when it
    was started on port 0), so running replicas can reconnect. `overrides` are `start`
    keyword arguments (e.g. min_replicas=2, binary=..., log_max_mb=...). When nothing runs,
    starts with the options of the last successful start (`lighthouse.last.json`), else the
    defaults. A Lighthouse run with `--foreground` belongs to its supervisor (systemd, tmux):
    refused, since a detached copy started here would fight the supervisor's restart."""
    d = _daemon(state_dir)
    prev = d.read_state()
    if prev is not None and prev.extra.get("foreground") and prev.alive():
        raise UserError(
            f"the Lighthouse (pid {prev.pid}) runs in the foreground under its own supervisor "
            "(started with --foreground): restart it there (e.g. `systemctl restart <unit>`), "
            "or stop it and run `ftslurm lighthouse start`"
        )
    extra = prev.extra if prev is not None and prev.extra.get("config") else None
    if extra is None:
        with contextlib.suppress(OSError, ValueError):
            extra = json.loads(_last_file(d).read_text())
    kwargs: dict[str, Any] = {}
    if extra and extra.get("config"):
        cfg = dict(extra["config"])
        if extra.get("port"):
            host, _ = parse_bind(cfg.get("bind"))
            cfg["bind"] = format_bind(host, int(extra["port"]))
        kwargs.update(cfg)
        for key in ("binary", "log_max_mb"):
            if extra.get(key) is not None:
                kwargs[key] = extra[key]
    kwargs.update(overrides)
    _check_restartable(d, kwargs, prev)
    stop(state_dir, grace)
    return start(state_dir=state_dir, **kwargs)


def _check_restartable(
    d: daemon.Daemon, kwargs: dict[str, Any], prev: daemon.DaemonState | None
) -> None:
    """Everything `start` would refuse, checked while the running Lighthouse still runs: a
    typo in `restart --bind` must not leave the replicas without a Lighthouse."""
    cfg = _config(
        kwargs.get("bind"),
        kwargs.get("min_replicas", DEFAULT_MIN_REPLICAS),
        kwargs.get("quorum_tick_ms", DEFAULT_QUORUM_TICK_MS),
        kwargs.get("join_timeout_ms", DEFAULT_JOIN_TIMEOUT_MS),
        kwargs.get("heartbeat_timeout_ms"),
        kwargs.get("advertise"),
    )
    host, port = parse_bind(cfg.bind)
    # A port that only the recorded Lighthouse holds (running, or crashed with its threads
    # still exiting: then no owner is visible) frees up when stop() has run; any other
    # visible holder makes start() fail.
    ours = prev is not None and port == prev.extra.get("port")
    running = prev.pid if prev is not None and prev.alive() else None
    if not port_free(host, port) and not (
        ours and _held_by_this_lighthouse(d, port, True, running)
    ):
        raise port_in_use_error(host, port)


def exec_foreground(
    bind: str | None = None,
    min_replicas: int = DEFAULT_MIN_REPLICAS,
    quorum_tick_ms: int = DEFAULT_QUORUM_TICK_MS,
    join_timeout_ms: int = DEFAULT_JOIN_TIMEOUT_MS,
    heartbeat_timeout_ms: int | None = None,
    advertise: str | None = None,
    state_dir: str | Path | None = None,
    *,
    binary: str | None = None,
    announce: Any = None,
) -> NoReturn:
    """Replace this process with the Lighthouse (for systemd / tmux): same pid, so the pidfile
    and state written here stay valid and `status` / `stop` work; output stays on the terminal.
    Port 0 becomes a free port chosen here (the address must be known before exec).
    `announce(info)` is called just before the exec (the CLI prints the address)."""
    cfg = _config(
        bind, min_replicas, quorum_tick_ms, join_timeout_ms, heartbeat_timeout_ms, advertise
    )
    d = _daemon(state_dir)
    with _locked(d):
        found = d.lookup()
        if found.state is not None:
            raise UserError(
                f"a Lighthouse already runs from {d.state_dir} (pid {found.state.pid}, "
                f"{found.state.extra.get('address')}); stop it first"
            )
        host, port = parse_bind(cfg.bind)
        if port == 0:
            from ftslurm.wait import free_port

            port = free_port("127.0.0.1" if _is_wildcard(host) else host)
            cfg = replace(cfg, bind=format_bind(host, port))
        if not port_free(host, port):
            raise port_in_use_error(host, port)
        cmd = lighthouse_command(d.state_dir, binary) + cfg.args()
        adv = advertised_host(host, cfg.advertise)
        pid = os.getpid()
        st = daemon.proc_stat(pid)
        state = daemon.DaemonState(
            name=NAME,
            pid=pid,
            start_ticks=st.start_ticks if st else None,
            started_at=time.time(),
            cmd=cmd,
            marker=MARKER,
            log_path=None,
            extra={
                "config": asdict(cfg), "requested_bind": cfg.bind, "host": adv, "port": port,
                "bind": format_bind(host, port), "address": f"http://{adv}:{port}",
                "probe_url": f"http://{probe_host(host)}:{port}/status", "foreground": True,
                "binary": _effective_binary(binary),
            },
        )  # fmt: skip
        d.write_state(state)
        if announce is not None:
            announce(_info(state, d))
    sys.stdout.flush()
    sys.stderr.flush()
    env = dict(os.environ, RUST_BACKTRACE=os.environ.get("RUST_BACKTRACE", "1"))
    os.execve(cmd[0], cmd, env)  # not a subprocess: this process becomes the Lighthouse
