"""Fix 4 (fixes.py, FTSLURM_FIX_HEAL_TIMEOUT) on torchft's real HTTP checkpoint transport, no
training: the survivor's `should_commit` calls `disallow_checkpoint()`, which waits for a
healing peer's download. A download that outlasts the transport's timeout raises TimeoutError
in the survivor; one that ends in time lets it go on. The timeout is FTSLURM_HEAL_TIMEOUT_S,
where torchft's Manager, as torchtitan builds it, would give 60 s.

The slow peer is a real HTTP client on a real socket that stops reading mid-transfer.
"""

from __future__ import annotations

import io
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")
pytest.importorskip("torchtitan")

from ftslurm.replica import fixes  # noqa: E402

pytestmark = pytest.mark.timeout(120)

STEP = 5
MIB = 2**20
_STATE = torch.arange(16 * MIB, dtype=torch.float32)


@pytest.fixture
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """The transport fix 4 hands to torchft's Manager, with FTSLURM_HEAL_TIMEOUT_S=2 (or the
    test's parameter), serving a 64 MiB state dict (more than the socket buffers hold) at STEP.
    64 tensors of 1 MiB: the server writes each in its own sendall, under its own socket
    timeout, so a slow peer that keeps reading never times the server out."""
    import torchtitan.components.ft.manager as tt_ft

    before = tt_ft.ft
    monkeypatch.setenv("FTSLURM_HEAL_TIMEOUT_S", str(getattr(request, "param", 2)))
    monkeypatch.setenv("FTSLURM_HEAL_TRANSPORT", "http")  # the lock these tests are about
    fixes.fix_heal_timeout()
    made = tt_ft.ft.kwargs["checkpoint_transport"]({})
    state = {i: part.clone() for i, part in enumerate(_STATE.split(MIB // 4))}  # own storages
    made.send_checkpoint(dst_ranks=[1], step=STEP, state_dict=state, timeout=None)
    try:
        yield made
    finally:
        tt_ft.ft = before
        made.shutdown(wait=False)


def _get(transport: object) -> tuple[socket.socket, bytes]:
    """A healing peer's request for the full checkpoint and the first bytes of the answer; the
    caller decides how to read the rest."""
    url = urllib.parse.urlsplit(transport.metadata())
    sock = socket.create_connection(("localhost", url.port), timeout=10)
    sock.sendall(f"GET {url.path}{STEP}/full HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
    first = sock.recv(64 * 1024)
    assert first  # the server has started sending: it holds the read lock
    return sock, first


def test_fix_builds_torchfts_transport_with_the_configured_timeout(transport) -> None:
    from torchft.checkpointing import HTTPTransport

    assert isinstance(transport, HTTPTransport)
    assert transport._checkpoint_lock.timeout == 2.0
    line = fixes._transport_line(type("M", (), {"_checkpoint_transport": transport})())
    assert line == (
        "[ftslurm] heal transport: HTTPTransport, survivor waits up to 2 s for a healing "
        "peer's download (one stream)"
    )


def test_survivor_raises_when_a_download_outlasts_the_timeout(transport) -> None:
    """The crash fix 4 prevents at 8B scale: the peer is still downloading after the timeout."""
    stalled, _ = _get(transport)
    stop = threading.Event()

    def trickle() -> None:
        """A slow peer, not a dead one: it keeps reading (about 1.3 MiB/s, so each 1 MiB
        tensor's sendall ends well inside the server's own 2 s socket timeout). A peer that
        stopped reading made that timeout race the survivor's 2 s wait: when the server's
        fired first it released the read lock and the survivor did not time out."""
        while not stop.wait(0.05):
            try:
                if not stalled.recv(64 * 1024):
                    return
            except OSError:
                return

    reader = threading.Thread(target=trickle, daemon=True)
    reader.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="Timed out waiting for wlock after 2.0 seconds"):
            transport.disallow_checkpoint()
        assert 1.9 <= time.monotonic() - t0 < 30
    finally:
        stop.set()
        stalled.close()
        reader.join(timeout=5)


@pytest.mark.parametrize("transport", [30], indirect=True)
def test_survivor_waits_for_a_download_that_ends_in_time(transport) -> None:
    """A slow but finishing download (~1 s) delays the survivor, who then goes on; the peer
    receives the checkpoint whole. (30 s: a loaded machine must not turn this into a timeout.)"""
    sock, first = _get(transport)
    received = io.BytesIO(first)
    received.seek(0, io.SEEK_END)

    def read_slowly() -> None:
        """At 64 MiB/s, a slow network: the whole checkpoint takes ~1 s."""
        start = time.monotonic()
        with sock:
            while chunk := sock.recv(4 * MIB):
                received.write(chunk)
                ahead = start + received.tell() / (64 * MIB) - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)

    reader = threading.Thread(target=read_slowly)
    t0 = time.monotonic()
    reader.start()
    transport.disallow_checkpoint()  # the reader holds the read lock since _get
    waited = time.monotonic() - t0
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert 0.5 < waited < 30, waited
    head, _, body = received.getvalue().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    from torch.distributed._serialization import _streaming_load

    got = _streaming_load(io.BytesIO(body), weights_only=False)
    assert torch.equal(torch.cat([got[i] for i in range(len(got))]), _STATE)
