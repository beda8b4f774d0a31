"""The Lighthouse's lifecycle on this (login) node: start detached, stop, status, restart,
or exec in the foreground; the state (pidfile, state file, log) in one directory.

The Lighthouse is the one process every replica of an FT job talks to, so on a Slurm cluster
it runs on the login node, started once and left running across jobs. `start` runs the real
Lighthouse from torchft (never a reimplementation; see `command.py`) detached, with its stderr
in a log file, waits until it answers HTTP, and returns the address job scripts need. Errors a
user can fix are `UserError` (one line, no traceback).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from ftslurm import daemon, procs, safefile
from ftslurm.errors import UserError
from ftslurm.lighthouse import address, launcher, ports
from ftslurm.lighthouse.command import FILTER, MARKER, NAME, lighthouse_command, resolve_binary
from ftslurm.lighthouse.config import BINARY_OPTIONS, LighthouseConfig, check_heartbeat_timeout
from ftslurm.lighthouse.status_page import (
    MAX_ANSWER,
    PageRead,
    QuorumPage,
    answers,
    http_get,
    page_deadline,
    parse_status_html,
    read_page,
    summarize,
)
from ftslurm.logvocab import LIGHTHOUSE_LISTENING
from ftslurm.paths import lighthouse_dir
from ftslurm.wait import WaitTimeout, free_port

DEFAULT_STOP_GRACE_S = 10.0
_ADDR_IN_USE = "Address already in use"
# a command reads the launcher's copy of the page (`launcher.snapshot_pages`) when it is at
# most this old: the launcher reads one every second, or as fast as a loaded Lighthouse of
# 1,024 replicas answers (4-6 s a read); an older copy means the reads stopped answering,
# and the command reads the page itself (which then says why it did not come)
SNAPSHOT_MAX_AGE_S = 30.0


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
    # the state names a pid that is not this dir's running Lighthouse: why (`STALE_WHY`'s
    # keys), whether its files were removed (only when nothing of it runs), and what of it
    # still runs (a status never signals; `stop` ends them)
    stale_pid: int | None = None
    stale_why: str | None = None
    stale_removed: bool = False
    left_pids: list[int] = field(default_factory=list)
    damaged: str | None = None  # what in the state file is not as `start` writes it
    http_ok: bool | None = None  # it answered with its page (whole, or the start of it)
    http_error: str | None = None  # why not; or why only the start of the page came
    quorum: QuorumPage | None = None
    page_size: int | None = None  # characters of the page read
    page_s: float | None = None  # how long the read took
    # how old the page is: the launcher's copy (`page_from` "snapshot"), or 0 when this
    # command read it itself ("live")
    page_age_s: float | None = None
    page_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Everything, and the page's counts (`summary`; its lists are in `quorum` once)."""
        out = asdict(self)
        out["summary"] = summarize(self.quorum).counts() if self.quorum is not None else None
        return out


def _daemon(state_dir: str | Path | None) -> daemon.Daemon:
    # resolved: the launcher's path is the identity, the same however the dir was named
    d = Path(state_dir).resolve() if state_dir else lighthouse_dir()
    # the launcher lives in the state dir and always runs (`python <it>`, a --binary as its
    # child): that argument in a command line is this dir's Lighthouse
    launcher = str(d / MARKER)
    return daemon.Daemon(d, NAME, marker=launcher, program=launcher)


@contextlib.contextmanager
def _locked(d: daemon.Daemon) -> Iterator[None]:
    """The state dir's lock, for a command that starts or stops the Lighthouse; an
    unwritable state dir, one another user can change (`daemon.unsafe_state_dir`: its
    program runs from there) or a stuck holder is a one-line error."""
    with contextlib.ExitStack() as stack:
        try:
            safefile.private_dir(d.state_dir)
            unsafe = daemon.unsafe_state_dir(d.state_dir)
            if unsafe:
                raise UserError(
                    f"refusing the Lighthouse state dir {d.state_dir}: {unsafe}; use a folder "
                    "only you can change (--state-dir or FTSLURM_LIGHTHOUSE_DIR), or fix it "
                    "(chown, chmod go-w)"
                )
            stack.enter_context(d.locked())
        except WaitTimeout as e:  # (an OSError too: first)
            raise UserError(f"{e} (another `ftslurm lighthouse` command still running?)") from None
        except OSError as e:  # permission, not a directory, read-only file system...
            raise UserError(
                f"cannot write the Lighthouse state dir {d.state_dir} ({e.strerror}); choose "
                "one with --state-dir or FTSLURM_LIGHTHOUSE_DIR"
            ) from None
        yield


