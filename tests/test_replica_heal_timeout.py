"""Fix 4 (fixes.py, FTSLURM_FIX_HEAL_TIMEOUT) on torchft's real HTTP checkpoint transport, no
training: the survivor's `should_commit` calls `disallow_checkpoint()`, which waits for a
healing peer's download. A download that outlasts the transport's timeout raises TimeoutError
in the survivor; one that ends in time lets it go on. The timeout is FTSLURM_HEAL_TIMEOUT_S,
where torchft's Manager, as torchtitan builds it, would give 60 s.

The slow peer is a real HTTP client on a real socket that stops reading mid-transfer.

Fix 6 (FTSLURM_FIX_HEAL_TIMEOUT_FLOOR), in real training (marked `training`): two per-step
replicas of the debug model through the launcher, a real Lighthouse on a free port, and a heal
over HTTP slowed (tests/slow_heal/sitecustomize.py) to outlast the debug preset's 10 s
cross-replica timeout. With the fix the survivor commits the step it served the heal in; without
it, that step's all-reduce times out and the survivor's commit fails.
"""

from __future__ import annotations

import io
import math
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")
pytest.importorskip("torchtitan")

from ftslurm.replica.worker import fixes  # noqa: E402
from ftslurm.wait import wait_for  # noqa: E402
from tests import test_replica_training as training  # noqa: E402

make_run = training.make_run  # its fixture: a Lighthouse and replicas, torn down by pid

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

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


# --------------------------------------------------------------------------------------------
# Fix 6 (FTSLURM_FIX_HEAL_TIMEOUT_FLOOR) in real training: a heal slower than the preset's
# cross-replica timeout


SLOW_MBPS = 4  # the debug model's ~74 MB state: a heal of ~18 s
SLOW_SITE = ROOT / "tests" / "slow_heal"  # its sitecustomize.py slows torchft's HTTP server
COMMIT = re.compile(r"torchft\.manager - INFO - .* should_commit=(True|False) .*errored=(.*)")


def _preset_pg_timeout_s() -> float:
    toml = tomllib.loads((ROOT / "slurm" / "configs" / "debug_cpu.toml").read_text())
    return toml["fault_tolerance"]["process_group_timeout_ms"] / 1000


def _slow_heal(make_run, floor: bool) -> dict:
    """Two per-step replicas; replica 1's worker is SIGKILLed and attempt 1 heals from replica
    0 over HTTP at SLOW_MBPS. Returns replica 0's log from its heal on (`peers need recovery
    from us`), how long it served, and both replicas' checksums."""
    run = make_run(
        "per-step",
        FTSLURM_HEAL_TRANSPORT="http",
        FTSLURM_HEAL_MBPS=str(SLOW_MBPS),  # the rate this slowed transport really moves
        FTSLURM_FIX_HEAL_TIMEOUT_FLOOR="1" if floor else "0",
        SLOW_HEAL_MBPS=str(SLOW_MBPS),
        PYTHONPATH=os.pathsep.join([str(SLOW_SITE), str(ROOT)]),
    )
    r0, r1 = run.start(0), run.start(1)
    wait_for(run.quorum_with_both, timeout=120, what="a quorum with both replicas")
    wait_for(lambda: len(r0.checksums()) >= 2 and len(r1.checksums()) >= 2, timeout=120,
             what="2 committed checksums on both replicas")  # fmt: skip
    victim = r1.worker_pid()
    assert victim is not None
    training._kill(victim)
    wait_for(lambda: r1.proc.poll() is not None, timeout=60, what="attempt 0 of replica 1 to end")
    # attempt 1's heal is served after this point: attempt 0 may have healed too, at its start
    # (when replica 0 had committed a step before it joined), and the kill aborts a step
    mark = len(r0.text())
    r1b = run.start(1, attempt=1)
    served = re.compile(r"\[slow-heal\] served step (\d+): (\d+) bytes in ([\d.]+) s")
    wait_for(lambda: served.search(r0.text(), mark), timeout=180,
             what="replica 0 to serve the heal")  # fmt: skip
    text = r0.text()
    heal = text.rfind("peers need recovery from us", mark, served.search(text, mark).start())
    assert heal >= 0, text[-3000:]

    def survivor_decided() -> bool:
        return bool(COMMIT.search(r0.text()[heal:])) or r0.proc.poll() is not None

    wait_for(survivor_decided, timeout=120, what="replica 0's commit decision after the heal")
    if floor:  # both go on: 2 more common committed steps, identical
        step = int(served.search(r0.text(), mark)[1])
        wait_for(lambda: len(training._common_after(r0, r1b, step)) >= 2, timeout=120,
                 what="2 common checksums after the heal")  # fmt: skip
    m = served.search(r0.text(), mark)
    return {"after_heal": r0.text()[heal:], "served_s": float(m[3]), "bytes": int(m[2]),
            "r0": r0.text(), "common": training._common_after(r0, r1b, int(m[1]))}  # fmt: skip


@pytest.mark.training
@pytest.mark.timeout(420)
def test_survivor_keeps_its_step_across_a_heal_longer_than_the_timeout(make_run) -> None:
    res = _slow_heal(make_run, floor=True)
    preset = _preset_pg_timeout_s()
    assert res["served_s"] > preset, res["served_s"]  # the heal outlasted the preset's timeout
    floor_line = re.search(r"\[ftslurm\] heal timeout floor: .*", res["r0"])
    assert floor_line, res["r0"][-3000:]
    state_s = res["bytes"] / (SLOW_MBPS * 1e6)
    raised = preset + math.ceil(2 * state_s)
    assert f"cross-replica timeout {preset:g} s -> " in floor_line[0]
    assert abs(float(re.search(r"-> ([\d.]+) s \(twice", floor_line[0])[1]) - raised) <= 2
    first = COMMIT.search(res["after_heal"])
    assert first and first[1] == "True", res["after_heal"][:3000]
    assert "should_commit=False" not in res["after_heal"]
    assert len(res["common"]) >= 2 and all(a == b for a, b in res["common"].values())


@pytest.mark.training
@pytest.mark.timeout(420)
def test_without_the_floor_the_survivor_aborts_its_step(make_run) -> None:
    res = _slow_heal(make_run, floor=False)
    assert res["served_s"] > _preset_pg_timeout_s()
    assert "[ftslurm] fix heal_timeout_floor: OFF" in res["r0"]
    assert "[ftslurm] heal timeout floor:" not in res["r0"]
    first = COMMIT.search(res["after_heal"])
    assert first and first[1] == "False", res["after_heal"][:3000]
