"""`ftslurm metrics serve`'s endpoint bounds what clients can hold: an idle connection is
closed after REQUEST_TIMEOUT_S, and at most MAX_CONNECTIONS are handled at once (a thread
each); one over the cap gets 503 at once, without a thread. Idle sockets used to hold a thread
each, without bound (334 sockets, 335 threads).

Real sockets on 127.0.0.1, the server on a free port in this process; a bounded number of
connections, each test well under a minute."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from ftslurm.metrics.server import MAX_CONNECTIONS, REQUEST_TIMEOUT_S, MetricsServer, serve
from ftslurm.wait import wait_for

pytestmark = pytest.mark.timeout(60)

EXTRA = 40  # connections over the cap


@pytest.fixture
def endpoint() -> Iterator[MetricsServer]:
    server = serve(CollectorRegistry(), "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.close()


def _handlers() -> int:
    """Threads handling a connection now (socketserver names them after their target)."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def _connect(server: MetricsServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_TIMEOUT_S + 10)


def _healthy(server: MetricsServer) -> bool:
    url = f"http://127.0.0.1:{server.port}/healthz"
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200 and r.read() == b"ok\n"


def test_an_idle_connection_is_closed_after_the_timeout(endpoint: MetricsServer) -> None:
    with _connect(endpoint) as idle:
        t0 = time.monotonic()
        try:
            got = idle.recv(1)  # nothing sent: the server closes it
        except TimeoutError:
            pytest.fail(f"an idle connection was held for {time.monotonic() - t0:.0f} s")
        waited = time.monotonic() - t0
    assert got == b"" and REQUEST_TIMEOUT_S - 1 <= waited <= REQUEST_TIMEOUT_S + 3, waited
    wait_for(lambda: _handlers() == 0, 5, what="the handler thread to end")
    assert _healthy(endpoint)


def test_connections_over_the_cap_get_503_at_once_and_no_thread(
    endpoint: MetricsServer,
) -> None:
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(_connect(endpoint)) for _ in range(MAX_CONNECTIONS)]
        wait_for(lambda: _handlers() == MAX_CONNECTIONS, 10,
                 what="a handler thread for each connection under the cap")  # fmt: skip
        t0 = time.monotonic()
        for _ in range(EXTRA):
            extra = stack.enter_context(_connect(endpoint))
            extra.settimeout(REQUEST_TIMEOUT_S - 1)  # an answer after the timeout is too late
            try:
                answer = extra.recv(64)
            except TimeoutError:
                pytest.fail("a connection over the cap was held, not refused")
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert _handlers() <= MAX_CONNECTIONS
        assert time.monotonic() - t0 < REQUEST_TIMEOUT_S, "the refusals waited"
        assert len(held) == MAX_CONNECTIONS
    # the held ones closed by the client: their threads end, and the endpoint answers again
    wait_for(lambda: _handlers() == 0, REQUEST_TIMEOUT_S + 5, what="the handler threads to end")
    assert _healthy(endpoint)


def test_an_endpoint_full_of_idle_clients_recovers_after_the_timeout(
    endpoint: MetricsServer,
) -> None:
    """The clients never close their sockets: the server's timeout frees the slots."""
    with contextlib.ExitStack() as stack:
        for _ in range(MAX_CONNECTIONS):
            stack.enter_context(_connect(endpoint))
        wait_for(lambda: _handlers() == MAX_CONNECTIONS, 10, what="the handler threads")
        wait_for(lambda: _handlers() == 0, REQUEST_TIMEOUT_S + 5,
                 what="the idle connections to time out")  # fmt: skip
        assert _healthy(endpoint)