def log_path(state_dir: str | Path | None = None) -> Path:
    """The Lighthouse's log file (its stderr) for `state_dir`."""
    return _daemon(state_dir).logfile


# what `start` records in the state file's `extra`, and its types: a state file edited by
# hand (or by another user) must not crash a command that reads it
_NONE = type(None)
_EXTRA_TYPES: dict[str, tuple[type, ...]] = {
    "address": (str,), "host": (str,), "bind": (str,), "probe_url": (str,),
    "requested_bind": (str,), "port": (int,), "config": (dict,), "binary": (str, _NONE),
    "log_max_mb": (int, float), "foreground": (bool,),
}  # fmt: skip
_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "bind": (str, _NONE), "min_replicas": (int,), "quorum_tick_ms": (int,),
    "join_timeout_ms": (int,), "heartbeat_timeout_ms": (int, _NONE), "advertise": (str, _NONE),
}  # fmt: skip


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # True is an int to isinstance
        return False
    return isinstance(value, types)


def _checked_extra(extra: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`extra` of a state file with what is not as `start` writes it left out, and what that
    was (`extra.config is a str, not dict`): a command shows the rest, and says so."""

    def wrong(name: str, value: Any, types: tuple[type, ...]) -> str:
        want = " or ".join("null" if t is _NONE else t.__name__ for t in types)
        return f"{name} is a {type(value).__name__}, not {want}"

    clean, damaged = dict(extra), []
    for key, types in _EXTRA_TYPES.items():
        if key in clean and not _typed(clean[key], types):
            damaged.append(wrong(f"extra.{key}", clean.pop(key), types))
    if "port" in clean and not 0 <= clean["port"] <= 65535:
        damaged.append(f"extra.port {clean.pop('port')} is out of range")
    if "log_max_mb" in clean and not 0 <= clean["log_max_mb"] < float("inf"):
        damaged.append(f"extra.log_max_mb {clean.pop('log_max_mb')} is out of range")
    if "config" in clean:
        config = dict(clean["config"])
        for key, types in _CONFIG_TYPES.items():
            if key in config and not _typed(config[key], types):
                damaged.append(wrong(f"extra.config.{key}", config.pop(key), types))
        clean["config"] = config
    return clean, damaged


def _info(state: daemon.DaemonState, d: daemon.Daemon, **kw: Any) -> LighthouseInfo:
    x, _ = _checked_extra(state.extra)
    return LighthouseInfo(
        pid=state.pid, address=x.get("address", ""), host=x.get("host", ""),
        port=int(x.get("port", 0)), bind=x.get("bind", ""), probe_url=x.get("probe_url", ""),
        state_dir=str(d.state_dir), log_path=str(d.logfile), started_at=state.started_at,
        config=dict(x.get("config", {})), cmd=list(state.cmd), **kw,
    )  # fmt: skip


def _log_since(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""


def _listening_port(path: Path, offset: int) -> int | None:
    m = LIGHTHOUSE_LISTENING.search(_log_since(path, offset))
    if not m:
        return None
    port = m.group(1).rstrip("/").rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def start(config: LighthouseConfig | None = None, **options: Any) -> LighthouseInfo:
    """Start the Lighthouse detached and return once it answers HTTP; idempotent.

    `options` (LighthouseConfig's fields) replace those of `config` (default: the defaults),
    so `start(advertise="login-0")` works. `bind` `HOST:PORT` (default `[::]:29510`); port 0
    picks a free port (read back from the Lighthouse's `listening on` log line). When one
    already runs from the state dir, nothing is started and its info comes back with
    `already_running=True` (differences from the requested options are listed in `notes`).
    A stale pidfile is removed first. Raises `PortInUse` (a UserError) when another program
    holds the port.
    """
    cfg = replace(config or LighthouseConfig(), **options)
    d = _daemon(cfg.state_dir)
    created = _first_missing(d.state_dir)
    try:
        with _locked(d):
            found = d.lookup()
            if found.state is not None:
                info = _info(found.state, d, already_running=True)
                info.notes = _differences(cfg, found.state)
                return info
            return _start_locked(d, cfg, found.stale.pid if found.stale else None)
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
    for path in (d.lockfile, d.state_dir / MARKER, d.state_dir / FILTER):
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
    try:
        procs.wait_gone(lambda: not ports.port_free(host, port), timeout, f"port {port} to be free")
    except WaitTimeout:
        return False
    return True


def _held_by_this_lighthouse(
    d: daemon.Daemon, port: int, ownerless: bool, pid: int | None = None
) -> bool:
    """Every listener on `port` is this state dir's Lighthouse: its launcher path is in the
    command line, or (a --binary has no such path) it is the running `pid` or its child.
    `ownerless`: the answer when no process owns the socket (yet/any more)."""
    owners = ports.port_owner(port)
    if not owners:
        return ownerless
    ours = set(procs.process_tree(pid)) if pid else set()
    return all(d.marker in cmd or p in ours for p, cmd in owners)


def _differences(cfg: LighthouseConfig, state: daemon.DaemonState) -> dict[str, str]:
    """Option name (as `start` spells it) -> how the running Lighthouse differs from `cfg`."""
    extra, _ = _checked_extra(state.extra)
    state = replace(state, extra=extra)
    running = extra.get("config", {})
    host, port = address.parse_bind(cfg.bind)
    notes = {}
    if port not in (0, state.extra.get("port")):
        notes["bind"] = f"requested port {port}, running on {state.extra.get('port')}"
    for key in ("min_replicas", "quorum_tick_ms", "join_timeout_ms", "heartbeat_timeout_ms"):
        if key in running and running[key] != getattr(cfg, key):
            notes[key] = f"requested {key}={getattr(cfg, key)}, running with {running[key]}"
    if cfg.advertise and address.advertised_host(host, cfg.advertise) != state.extra.get("host"):
        notes["advertise"] = (
            f"requested --advertise {cfg.advertise}, running as {state.extra.get('host')}"
        )
    binary, log_max_mb = resolve_binary(cfg.binary), cfg.log_max_mb
    if "binary" in state.extra and binary != state.extra["binary"]:
        notes["binary"] = (
            f"requested --binary {binary or '(the fast launcher)'}, running "
            f"{state.extra['binary'] or 'the fast launcher'}"
        )
    if state.extra.get("log_max_mb") not in (None, log_max_mb):
        notes["log_max_mb"] = (
            f"requested --log-max-mb {log_max_mb:g}, running with {state.extra['log_max_mb']:g}"
        )
    return notes


def _start_locked(
    d: daemon.Daemon, cfg: LighthouseConfig, stale_pid: int | None
) -> LighthouseInfo:
    host, port = address.parse_bind(cfg.bind)
    if not ports.port_free(host, port) and not _orphan_gone(d, host, port, stale_pid is not None):
        raise ports.port_in_use_error(host, port)
    safefile.private_dir(d.state_dir)
    binary = resolve_binary(cfg.binary)
    cmd, env = lighthouse_command(d.state_dir, binary)
    cmd += cfg.args()
    # binary and log cap are recorded too: `restart` must bring back the same Lighthouse
    extra: dict[str, Any] = {
        "config": cfg.binary_options(), "requested_bind": cfg.bind, "binary": binary,
        "log_max_mb": cfg.log_max_mb,
    }  # fmt: skip
    cap = int(cfg.log_max_mb * 1024 * 1024)
    proc, state, offset = d.start(
        cmd,
        marker=d.marker,
        log_max_bytes=cap,
        # the launcher also caps the log while it runs (see launcher.py)
        extra_env={"RUST_BACKTRACE": "1", "FTSLURM_LIGHTHOUSE_LOG": str(d.logfile),
                   "FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES": str(cap), **env},
        extra=extra,
    )
    try:
        if port == 0:
            port = daemon.wait_ready(
                lambda: _listening_port(d.logfile, offset),
                pid=proc.pid, poll=proc.poll, timeout=cfg.ready_timeout,
                what="the Lighthouse's 'listening on' log line",
            )  # fmt: skip
        where = _where(host, port, cfg.advertise)
        probe_url = where["probe_url"]
        daemon.wait_ready(
            lambda: answers(probe_url),
            pid=proc.pid, poll=proc.poll, timeout=cfg.ready_timeout,
            what=f"the Lighthouse to answer on {probe_url}",
        )  # fmt: skip
    except daemon.ProcessExited as e:
        # it may have started processes that outlive it (a wrapper that forks and exits)
        ended = d.abort(state)
        log = _log_since(d.logfile, offset)
        if _ADDR_IN_USE in log:
            raise ports.port_in_use_error(host, port) from None
        last = log.strip().splitlines()[-1] if log.strip() else "(nothing logged)"
        left = f"; ended {len(ended)} process(es) it had left running" if ended else ""
        raise UserError(
            f"the Lighthouse exited at start (code {e.returncode}): {last}{left}"
            f"{_still_held(port)} -- see {d.logfile}"
        ) from None
    except WaitTimeout as e:
        d.abort(state)  # it, and every process it started
        raise UserError(f"{e}; stopped it{_still_held(port)} -- see {d.logfile}") from None
    state.extra.update(where)
    d.write_state(state)
    safefile.write_atomic(_last_file(d), json.dumps(state.extra, indent=2) + "\n")
    return _info(state, d, stale_pid=stale_pid)


def _still_held(port: int) -> str:
    """After every process of a Lighthouse was ended: '' when nothing listens on `port` any
    more, else the end of a sentence naming what still does (a process that left its session
    with setsid cannot be found from it), so no message claims a port is free that is not."""
    held = ports.holders(port) if port else ""
    return f", but port {port} is still held by {held}; stop that by hand" if held else ""


def _where(host: str, port: int, advertise: str | None) -> dict[str, Any]:
    """Where it listens, the address replicas use, and where this machine probes it."""
    adv = address.advertised_host(host, advertise)
    return {"host": adv, "port": port, "bind": address.format_bind(host, port),
            "address": f"http://{adv}:{port}",
            "probe_url": f"http://{address.probe_host(host)}:{port}/status"}  # fmt: skip


def _last_file(d: daemon.Daemon) -> Path:
    """Options and port of the last successful start; kept after `stop` so that `restart`
    of a stopped (or crashed) Lighthouse comes back on the same address."""
    return d.state_dir / f"{NAME}.last.json"


def stop(state_dir: str | Path | None = None, grace: float = DEFAULT_STOP_GRACE_S) -> str:
    """Stop the Lighthouse (SIGTERM, SIGKILL after `grace` s). Idempotent.

    Returns "terminated", "killed", "not-running", "stale" (a stale pidfile was removed),
    "foreign" (the state file names a live process that is not this dir's Lighthouse: left
    alone, the state removed) or "leftovers" (it was dead, what it had started was not: ended).
    Every process of its session goes with it; a UserError when its port is still held after.
    """
    d = _daemon(state_dir)
    if not d.state_dir.is_dir():
        return "not-running"  # a mistyped --state-dir is not created by a stop
    with _locked(d):
        outcome, state = d.stop(grace)
        with contextlib.suppress(OSError):  # its page, read by a Lighthouse that is gone
            (d.state_dir / launcher.SNAPSHOT).unlink()
    port = state.extra.get("port") if state is not None else None
    if outcome in ("terminated", "killed", "leftovers") and type(port) is int and 0 < port < 65536:
        held = _still_held(port)
        if held:
            raise UserError(f"stopped the Lighthouse (pid {state.pid}){held}")
    return outcome


# why a state names no running Lighthouse of this state dir (`LighthouseStatus.stale_why`)
STALE_WHY = {
    "gone": "pid {pid} is gone",
    "no-pid": "its state files name no pid",
    "not-ours": "pid {pid} runs but is not this state dir's Lighthouse; the pid was reused, "
                "or the state was copied from another state dir",
    "left-running": "pid {pid} is gone, but processes it started still run",
}  # fmt: skip


def _stale(d: daemon.Daemon, found: daemon.Lookup) -> daemon.Lookup:
    """What a status reports of a stale state, and its files removed when nothing of it
    runs; never a signal (a status only reads: a copy of a state folder names the processes
    of another). Processes of it still running (a Lighthouse killed by PR_SET_PDEATHSIG
    exits a moment after its launcher) get a moment to go."""
    with contextlib.suppress(WaitTimeout):  # still running: reported, not removed
        procs.wait_gone(lambda: bool(d.lookup(clean_stale=False).left), 1.0)
    try:
        if daemon.unsafe_state_dir(d.state_dir) is None:  # else not ours to clean (nor lock)
            with d.locked(timeout=5.0):
                return d.forget_stale()  # re-checked under the lock
    except OSError:  # busy (a WaitTimeout is an OSError too), gone, read-only
        pass
    return d.lookup(clean_stale=False)


def read_snapshot(
    state_dir: Path, started_at: float | None, max_age_s: float = SNAPSHOT_MAX_AGE_S
) -> tuple[PageRead, float] | None:
    """The launcher's copy of the /status page in `state_dir` (`launcher.snapshot_pages`),
    parsed, and its age in seconds; None when there is none this user wrote, it is older
    than `max_age_s`, it was read before the Lighthouse that runs now (`started_at`), or it
    holds no Lighthouse page (no quorum id)."""
    path = state_dir / launcher.SNAPSHOT
    t0 = time.monotonic()
    try:
        got = safefile.read_checked_stat(path, MAX_ANSWER, own=True)
    except safefile.UnsafePath:  # a link, not this user's, too big: the page is read live
        return None
    if got is None:
        return None
    raw, st = got
    age = time.time() - st.st_mtime
    if not -1.0 <= age <= max_age_s or (started_at and st.st_mtime < started_at):
        return None
    text = raw.decode(errors="replace")
    page = parse_status_html(text)
    # a copy with no quorum id is no Lighthouse page: the command reads the page itself
    if page.quorum_id is None:
        return None
    return PageRead(str(path), page=page, size=len(text),
                    seconds=time.monotonic() - t0), max(age, 0.0)  # fmt: skip


def status(
    state_dir: str | Path | None = None, http_timeout: float = 2.0, probe: bool = True,
    live: bool = False,
) -> LighthouseStatus:
    """Running or not, uptime, address, and the quorum as the Lighthouse's /status page shows
    it (`probe=False`: the state file only, no HTTP request), read once: the launcher's copy
    of it when one is fresh (`read_snapshot`; not with `live`), else from the Lighthouse,
    `http_timeout` s to connect, then the page's own time (`status_page.page_deadline`). Only
    reads: nothing is ever signalled; a stale state (its pid gone, or not this dir's
    Lighthouse) is reported, and its files removed only when nothing of it runs."""
    d = _daemon(state_dir)
    found = d.lookup(clean_stale=False)
    if found.stale is not None:
        found = _stale(d, found)
    st = LighthouseStatus(running=False, state_dir=str(d.state_dir), log_path=str(d.logfile))
    if found.state is None:
        if found.stale is not None:
            pid = found.stale.pid
            st.stale_pid = pid or None
            st.left_pids = list(found.left)
            st.stale_removed = not os.path.lexists(d.pidfile) and not os.path.lexists(
                d.statefile)
            st.stale_why = ("no-pid" if not pid else "left-running" if found.left else
                            "not-ours" if procs.pid_alive(pid) else "gone")  # fmt: skip
        return st
    s = found.state
    extra, damaged = _checked_extra(s.extra)
    st = replace(
        st, running=True, pid=s.pid, address=extra.get("address"), bind=extra.get("bind"),
        config=extra.get("config"),
        # unknown (0) when only a bare pidfile was left
        started_at=s.started_at or None, uptime_s=s.uptime_s if s.started_at else None,
        damaged=f"{d.statefile}: {', '.join(damaged)}" if damaged else None,
    )  # fmt: skip
    url = extra.get("probe_url")
    if url and probe:
        # read once: the page lists every member and heartbeat (0.5 MB at 1,024 replicas)
        copy = None if live else read_snapshot(d.state_dir, s.started_at or None)
        if copy is not None:
            read, st.page_age_s, st.page_from = copy[0], round(copy[1], 3), "snapshot"
            assert read.page is not None
            read.page.page_age_s = st.page_age_s
        else:
            read = read_page(url, page_deadline(http_timeout), get=http_get)
            st.page_age_s, st.page_from = 0.0, "live"
        # a page it answered is read whatever it holds (the parser never raises): a page
        # it could not read says so in `quorum.rejected`, never as a Lighthouse that is down
        st.http_ok, st.quorum, st.http_error = read.page is not None, read.page, read.error
        st.page_size, st.page_s = read.size, round(read.seconds, 3)
    return st


def recorded_config(
    state_dir: str | Path | None = None, given: Mapping[str, Any] | None = None
) -> LighthouseConfig:
    """The config to restart with: the options of the Lighthouse that runs (or crashed), else
    of the last successful start (`lighthouse.last.json`, kept by `stop`), else the defaults,
    with the options the user `given` replacing them. Its bind has the port the Lighthouse got
    (also when started on port 0), so a restart comes back on the same address, and its binary
    and log cap are the recorded ones (a recorded binary only if `trusted_binary`)."""
    d = _daemon(state_dir)
    prev = d.read_state()
    extra = _checked_extra(prev.extra)[0] if prev is not None else None
    source = d.statefile
    if not (extra and extra.get("config")):
        with contextlib.suppress(ValueError):
            extra = json.loads(safefile.read_text(_last_file(d)) or "null")
        extra = _checked_extra(extra)[0] if isinstance(extra, dict) else None
        source = _last_file(d)
    options: dict[str, Any] = {}
    if isinstance(extra, dict) and extra.get("config"):
        options = {k: v for k, v in extra["config"].items() if k in BINARY_OPTIONS}
        if extra.get("port"):
            host, _ = address.parse_bind(options.get("bind"))
            options["bind"] = address.format_bind(host, int(extra["port"]))
        for key in ("binary", "log_max_mb"):
            if extra.get(key) is not None:
                options[key] = extra[key]
    if options.get("binary") and "binary" not in (given or {}):
        options["binary"] = trusted_binary(str(options["binary"]))
    if "heartbeat_timeout_ms" not in (given or {}):  # an old or planted one: refused, named
        check_heartbeat_timeout(options.get("heartbeat_timeout_ms"),
                                f"the heartbeat_timeout_ms recorded in {source}")  # fmt: skip
    return LighthouseConfig(state_dir=d.state_dir, **{**options, **(given or {})})


def trusted_binary(binary: str) -> str:
    """`binary` as recorded in a state file, if it is safe to run again: a `restart` (often
    under sudo) runs it, and a state file is text anyone who can write that folder can change.
    Refused unless the executable and its folder belong to root or to this user and no other
    user can write them; the fix is to name it again with --binary, which is the user's word."""
    import shutil

    path = shutil.which(binary)
    if path is None:
        raise UserError(f"the recorded Lighthouse binary {binary!r} is gone: restart with "
                        "--binary NAME, or --binary '' for the default launcher")  # fmt: skip
    unsafe = daemon.unsafe_program(path)
    if unsafe:
        raise UserError(
            f"the recorded Lighthouse binary {Path(path).resolve()} is not safe to run again "
            f"({unsafe}): restart with --binary {binary} once only you and root can change "
            "it, or --binary '' for the default launcher"
        )
    return binary


def restart(config: LighthouseConfig, grace: float = DEFAULT_STOP_GRACE_S) -> LighthouseInfo:
    """Stop the Lighthouse of `config.state_dir` and start it with `config`, usually
    `recorded_config(state_dir)` with some options replaced: the same options and the SAME
    address and port, so running replicas can reconnect. What `start` would refuse (a bad
    --bind, a port another program holds) is refused first, while the old one still runs. A
    Lighthouse run with `--foreground` belongs to its supervisor (systemd, tmux): refused,
    since a detached copy started here would fight the supervisor's restart."""
    d = _daemon(config.state_dir)
    prev = d.read_state()
    if prev is not None and prev.extra.get("foreground") and d.owns(prev):
        raise UserError(
            f"the Lighthouse (pid {prev.pid}) runs in the foreground under its own supervisor "
            "(started with --foreground): restart it there (e.g. `systemctl restart <unit>`), "
            "or stop it and run `ftslurm lighthouse start`"
        )
    host, port = address.parse_bind(config.bind)
    # A port that only the recorded Lighthouse holds (running, or crashed with its threads
    # still exiting: then no owner is visible) frees up when stop() has run; any other
    # visible holder makes start() fail.
    ours = prev is not None and port == prev.extra.get("port")
    running = prev.pid if prev is not None and d.owns(prev) else None
    if not ports.port_free(host, port) and not (
        ours and _held_by_this_lighthouse(d, port, True, running)
    ):
        raise ports.port_in_use_error(host, port)
    stop(d.state_dir, grace)
    return start(config)


def exec_foreground(
    config: LighthouseConfig, announce: Callable[[LighthouseInfo], None] | None = None
) -> NoReturn:
    """Replace this process with the Lighthouse (for systemd / tmux): same pid, so the pidfile
    and state written here stay valid and `status` / `stop` work; output stays on the terminal.
    Port 0 becomes a free port chosen here (the address must be known before exec).
    `announce(info)` is called just before the exec (the CLI prints the address)."""
    cfg = config
    d = _daemon(cfg.state_dir)
    with _locked(d):
        found = d.lookup()
        if found.state is not None:
            raise UserError(
                f"a Lighthouse already runs from {d.state_dir} (pid {found.state.pid}, "
                f"{found.state.extra.get('address')}); stop it first"
            )
        host, port = address.parse_bind(cfg.bind)
        if port == 0:
            port = free_port("127.0.0.1" if address.is_wildcard(host) else host)
            cfg = replace(cfg, bind=address.format_bind(host, port))
        if not ports.port_free(host, port):
            raise ports.port_in_use_error(host, port)
        binary = resolve_binary(cfg.binary)
        cmd, launcher_env = lighthouse_command(d.state_dir, binary)
        cmd += cfg.args()
        pid = os.getpid()
        me = procs.ProcId.of(pid)
        state = daemon.DaemonState(
            name=NAME, pid=pid, start_ticks=me.start_ticks if me else None,
            started_at=time.time(), cmd=cmd, marker=d.marker, log_path=None,
            extra={"config": cfg.binary_options(), "requested_bind": cfg.bind,
                   **_where(host, port, cfg.advertise), "foreground": True, "binary": binary},
        )  # fmt: skip
        d.write_state(state)
        if announce is not None:
            announce(_info(state, d))
        sys.stdout.flush()
        sys.stderr.flush()
        env = dict(os.environ, RUST_BACKTRACE=os.environ.get("RUST_BACKTRACE", "1"),
                   **launcher_env)  # fmt: skip
        # not a subprocess: this process becomes the Lighthouse. Under the lock (its file is
        # closed on exec, which releases it): until then this pid's command line is not the
        # Lighthouse's, and a `status` that took the state for a stale one would remove it
        os.execve(cmd[0], cmd, env)
    raise AssertionError("unreachable: execve returned")
