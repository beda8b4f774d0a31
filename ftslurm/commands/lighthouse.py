"""`ftslurm lighthouse start|stop|status|logs|restart`: torchft's Lighthouse as a managed daemon.

A thin click layer over `ftslurm.lighthouse` (the Python API the tests and the demo use).
`start` prints exactly one line on stdout, `TORCHFT_LIGHTHOUSE=http://<host>:<port>`, so a
script can `export "$(ftslurm lighthouse start)"`; everything meant for humans goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ftslurm import lighthouse as lh
from ftslurm import stdout_pipe
from ftslurm.commands.params import DAY_MS, Count, FiniteFloat, knob_option, milliseconds, replicas
from ftslurm.daemon import tail_lines
from ftslurm.errors import UserError
from ftslurm.knobs import HEARTBEAT_TIMEOUT_FLOOR_MS
from ftslurm.lighthouse.config import check_heartbeat_timeout
from ftslurm.lighthouse.status_page import (
    GONE,
    HEALING,
    JOINING,
    LATE,
    LATE_S,
    LOST,
    TRAINING,
    PageSummary,
    ReplicaView,
    summarize,
)
from ftslurm.textsafe import printable

DEFAULTS = lh.LighthouseConfig  # its fields' defaults are class attributes
MAX_LISTED = 20  # replicas a person is shown; --all / --json list them all
MAX_ID = 100  # characters of an id or address shown (anyone may heartbeat any id)


class HeartbeatMs(Count):
    """--heartbeat-timeout-ms: milliseconds from the floor (shown in --help) to a day, and a
    value under the floor is refused by `check_heartbeat_timeout`'s line, which says why."""

    def __init__(self) -> None:
        super().__init__(HEARTBEAT_TIMEOUT_FLOOR_MS, DAY_MS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as refused:
            try:  # a whole number under the floor: say why; anything else: the range
                ms = milliseconds(0).convert(value, param, ctx)
            except click.BadParameter:
                raise refused from None
            try:
                check_heartbeat_timeout(ms, what="")
            except UserError as e:
                self.fail(str(e), param, ctx)
            raise


def _state_dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return knob_option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        knob="FTSLURM_LIGHTHOUSE_DIR",
        help="Directory of pidfile, state, log  [default: outputs/lighthouse; "
        "env FTSLURM_LIGHTHOUSE_DIR]",
    )(f)


