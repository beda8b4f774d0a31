"""Serve `/metrics` over HTTP with prometheus_client's own WSGI app (a daemon thread).

The exposition format is prometheus_client's (text 0.0.4, or OpenMetrics when the scraper
asks for it): nothing here writes metric text by hand. Only `/metrics` and the health path
`/healthz` answer; any other path is 404, so the endpoint is not mistaken for (or probed as)
anything else. There is no authentication: the default address is the loopback, and the
command's help says how to expose it (`--host`, a firewall, an SSH tunnel).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ftslurm.errors import UserError
from ftslurm.lighthouse.address import bracket, is_wildcard, probe_host
from ftslurm.textsafe import printable

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

DEFAULT_HOST = "127.0.0.1"  # the login node's own Prometheus, or an SSH tunnel, reaches it
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass
class MetricsServer:
    """A running endpoint: stop it with `close()`."""

    server: WSGIServer
    host: str
    port: int

    @property
    def url(self) -> str:
        """Where this machine scrapes it (a wildcard bind is reached on loopback)."""
        return f"http://{probe_host(self.host)}:{self.port}{METRICS_PATH}"

    @property
    def exposed(self) -> bool:
        """Whether other machines may reach it (not bound to the loopback only)."""
        return self.host not in _LOOPBACK and not self.host.startswith("127.")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Threading(ThreadingMixIn, WSGIServer):
    """One thread per request (a slow scrape does not block the health check)."""

    daemon_threads = True


class _Silent(WSGIRequestHandler):
    """No access log on stderr: Prometheus scrapes every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def app(reg: CollectorRegistry) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI app: `/metrics` (prometheus_client's), `/healthz` (200 `ok`), else 404."""
    from prometheus_client import make_wsgi_app

    metrics_app = make_wsgi_app(reg)

    def route(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == METRICS_PATH:
            return metrics_app(environ, start_response)
        if path == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found: this endpoint serves {METRICS_PATH} and {HEALTH_PATH}\n".encode()]

    return route


def serve(reg: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Start serving `reg` on host:port (port 0: any free one, `MetricsServer.port` says
    which); a host that cannot be resolved or a port already taken is a user error naming
    it."""
    where = printable(f"{bracket(host)}:{port}")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)  # fmt: skip
        family, *_, sockaddr = infos[0]

        class Server(_Threading):
            address_family = family

        httpd = make_server(sockaddr[0], port, app(reg), Server, handler_class=_Silent)
    except (UnicodeError, ValueError):  # a name that is no host name (`\xff`, NUL)
        raise UserError(f"cannot listen on {ascii(host)}: not a host name or address (give "
                        "an IP address or a name of this machine)") from None
    except socket.gaierror as e:
        raise UserError(f"cannot listen on {where}: unknown host ({e.strerror or e})") from None
    except OSError as e:
        raise UserError(f"cannot listen on {where} ({e.strerror or e})") from None
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    bound = host if host and not is_wildcard(host) else host or "0.0.0.0"
    return MetricsServer(httpd, bound, httpd.server_address[1])
