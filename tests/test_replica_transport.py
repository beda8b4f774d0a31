"""The heal transport options (replica/worker/transport.py) and how fix 4 (fixes.py) hands the
chosen one to torchft's Manager: the knobs that select it, the real torchft objects it builds,
the Manager's own process group for `pg`, the in-place receive bound once the Manager exists
(only with the synchronous quorum), and the line the worker logs. No training: the heal itself
is in tests/test_bench_heal_speed.py (every option, two processes) and
tests/test_replica_training.py (every option, real replicas)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")
pytest.importorskip("torchtitan")

from ftslurm import knobs  # noqa: E402
from ftslurm.errors import UserError  # noqa: E402
from ftslurm.replica.worker import fixes, transport  # noqa: E402

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
    assert chunked == transport.Choice("http-chunked", 8) and chunked.label == "http-chunked:8"
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
    fixes._receive_in_place(sync)  # what the Manager stand-in runs once the Manager is built
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
    fixes._receive_in_place(racy)
    assert fixes._transport_line(racy).endswith("(fresh tensors, through cpu)")
    assert racy._checkpoint_transport._state_dict is None


# --------------------------------------------------------------------------------------------
# Fix 6: the cross-replica timeouts cover a heal (the slow heal itself, in real training:
# tests/test_replica_heal_timeout.py)


def test_state_bytes_counts_every_tensor_leaf_and_no_other() -> None:
    state = {"user": {"m": {"w": torch.zeros(10, 4), "b": torch.zeros(3, dtype=torch.float16)},
                      "opt": [{"step": torch.tensor(2.0)}, {"lr": 0.1}]},
             "torchft": {"step": 4, "batches_committed": 8}}  # fmt: skip
    assert transport.state_bytes(state) == 10 * 4 * 4 + 3 * 2 + 4


def test_the_budget_adds_twice_the_heal_to_the_configured_timeout() -> None:
    budget = transport.HealBudget(state_bytes=12_000_000_000, mbps=500, configured_s=10)
    assert budget.heal_s == 24.0 and budget.timeout_s == 58
    assert transport.HealBudget(74_048_107, 500, 10).timeout_s == 11  # the CPU debug model
    assert budget.line(60, 60) == (
        "[ftslurm] heal timeout floor: the state is 12.000 GB per rank; at 500 MB/s "
        "(FTSLURM_HEAL_MBPS) a heal takes ~24.0 s; cross-replica timeout 10 s -> 58 s (twice "
        "the heal on top), torchft Manager timeout 60 s -> 60 s"
    )


class _QuorumManager:
    """torchft Manager's attributes fix 6 reads and sets, with a real (unconfigured) pg."""

    def __init__(self, pg: object, state: object) -> None:
        self._pg = pg
        self._timeout = timedelta(seconds=60)
        self._state = state
        self.quorums = 0

    def _manager_state_dict(self) -> object:
        if isinstance(self._state, Exception):
            raise self._state
        return self._state

    def start_quorum(self, allow_heal: bool = True) -> None:
        self.quorums += 1


def test_the_first_quorum_raises_the_pg_and_manager_timeouts_once(capsys) -> None:
    from torchft.process_group import ProcessGroupGloo

    pg = ProcessGroupGloo(timeout=timedelta(seconds=10))
    manager = _QuorumManager(pg, {"w": torch.zeros(25_000_000)})  # 100 MB
    fixes._floor_at_first_quorum(manager, mbps=1)  # 100 s a heal
    assert manager.quorums == 0 and capsys.readouterr().out == ""  # nothing before a quorum
    manager.start_quorum(allow_heal=True)
    manager.start_quorum()
    assert manager.quorums == 2
    assert pg._timeout == timedelta(seconds=210) and manager._timeout == timedelta(seconds=210)
    assert capsys.readouterr().out == (
        "[ftslurm] heal timeout floor: the state is 0.100 GB per rank; at 1 MB/s "
        "(FTSLURM_HEAL_MBPS) a heal takes ~100.0 s; cross-replica timeout 10 s -> 210 s (twice "
        "the heal on top), torchft Manager timeout 60 s -> 210 s\n"
    )


def test_a_floor_that_cannot_be_sized_leaves_the_timeouts_and_training_alone(capsys) -> None:
    from torchft.process_group import ProcessGroupGloo

    pg = ProcessGroupGloo(timeout=timedelta(seconds=10))
    manager = _QuorumManager(pg, AssertionError("user state_dict is not initialized."))
    fixes._floor_at_first_quorum(manager, mbps=500)
    manager.start_quorum()
    assert manager.quorums == 1 and pg._timeout == timedelta(seconds=10)
    assert capsys.readouterr().out == (
        "[ftslurm] heal timeout floor: not set (AssertionError: user state_dict is not "
        "initialized.)\n"
    )


def test_fix_6_finishes_every_manager_the_stand_in_builds(patch, monkeypatch) -> None:
    monkeypatch.setenv("FTSLURM_HEAL_MBPS", "250")
    fixes.fix_heal_timeout_floor()
    seen = {}
    monkeypatch.setattr(
        fixes, "_floor_at_first_quorum", lambda m, mbps: seen.update(m=m, mbps=mbps)
    )
    patch.ft.after["heal_timeout_floor"]("manager")
    assert seen == {"m": "manager", "mbps": 250}
