"""Serve `/metrics` over HTTP with prometheus_client's own WSGI server (a daemon thread).

The exposition format is prometheus_client's (text 0.0.4, or OpenMetrics when the scraper
asks for it): nothing here writes metric text by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from ftslurm.errors import UserError
from ftslurm.lighthouse.address import bracket, probe_host


@dataclass
class MetricsServer:
    """A running endpoint: stop it with `close()`."""

    server: WSGIServer
    host: str
    port: int

    @property
    def url(self) -> str:
        """Where this machine scrapes it (a wildcard bind is reached on loopback)."""
        return f"http://{probe_host(self.host)}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(reg: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Start serving `reg` on host:port (port 0: any free one, `MetricsServer.port` says
    which); a port already taken is a user error naming it."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=reg)
    except OSError as e:
        raise UserError(f"cannot listen on {bracket(host)}:{port} ({e.strerror or e})") from None
    return MetricsServer(server, host, server.server_address[1])
