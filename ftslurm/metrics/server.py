"""Serve `/metrics` over HTTP with prometheus_client's own WSGI app (a daemon thread).

The exposition format is prometheus_client's (text 0.0.4, or OpenMetrics when the scraper
asks for it): nothing here writes metric text by hand. Only `/metrics` and the health path
`/healthz` answer; any other path is 404, so the endpoint is not mistaken for (or probed as)
anything else. There is no authentication: the default address is the loopback, and the
command's help says how to expose it (`--host`, a firewall, an SSH tunnel).

Each connection has its own thread, so an idle or slow client must not hold one for good:
every read and write of a connection times out (`REQUEST_TIMEOUT_S`), and at most
`MAX_CONNECTIONS` are handled at once; a connection over the cap is answered 503 and closed
at once, without a thread (idle sockets held a thread each, without bound).
"""

from __future__ import annotations

import socket
import sys
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
# seconds a connection may take for each read (and write): a scraper sends its request at
# once; Prometheus's own scrape timeout (10 s) bounds the response, not the request
REQUEST_TIMEOUT_S = 5.0
# connections handled at once (a thread each): a few scrapers and health checks need far fewer
MAX_CONNECTIONS = 32
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n")  # fmt: skip

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
    """One thread per request (a slow scrape does not block the health check), at most
    `max_connections` at once: over that, a connection gets 503 and is closed at once."""

    daemon_threads = True
    max_connections = MAX_CONNECTIONS
    # a burst of connections waits in the kernel's queue, not in SYN retries of a second
    # each, so one over the cap gets its 503 at once (socketserver's default is 5)
    request_queue_size = MAX_CONNECTIONS
    slots: threading.BoundedSemaphore

    def server_activate(self) -> None:
        super().server_activate()
        self.slots = threading.BoundedSemaphore(self.max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or went away is no error worth a traceback on stderr."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _refuse(request: socket.socket) -> None:
    """503 to a connection over the cap, without waiting for it: a send that would block is
    skipped (the connection is closed anyway)."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass


class _Silent(WSGIRequestHandler):
    """No access log on stderr: Prometheus scrapes every few seconds. Each read and write
    of the connection times out (`timeout`, set on the socket by StreamRequestHandler)."""

    timeout = REQUEST_TIMEOUT_S

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