def _config_options(defaults: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The Lighthouse's options; for `restart` they default to None (= keep what runs)."""

    def d(value: Any) -> Any:
        return value if defaults else None

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        opts = [
            click.option(
                "--bind",
                metavar="HOST:PORT",
                default=d(DEFAULTS.bind),
                show_default=defaults,
                help="Address to listen on. Empty host = all interfaces ([::], or 0.0.0.0 "
                "without IPv6); port 0 = any free port (the real one is printed); HOST alone "
                "= port 29510, but a ':' with no port after it is an error.",
            ),
            click.option(
                "--min-replicas", type=replicas(1), default=d(DEFAULTS.min_replicas),
                show_default=defaults, help="Minimum number of replicas for a quorum. With 3 or "
                "more replicas, more than half of them (5 of 8): two groups that ask apart "
                "(after a restart) cannot both get a quorum and train apart.",
            ),
            click.option(
                "--quorum-tick-ms", type=milliseconds(1),
                default=d(DEFAULTS.quorum_tick_ms), show_default=defaults,
                help="How often to check for a quorum while waiting for stragglers.",
            ),
            click.option(
                "--join-timeout-ms", type=milliseconds(0),
                default=d(DEFAULTS.join_timeout_ms), show_default=defaults,
                help="How long to wait for heartbeating stragglers before issuing a quorum.",
            ),
            knob_option(
                "--heartbeat-timeout-ms", type=HeartbeatMs(),
                default=d(DEFAULTS.heartbeat_timeout_ms), show_default=defaults,
                knob="FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS",
                help="How long a replica whose heartbeats stopped stays in the quorum: the "
                "survivors wait this long after a failure (detection). Lower detects faster, "
                "but a live replica stalled longer (a loaded node, a long GC) is dropped: a "
                "false drop, counted by `ftslurm report`. torchft's own default is 5000; "
                "2000 had no false drop in 60 minutes of failures on a loaded 2-core machine.",
            ),
            knob_option(
                "--advertise", metavar="HOST", default=None,
                knob="FTSLURM_LIGHTHOUSE_ADVERTISE",
                help="Host name or IP address the compute nodes use to reach this machine, "
                "for the printed address; just the host (no http://, no port: the port is "
                "--bind's)  [default: the bind address if specific, else this hostname; the "
                "local test cluster: login-0]",
            ),
        ]  # fmt: skip
        for opt in reversed(opts):
            f = opt(f)
        return f

    return deco


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _err(msg: str) -> None:
    click.echo(printable(msg), err=True)  # may quote the state file: shown, not done


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def lighthouse() -> None:
    """Run torchft's Lighthouse as a managed daemon on this (login) node.

    \b
    Example:
      ftslurm lighthouse start --advertise login-0   # prints TORCHFT_LIGHTHOUSE=http://login-0:29510
      ftslurm lighthouse status                      # pid, uptime, quorum, heartbeats
      ftslurm lighthouse logs -f
      ftslurm lighthouse stop

    The state (pidfile, lighthouse.json, lighthouse.log) lives in outputs/lighthouse, or
    --state-dir / FTSLURM_LIGHTHOUSE_DIR.
    """


@lighthouse.command()
@_config_options(defaults=True)
@click.option("--foreground", is_flag=True,
              help="Run attached (exec, same pid) instead of detached: for systemd or tmux. "
              "Output stays on the terminal; port 0 is resolved to a free port first.")
@knob_option("--binary", default=None, knob="FTSLURM_LIGHTHOUSE_BIN", metavar="PATH",
              help="Run this executable (e.g. torchft_lighthouse, the console script; ~3 s "
              "slower: it imports torch) instead of torchft's Lighthouse loaded directly.")
@click.option("--log-max-mb", type=FiniteFloat(min=0), default=DEFAULTS.log_max_mb,
              show_default=True,
              help="A log bigger than this is renamed lighthouse.log.1 (replacing the "
              "previous .1) and a new one begun: at start, and while it runs (at a line end).")
@click.option("--ready-timeout", type=FiniteFloat(min=0.1), default=DEFAULTS.ready_timeout,
              show_default=True, help="Seconds to wait for the HTTP port to answer.")
@_state_dir_option
def start(foreground: bool, **options: Any) -> None:
    """Start the Lighthouse detached (it survives logout); return once it answers HTTP.

    Prints `TORCHFT_LIGHTHOUSE=http://<host>:<port>` on stdout (the one line job scripts
    need); messages go to stderr. Idempotent: when it already runs, says so, prints the same
    line and exits 0. A stale pidfile (process gone, or pid reused) is cleaned. A port held by
    another program is an error naming the program.

    \b
    Examples:
      ftslurm lighthouse start
      ftslurm lighthouse start --advertise login-0 --min-replicas 2
      export "$(ftslurm lighthouse start --bind :0)"    # any free port
      ftslurm lighthouse start --foreground             # under systemd / tmux
    """
    config = lh.LighthouseConfig(**options)
    if foreground:

        def announce(info: lh.LighthouseInfo) -> None:
            _err(f"Lighthouse (foreground, pid {info.pid}) on {info.bind}; Ctrl-C stops it")
            click.echo(printable(info.env_line))

        lh.exec_foreground(config, announce)
    t0 = time.monotonic()
    info = lh.start(config)
    if info.stale_pid:
        _err(f"Removed a stale pidfile (pid {info.stale_pid} was not a running Lighthouse).")
    if info.already_running:
        _err(f"Lighthouse already running (pid {info.pid}, up {_uptime(info.uptime_s)}) "
             f"on {info.bind}; nothing started.")
        ctx = click.get_current_context()
        for key, note in info.notes.items():
            # only options the user gave: defaults are not a request to change anything
            if ctx.get_parameter_source(key) not in (None, ParameterSource.DEFAULT):
                _err(f"  note: {note} (use `ftslurm lighthouse restart` to apply)")
    else:
        _err(f"Lighthouse started (pid {info.pid}) on {info.bind}, ready in "
             f"{time.monotonic() - t0:.2f} s; log: {info.log_path}")
    click.echo(printable(info.env_line))


@lighthouse.command()
@click.option("--grace", type=FiniteFloat(min=0), default=lh.DEFAULT_STOP_GRACE_S,
              show_default=True, help="Seconds between SIGTERM and SIGKILL.")
@_state_dir_option
def stop(grace: float, state_dir: Path | None) -> None:
    """Stop the Lighthouse: SIGTERM, then SIGKILL after --grace seconds. Idempotent.

    \b
    Example:
      ftslurm lighthouse stop
    """
    outcome = lh.stop(state_dir, grace)
    _err({
        "terminated": "Lighthouse stopped.",
        "killed": f"Lighthouse did not exit within {grace:g} s of SIGTERM: killed (SIGKILL).",
        "not-running": "Lighthouse not running; nothing to stop.",
        "stale": "Lighthouse not running (removed a stale pidfile); nothing to stop.",
        "foreign": "Lighthouse not running: its state file names a process that is not this "
                   "state dir's Lighthouse (pid reused, or the file edited); left that process "
                   "alone and removed the stale state.",
        "leftovers": "Lighthouse not running, but processes it had started still were: "
                     "stopped them (and removed the stale pidfile).",
    }[outcome])  # fmt: skip


@lighthouse.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, for scripts.")
@click.option("--all", "show_all", is_flag=True,
              help="List every replica id, not only those that are not training.")
@click.option("--live", is_flag=True,
              help="Read the page from the Lighthouse now, not the copy its launcher keeps "
                   "(at most 30 s old; seconds to wait with 1,024 replicas).")
@_state_dir_option
def status(as_json: bool, show_all: bool, live: bool, state_dir: Path | None) -> None:
    """Is it running; pid, uptime, address; the live quorum as the Lighthouse's page shows it.

    The quorum in counts (replica ids training, healing, lost, joining...), then its replica
    ids: all of them up to 20, else only those not training (20 at most; --all lists every
    one, --json gives the whole page). The page is the copy the launcher read last (every
    second, or as fast as a busy Lighthouse answers; its age is shown), so the answer comes
    at once also while 1,024 replicas hold the Lighthouse; --live reads it now. Exit code 0
    when running, 3 when not (like `systemctl status`), so scripts can test it.

    \b
    Examples:
      ftslurm lighthouse status
      ftslurm lighthouse status --json | jq .quorum.members
    """
    st = lh.status(state_dir, live=live)
    if not st.running:
        stdout_pipe.exit_code_if_cut(3)
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=2))
    else:
        _print_status(st, None if show_all else MAX_LISTED)
    if not st.running:
        sys.exit(3)  # not click.Exit: cli.main (standalone_mode=False) drops its code


