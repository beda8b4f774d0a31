"""Bind and advertised addresses of the Lighthouse (pure, but for the IPv6 check and hostname).

`--bind` is what the binary listens on; the advertised host is what compute nodes are told
(TORCHFT_LIGHTHOUSE); the probe host is where this machine checks that it answers.
"""

from __future__ import annotations

import ipaddress
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
    """`HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT` -> (host without brackets, port); `HOST` or
    `[V6]` alone -> the default port.

    An empty host means the default wildcard host; port 0 means "any free port". A colon
    with no port after it (`:`, `HOST:`, `[::1]:`: `--bind ":$PORT"` with PORT unset) is an
    error, never the default port: that is where another Lighthouse may run.
    """
    if bind is None or bind.strip() == "":
        return unbracket(default_bind_host()), DEFAULT_PORT
    bind = bind.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.%\w]*)\](?::(.*))?", bind)
    if m:
        host, port_s = m.group(1), m.group(2)
    elif bind.isdigit():
        host, port_s = "", bind
    elif bind.count(":") == 1:
        host, port_s = bind.split(":")
    elif ":" not in bind:
        host, port_s = bind, None
    else:
        raise UserError(f"--bind {bind!r}: use HOST:PORT, [IPV6]:PORT or :PORT")
    if port_s == "":
        raise UserError(f"--bind {bind!r}: no port after ':' (an unset variable?); give "
                        f"HOST:PORT, or HOST alone for port {DEFAULT_PORT}")  # fmt: skip
    if port_s is None:
        port_s = str(DEFAULT_PORT)
    if not (port_s.isascii() and port_s.isdigit()) or not 0 <= int(port_s) <= 65535:
        raise UserError(f"--bind {bind!r}: the port must be a number from 0 to 65535")
    if host == "":
        host = unbracket(default_bind_host())
    elif not valid_host(host):
        raise UserError(f"--bind {bind!r}: {host!r} is not a host name or IP address")
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


# a DNS name's labels; `_` too, which some sites' node names have
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


# an IPv6 zone: an interface name (at most 15 characters) or index; nothing a terminal acts on
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def valid_host(host: str) -> bool:
    """`host` is a host name, an IPv4 or an IPv6 address (brackets optional, a zone such as
    `%eth0` allowed): never a control character, a space or a non-ASCII byte, which the
    socket calls refuse with a traceback and which would reach the terminal and the job
    scripts' TORCHFT_LIGHTHOUSE as they are."""
    if len(host) <= 253 and _HOSTNAME.fullmatch(host):
        return True
    addr, _, zone = unbracket(host).partition("%")
    if "%" in unbracket(host) and not _ZONE.fullmatch(zone):
        return False
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        return False
    return not zone or ":" in addr  # a zone only on an IPv6 address


def check_advertise(advertise: str | None) -> None:
    """`--advertise` must be a host name, an IPv4 or an IPv6 address (brackets optional):
    it becomes `http://HOST:PORT` in TORCHFT_LIGHTHOUSE, the one line job scripts export, so
    a scheme, a port, spaces or a newline in it would make a broken address or a second
    line. None or "" is the default (see `advertised_host`)."""
    if not advertise or valid_host(advertise):
        return
    raise UserError(f"--advertise {advertise!r}: give a host name or IP address only (no "
                    "http://, no port, no spaces); the port comes from --bind")  # fmt: skip


def advertised_host(bind_host: str, advertise: str | None = None) -> str:
    """The host name compute nodes use to reach the Lighthouse.

    `advertise` wins (an IPv6 address in brackets); a specific bind address is the only one
    that answers, so it is used; otherwise this machine's hostname (on the local test
    cluster: `--advertise login-0`).
    """
    if advertise:
        return bracket(unbracket(advertise))
    return bracket(bind_host) if not is_wildcard(bind_host) else socket.gethostname()


def probe_host(bind_host: str) -> str:
    """Where this machine reaches the Lighthouse for the readiness check and `status`."""
    return "127.0.0.1" if is_wildcard(bind_host) else bracket(bind_host)
