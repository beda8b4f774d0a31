"""Bind and advertised addresses of the Lighthouse (pure, but for the IPv6 check and hostname).

`--bind` is what the binary listens on; the advertised host is what compute nodes are told
(TORCHFT_LIGHTHOUSE); the probe host is where this machine checks that it answers.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from ftslurm.errors import UserError

DEFAULT_PORT = 29510
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


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
        return unbracket(default_bind_host()), DEFAULT_PORT
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
        host = unbracket(default_bind_host())
    return host, int(port_s)


def format_bind(host: str, port: int) -> str:
    """The `--bind` argument for the binary: IPv6 literals in brackets."""
    return f"{bracket(host)}:{port}"


def bracket(host: str) -> str:
    """An IPv6 literal in brackets, as URLs and `--bind` need it; other hosts as they are."""
    return f"[{host}]" if ":" in host else host


def unbracket(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_wildcard(host: str) -> bool:
    return host in WILDCARD_HOSTS


def advertised_host(bind_host: str, advertise: str | None = None) -> str:
    """The host name compute nodes use to reach the Lighthouse.

    `advertise` wins; a specific bind address is the only one that answers, so it is used;
    otherwise this machine's hostname (on the local test cluster: `--advertise login-0`).
    """
    if advertise:
        return advertise
    return bracket(bind_host) if not is_wildcard(bind_host) else socket.gethostname()


def probe_host(bind_host: str) -> str:
    """Where this machine reaches the Lighthouse for the readiness check and `status`."""
    return "127.0.0.1" if is_wildcard(bind_host) else bracket(bind_host)