def _stale_note(st: lh.LighthouseStatus) -> str:
    """Why the state names no running Lighthouse, as it is (`lh.STALE_WHY`), and what was
    done: the files removed, or what still runs left for `stop` (a status never signals)."""
    if st.stale_why is None:
        return ""
    why = lh.STALE_WHY[st.stale_why].format(pid=st.stale_pid)
    if st.left_pids:
        pids = ", ".join(map(str, st.left_pids))
        return (f" ({why}: pid(s) {pids}; `ftslurm lighthouse stop --state-dir {st.state_dir}`"
                " ends them)")
    if st.stale_removed:
        return f" (removed a stale pidfile: {why})"
    return f" (a stale pidfile: {why}; left as it is)"


def _print_status(st: lh.LighthouseStatus, limit: int | None = MAX_LISTED) -> None:
    """The Lighthouse, its quorum in counts, then its replica ids (`_summary_lines`: all of
    a few, else the ones not training, at most `limit`; None: every one)."""

    def echo(line: str) -> None:
        # ids, addresses and texts come from the network and the state file: shown, not done
        click.echo(printable(line))

    if not st.running:
        echo(f"Lighthouse: not running{_stale_note(st)}")
        echo(f"State dir:  {st.state_dir}")
        return
    echo(f"Lighthouse: running (pid {st.pid}, up {_uptime(st.uptime_s)})")
    if st.damaged:
        echo(f"Warning:    the state file is damaged ({st.damaged}); shown without those "
             "fields (`ftslurm lighthouse restart` writes it anew)")
    echo(f"Address:    {st.address}   (bind {st.bind})")
    cfg = st.config or {}
    opts = " ".join(
        f"{k}={cfg[k]}" for k in ("min_replicas", "quorum_tick_ms", "join_timeout_ms",
                                  "heartbeat_timeout_ms") if cfg.get(k) is not None
    )
    if opts:
        echo(f"Options:    {opts}")
    echo(f"State dir:  {st.state_dir}")
    echo(f"Log:        {st.log_path}")
    if not st.http_ok:
        echo(f"HTTP:       not answering ({st.http_error})")
        return
    q = st.quorum
    assert q is not None
    if st.page_size is not None:  # big pages come slowly from a loaded Lighthouse: shown
        cut = f"; only its start came ({st.http_error}): counts of that" if st.http_error else ""
        when = (f", read {st.page_age_s:.1f} s ago by the launcher"
                if st.page_from == "snapshot" and st.page_age_s is not None else "")  # fmt: skip
        echo(f"Page:       {st.page_size / 1000:.0f} kB in {st.page_s or 0:.2f} s{when}{cut}")
    echo(f"Quorum id:  {q.quorum_id if q.quorum_id is not None else '?'}")
    echo(f"Next:       {q.next_status or '?'}")
    if q.previous_quorum_id is not None:
        age = f", age {q.quorum_age_s:.1f} s" if q.quorum_age_s is not None else ""
        echo(f"Last quorum: id {q.previous_quorum_id}, {q.num_participants} "
             f"participant(s){age}")
    else:
        echo("Last quorum: none yet")
    for line in _summary_lines(summarize(q), limit):
        echo(line)
    if q.rejected:
        echo(f"Unread:     {q.rejected} piece(s) of the page could not be read, left out")


