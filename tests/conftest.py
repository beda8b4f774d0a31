"""Shared fixtures: a real local Slurm cluster for the whole session (own state dir and ports,
so it never touches a user's cluster), stopped by pid at the end."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ftslurm.cluster import local

CLUSTER_NODES = 3


def pytest_configure(config: pytest.Config) -> None:
    """Started as a background job (`nohup ... &`, some CI runners) this process inherits
    SIGINT ignored, and so would every command a test starts: tests that stop a command with
    SIGINT (as Ctrl-C does) would wait forever. Give this process Python's usual handler;
    the commands then start with SIGINT at its default, as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _can_run_cluster() -> str | None:
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A running cluster with CLUSTER_NODES idle nodes; SLURM_CONF and FTSLURM_CLUSTER_DIR
    point at it for the session."""
    reason = _can_run_cluster()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("cluster")
    spec = local.up(nodes=CLUSTER_NODES, state_dir=state, timeout=60)
    old = {k: os.environ.get(k) for k in ("SLURM_CONF", "FTSLURM_CLUSTER_DIR")}
    os.environ["SLURM_CONF"] = str(spec.conf_path)
    os.environ["FTSLURM_CLUSTER_DIR"] = str(state)
    try:
        yield spec
    finally:
        local.down(state)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def fixtures_dir() -> Path:
    return Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def no_user_state(tmp_path_factory: pytest.TempPathFactory):
    """The managed Lighthouse's state, the failure log and outputs/ in an empty folder for a
    module: after a user's `ftslurm demo` or `lighthouse start` in this checkout, a report of a
    recorded run would otherwise pick up outputs/lighthouse/lighthouse.log and events.jsonl."""
    state = tmp_path_factory.mktemp("user-state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FTSLURM_LIGHTHOUSE_DIR", str(state / "lighthouse"))
        mp.setenv("FTSLURM_EVENTS", str(state / "events.jsonl"))
        mp.setenv("FTSLURM_OUTPUTS", str(state / "outputs"))
        yield
