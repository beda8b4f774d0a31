"""Shared fixtures: a real local Slurm cluster for the whole session (own state dir and ports,
so it never touches a user's cluster), stopped by pid at the end."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ftslurm.cluster import local
from ftslurm.cluster.config import ClusterSpec

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
def _session_cluster(tmp_path_factory: pytest.TempPathFactory):
    """The session's one cluster with CLUSTER_NODES idle nodes (started once, about 10 s),
    stopped by pid at the end. It never runs apt: `.ci/run` installs slurm-wlm and munge, and
    a missing package fails the test with the command that installs it."""
    reason = _can_run_cluster()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("cluster")
    spec = local.up(nodes=CLUSTER_NODES, state_dir=state, timeout=60, install=False)
    try:
        yield spec
    finally:
        local.down(state)


@pytest.fixture(scope="module")
def slurm_cluster(_session_cluster: ClusterSpec):
    """The session's cluster, with SLURM_CONF and FTSLURM_CLUSTER_DIR pointing at it for the
    module that asks for it and restored afterwards: a later module's test cannot pass only
    because an earlier one left the cluster in the environment."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(_session_cluster.conf_path))
        mp.setenv("FTSLURM_CLUSTER_DIR", _session_cluster.state_dir)
        yield _session_cluster


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
