"""The heal transport options (ftslurm/replica/transport.py) and how fix 4 (fixes.py) hands the
chosen one to torchft's Manager: the knobs that select it, the real torchft objects it builds,
the Manager's own process group for `pg`, the in-place receive bound once the Manager exists
(only with the synchronous quorum), and the line the worker logs. No training: the heal itself
is in tests/test_bench_heal_speed.py (every option, two processes) and
tests/test_replica_training.py (every option, real replicas)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")
pytest.importorskip("torchtitan")

from ftslurm import knobs  # noqa: E402
from ftslurm.errors import UserError  # noqa: E402
from ftslurm.replica import fixes, transport  # noqa: E402

T = timedelta(seconds=7)


@pytest.fixture
def patch() -> Iterator:
    """Fix 4 installed on a fresh Manager stand-in, torchtitan's module restored after."""
    import torchtitan.components.ft.manager as tt_ft

    before = tt_ft.ft
    try:
        yield tt_ft
    finally:
        tt_ft.ft = before


def test_the_knobs_select_the_option_and_its_chunks() -> None:
    assert transport.choice({}) == transport.Choice("pg")
    assert transport.choice({"FTSLURM_HEAL_TRANSPORT": "HTTP", "FTSLURM_HEAL_CHUNKS": "8"}) == (
        transport.Choice("http")  # chunks only count for http-chunked
    )
    chunked = transport.choice({"FTSLURM_HEAL_TRANSPORT": "http-chunked"})
    assert chunked == transport.Choice("http-chunked", 4) and chunked.label == "http-chunked:4"
    assert transport.OPTIONS == knobs.KNOBS["FTSLURM_HEAL_TRANSPORT"].choices
    with pytest.raises(UserError, match="FTSLURM_HEAL_TRANSPORT='ftp' is not supported"):
        knobs.check({"FTSLURM_HEAL_TRANSPORT": "ftp"})
    with pytest.raises(UserError, match="FTSLURM_HEAL_CHUNKS=0 must be at least 1"):
        knobs.check({"FTSLURM_HEAL_CHUNKS": "0"})


@pytest.mark.parametrize(("option", "chunks"), [("http", 0), ("http-chunked", 3)])
def test_http_options_are_torchfts_server_with_their_chunks(option: str, chunks: int) -> None:
    from torchft.checkpointing import HTTPTransport

    made = transport.build(transport.Choice(option, chunks), T)
    try:
        assert isinstance(made, HTTPTransport)
        assert made._num_chunks == chunks and made._checkpoint_lock.timeout == 7.0
        assert transport.describe(made) == (
            ("HTTPTransport", "one stream")
            if chunks == 0
            else ("HTTPTransport", "3 parallel chunks")
        )
    finally:
        made.shutdown(wait=False)


def test_pg_option_needs_the_process_group_and_uses_its_device() -> None:
    from torchft.checkpointing.pg_transport import PGTransport
    from torchft.process_group import ProcessGroupGloo

    with pytest.raises(ValueError, match="needs the Manager's process group"):
        transport.build(transport.Choice("pg"), T)
    pg = ProcessGroupGloo(timeout=T)  # not configured yet, as when the Manager is built
    made = transport.build(transport.Choice("pg"), T, pg)
    assert isinstance(made, PGTransport) and made._pg is pg
    assert made._device == torch.device("cpu") and made._timeout == T
    assert transport.describe(made) == ("PGTransport", "fresh tensors, through cpu")


@pytest.mark.parametrize("option", ["http", "http-chunked", "pg"])
def test_fix_4_builds_the_chosen_transport_from_the_managers_arguments(
    patch, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    from torchft.process_group import ProcessGroupGloo

    monkeypatch.setenv("FTSLURM_HEAL_TRANSPORT", option)
    monkeypatch.setenv("FTSLURM_HEAL_CHUNKS", "5")
    monkeypatch.setenv("FTSLURM_HEAL_TIMEOUT_S", "42")
    fixes.fix_heal_timeout()
    pg = ProcessGroupGloo(timeout=T)
    made = patch.ft.kwargs["checkpoint_transport"]({"pg": pg, "min_replica_size": 1})
    try:
        if option == "pg":
            assert made._pg is pg and made._timeout == timedelta(seconds=42)
        else:
            assert made._num_chunks == (5 if option == "http-chunked" else 0)
            assert made._checkpoint_lock.timeout == 42.0
    finally:
        made.shutdown(wait=False)


class _Manager:
    """The attributes of torchft's Manager that the fix reads back."""

    def __init__(self, made: object, use_async_quorum: bool) -> None:
        self._checkpoint_transport = made
        self._use_async_quorum = use_async_quorum
        self.live = {"w": torch.zeros(3)}

    def _manager_state_dict(self) -> dict:
        return {"user": {"default": {"model": self.live}}, "torchft": {"step": 0}}


def test_the_joiner_receives_in_place_only_with_the_synchronous_quorum() -> None:
    from torchft.process_group import ProcessGroupGloo

    pg = ProcessGroupGloo(timeout=T)
    sync = _Manager(transport.build(transport.Choice("pg"), T, pg), use_async_quorum=False)
    line = fixes._transport_line(sync)
    assert sync._checkpoint_transport._state_dict() is not None
    assert (
        sync._checkpoint_transport._state_dict()["user"]["default"]["model"]["w"] is sync.live["w"]
    )
    assert line == (
        "[ftslurm] heal transport: PGTransport, survivor waits up to 7 s for each tensor sent "
        "(in-place receive, through cpu)"
    )
    # async quorum (fix 1 off): state_dict() on the quorum thread would race the forward pass
    racy = _Manager(transport.build(transport.Choice("pg"), T, pg), use_async_quorum=True)
    assert fixes._transport_line(racy).endswith("(fresh tensors, through cpu)")
    assert racy._checkpoint_transport._state_dict is None
