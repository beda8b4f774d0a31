"""Is the Lighthouse's port free, and if not, which process holds it (from /proc).

Why name the owner: "address in use" alone leaves the user guessing whether it is their own
Lighthouse (of which state dir), someone else's, or another program.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
from pathlib import Path

from ftslurm import procs
from ftslurm.errors import UserError
from ftslurm.lighthouse.address import format_bind
from ftslurm.lighthouse.command import MARKER, NAME
from ftslurm.textsafe import printable


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
        # EINVAL: an address of another interface than its zone (`[fe80::1%lo]`), ...
        raise UserError(f"--bind {format_bind(host, port)}: cannot listen there "
                        f"({e.strerror or e})") from None
    except (UnicodeError, ValueError, TypeError) as e:  # a host the socket module cannot encode
        raise UserError(f"--bind {format_bind(host, port)}: {host!r} is not a host name or "
                        f"IP address ({e})") from None
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
                    owners.append((int(proc.name), procs.proc_cmdline(int(proc.name))))
                    break
            except OSError:
                continue
    return owners


def holders(port: int, owners: list[tuple[int, str]] | None = None) -> str:
    """`pid N (command line); ...` of what listens on `port` ('' when nothing visible does)."""
    owners = port_owner(port) if owners is None else owners
    return "; ".join(f"pid {pid} ({_short(cmd)})" for pid, cmd in owners)


def port_in_use_error(host: str, port: int) -> PortInUse:
    """A one-line error naming the port and, when known, its owner."""
    owners = port_owner(port)
    where = format_bind(host, port)
    if owners:
        who = holders(port, owners)
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
    """A command line for a one-line message: control characters escaped (a newline in an
    argument must not split the message), at most `n` characters."""
    cmd = printable(cmd)
    return cmd if len(cmd) <= n else cmd[: n - 3] + "..."