def _short(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_ID else text[: MAX_ID - 3] + "..."


def _summary_lines(s: PageSummary, limit: int | None) -> list[str]:
    """`Replicas:` in counts, `Heartbeats:` in counts, then every replica id, worst first,
    when there are up to `limit` (None: any number), else those not training, at most
    `limit`; each on one line."""
    n = s.states
    lines = [
        f"Replicas:   {len(s.replicas)} id(s): {n[TRAINING]} training, {n[HEALING]} healing, "
        f"{n[LATE]} late, {n[LOST]} lost (in the quorum, heartbeat old), {n[JOINING]} "
        f"joining (not in the quorum), {n[GONE]} gone (old heartbeat only)",
        f"Heartbeats: {s.heartbeating} live ({s.late} late: over {LATE_S:g} s), {s.old} old",
    ]  # fmt: skip
    every = limit is None or len(s.replicas) <= limit  # a few: all of them, worst first
    shown = s.replicas if every else s.not_training
    if shown:
        lines.append(f"{'Replica ids' if every else 'Not training'} ({len(shown)}):")
    lines += [_replica_line(r) for r in shown[:limit]]
    if limit is not None and len(shown) > limit:
        lines.append(f"  ... and {len(shown) - limit} more (--all / --json for all)")
    return lines


def _replica_line(r: ReplicaView) -> str:
    """`  <id>  step 42  manager http://node-c:4000 RECOVERING` for a quorum member,
    `  <id>  2.0 s ago  (old)` for an id that only heartbeats; then its state and why."""
    age = f"{r.heartbeat_age_s:.1f} s ago" if r.heartbeat_age_s is not None else None
    if not r.member:
        return f"  {_short(r.replica_id)}  {age}{'  (old)' if r.old else ''}  {r.state}"
    rec = " RECOVERING" if r.recovering else ""
    beat = f"heartbeat {age}{' (old)' if r.old else ''}" if age else "no heartbeat"
    return (f"  {_short(r.replica_id)}  step {r.step}  manager {_short(r.manager)}{rec}  "
            f"{r.state}: {beat}")


@lighthouse.command()
@click.option("-n", "--lines", "n", type=click.IntRange(min=0), default=50, show_default=True,
              help="How many last lines to show.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to quit).")
@_state_dir_option
def logs(n: int, follow: bool, state_dir: Path | None) -> None:
    """Show the end of the Lighthouse's log (its stderr).

    \b
    Examples:
      ftslurm lighthouse logs -n 100
      ftslurm lighthouse logs -f | grep 'Quorum!'
    """
    path = lh.log_path(state_dir)
    if path.is_symlink():  # not printed through: it may name a file only root may read
        raise UserError(f"refusing to read {path}: it is a symbolic link, not the Lighthouse's "
                        "log; remove it")  # fmt: skip
    if not path.exists():
        raise UserError(f"no Lighthouse log at {path} (never started from this state directory)")
    for line in tail_lines(path, n):
        click.echo(printable(line, tabs=True))  # what the Lighthouse logged: shown, not done
    if follow:
        _follow(path)


def _follow(path: Path, interval: float = 0.25) -> None:
    """Print what is appended to `path`; reopen when it is rotated (at start or while it runs)."""
    f = open(path, "rb")  # noqa: SIM115 (replaced on rotation)
    f.seek(0, os.SEEK_END)
    ino = os.fstat(f.fileno()).st_ino
    buf = b""
    try:
        while not stdout_pipe.reader_gone():  # like `tail -f`: end with the pipe's reader
            chunk = f.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    click.echo(printable(line.decode(errors="replace"), tabs=True))
                continue
            try:
                st = os.stat(path)
                rotated = st.st_ino != ino or st.st_size < f.tell()
            except FileNotFoundError:
                rotated = False
            if rotated:
                f.close()
                f = open(path, "rb")  # noqa: SIM115
                ino = os.fstat(f.fileno()).st_ino
                continue
            time.sleep(interval)  # nothing to wait on but the file growing
    except KeyboardInterrupt:
        pass
    finally:
        f.close()


@lighthouse.command()
@_config_options(defaults=False)
@click.option("--binary", default=None, metavar="PATH",
              help="Run this executable instead; '' = torchft's Lighthouse loaded directly  "
              "[default: what the last start ran]")
@click.option("--log-max-mb", type=FiniteFloat(min=0), default=None,
              help="Log size cap  [default: the last start's]")
@click.option("--grace", type=FiniteFloat(min=0), default=lh.DEFAULT_STOP_GRACE_S,
              show_default=True, help="Seconds between SIGTERM and SIGKILL.")
@_state_dir_option
def restart(grace: float, state_dir: Path | None, **options: Any) -> None:
    """Stop and start again: same options, same address and port (also after `--bind :0`).

    Options given here replace the recorded ones (--binary and --log-max-mb included).
    Replicas reconnect to the same address (they need quorum retries,
    TORCHFT_QUORUM_RETRIES, to survive the gap). A Lighthouse started with --foreground is
    left to its supervisor (systemd, tmux).

    \b
    Examples:
      ftslurm lighthouse restart
      ftslurm lighthouse restart --min-replicas 2
    """
    given = {k: v for k, v in options.items() if v is not None}
    t0 = time.monotonic()
    info = lh.restart(lh.recorded_config(state_dir, given), grace)
    _err(f"Lighthouse restarted (pid {info.pid}) on {info.bind} in "
         f"{time.monotonic() - t0:.2f} s; log: {info.log_path}")
    click.echo(printable(info.env_line))
