"""Shared fixtures: every test's own state (HOME, XDG folders, outputs, the Lighthouse's state
and the event log in tmp folders, so no test reads or writes a user's files or the checkout's
outputs/), fake programs on PATH, Lighthouse state dirs stopped at the end (tests/clirun.py
holds their code and the CLI runners), and a real local Slurm cluster for the whole session
(own state dir and ports, so it never touches a user's cluster), stopped by pid at the end."""

from __future__ import annotations

import _posixsubprocess
import gc
import multiprocessing.process
import os
import signal
import site
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ftslurm.cluster import local
from ftslurm.cluster.config import ClusterSpec
from tests.clirun import FakeBin, LighthouseDirs

CLUSTER_NODES = 3

# --------------------------------------------------------------------------------------------
# Test tiers (docs/development.md): `unit` tests start no process, and the guard below makes
# one that does fail; every other test is `process`, `slurm` or `training`.

TIERS = ("unit", "process", "slurm", "training")
# the fixtures that start the real local Slurm cluster: a test that asks for one is `slurm`,
# so that `-m "not slurm"` never starts Slurm as root, whatever the test's own marks say
SLURM_FIXTURES = {"slurm_cluster", "_session_cluster"}


class ProcessInUnitTest(AssertionError):
    """A test marked `unit` started (or tried to start) a process."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Before `-m` selects, give each test its tier: a test that asks for the cluster is
    `slurm`; a module's (or class's) `unit` reaches only its tests that carry no heavier tier
    of their own (`@pytest.mark.process` on the few tests of a pure module that start one);
    a test in no tier is `process` (the default for a test nobody has sorted)."""
    heavier = set(TIERS) - {"unit"}
    holders = {id(node): node for item in items for node in item.listchain()[:-1]
               if any(m.name == "unit" for m in node.own_markers)}  # fmt: skip
    for node in holders.values():
        node.own_markers[:] = [m for m in node.own_markers if m.name != "unit"]
    for item in items:
        names = {m.name for m in item.iter_markers()}
        if SLURM_FIXTURES & set(getattr(item, "fixturenames", ())) and "slurm" not in names:
            item.add_marker("slurm")
            names.add("slurm")
        inherits_unit = any(id(node) in holders for node in item.listchain()[:-1])
        if inherits_unit and not names & heavier:
            item.add_marker("unit")
        elif not names & set(TIERS):
            item.add_marker("process")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, torchtitan, every test module's AST) lives for the
    whole run: frozen, the collector no longer walks it on each full collection."""
    gc.freeze()


def pytest_report_collectionfinish(items: list[pytest.Item]) -> str | None:
    """Says up front when the selected tests will start the local Slurm cluster as root."""
    slurm = sum(1 for item in items if item.get_closest_marker("slurm"))
    if slurm and os.geteuid() == 0:
        return (f"{slurm} selected test(s) are marked slurm: they start the local Slurm cluster "
                'as root (-m "not slurm" leaves Slurm alone)')  # fmt: skip
    return None


def _refuse(what: str, started: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        shown = " ".join(map(str, args[0])) if args and isinstance(args[0], list) else ""
        message = (f"a test marked unit started a process ({what}{f': {shown}' if shown else ''})"
                   "; start none, or take the test out of the unit tier")  # fmt: skip
        started.append(message)
        raise ProcessInUnitTest(message)

    return refuse


@contextmanager
def _no_processes(started: list[str]) -> Iterator[None]:
    """Every way this interpreter starts a process raises `ProcessInUnitTest` (and records
    it, for code that swallows the error): subprocess (so ftslurm.runner too), fork, exec,
    posix_spawn, os.system, multiprocessing."""

    def popen_child(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        _refuse("subprocess.Popen", started)(list(args) if isinstance(args, (list, tuple))
                                             else [args])  # fmt: skip

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "_execute_child", popen_child)
        mp.setattr(_posixsubprocess, "fork_exec", _refuse("_posixsubprocess.fork_exec", started))
        mp.setattr(multiprocessing.process.BaseProcess, "start",
                   _refuse("multiprocessing start", started))  # fmt: skip
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv",
                     "execve"):  # fmt: skip
            if hasattr(os, name):
                mp.setattr(os, name, _refuse(f"os.{name}", started))
        yield


def _guard(item: pytest.Item, whole: bool = True) -> Iterator[None]:
    """Runs one phase of a unit test with processes refused; fails the phase when a process
    start was refused, even if the code under test caught the error. `whole` False: the phase
    may also run other tests' fixtures (the module's or session's teardown), not guarded."""
    if item.get_closest_marker("unit") is None or not whole:
        return (yield)
    started: list[str] = []
    with _no_processes(started):
        result = yield
    if started:
        raise ProcessInUnitTest("; ".join(dict.fromkeys(started)))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # after a module's last test, its module fixtures (and the session's) are torn down here:
    # stopping what a process test started runs commands, which is not this test's doing
    same_module = nextitem is not None and getattr(nextitem, "module", None) is getattr(
        item, "module", None)
    return (yield from _guard(item, same_module))


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


# --------------------------------------------------------------------------------------------
# State isolation: ftslurm keeps state in the checkout's outputs/ (paths.py) and the Lighthouse's
# and event log's knobs; a test that ran with them would read a user's runs (a report picking
# up outputs/lighthouse/lighthouse.log) or write beside them. The session's values cover what
# module and session fixtures do; each test then gets folders of its own, except for a name a
# module's fixture set itself (the Slurm cluster's, tests/ftjob.py's outputs), and a test's own
# monkeypatch or env comes after and wins.

# HOME and the XDG folders programs keep user state in (config, data, state)
HOME_VARS = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")


def _state_env(root: Path) -> dict[str, str]:
    """The isolated values under `root`: a home (created: programs expect it to exist) and
    ftslurm's state knobs (created by ftslurm when it writes, as in a fresh checkout)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    outputs = root / "outputs"
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "FTSLURM_OUTPUTS": str(outputs),
        "FTSLURM_LIGHTHOUSE_DIR": str(outputs / "lighthouse"),
        "FTSLURM_EVENTS": str(outputs / "events.jsonl"),
        "FTSLURM_CLUSTER_DIR": str(outputs / "cluster"),
    }


@pytest.fixture(scope="session", autouse=True)
def _session_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The session's isolated values (see above), returned for `isolated_state` to compare.
    Caches stay the user's (XDG_CACHE_HOME, where it was before HOME moved): matplotlib's font
    cache, built anew, runs `fc-list` in a unit test, and a fresh datasets cache per test
    costs seconds each. So do the user's site-packages (PYTHONUSERBASE: it follows HOME
    otherwise): installed code is not state."""
    root = tmp_path_factory.mktemp("session-state")
    home = Path.home()
    values = _state_env(root)
    values.update(XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME") or str(home / ".cache"),
                  PYTHONUSERBASE=os.environ.get("PYTHONUSERBASE") or site.getuserbase())
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield values


@pytest.fixture(autouse=True)
def isolated_state(
    _session_state: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Each test's own HOME, XDG folders, outputs, Lighthouse state dir, event log and
    cluster dir (the names it set, as `_state_env` names them); a name a module's or class's
    fixture set to its own value keeps it."""
    root = tmp_path_factory.mktemp("state", numbered=True)
    values = {name: value for name, value in _state_env(root).items()
              if os.environ.get(name) == _session_state[name]}  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setenv(name, value)
        yield values


@pytest.fixture(scope="module")
def no_user_state(tmp_path_factory: pytest.TempPathFactory):
    """The Lighthouse's state, the event log and outputs/ in one empty folder for a whole
    module (what `isolated_state` gives each test), for a module whose module-scoped fixtures
    write state the module's tests then read."""
    state = tmp_path_factory.mktemp("user-state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FTSLURM_LIGHTHOUSE_DIR", str(state / "lighthouse"))
        mp.setenv("FTSLURM_EVENTS", str(state / "events.jsonl"))
        mp.setenv("FTSLURM_OUTPUTS", str(state / "outputs"))
        yield


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBin:
    """A folder first on PATH for the test's fake programs (`fake_bin.add("sbatch", body)`)."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return FakeBin(folder)


@pytest.fixture
def lighthouse_dirs(tmp_path: Path) -> Iterator[LighthouseDirs]:
    """Lighthouse state dirs (`lighthouse_dirs.new()`), each stopped at the end by its
    pidfile and state (`ftslurm lighthouse stop`), whatever the test did."""
    dirs = LighthouseDirs(tmp_path)
    try:
        yield dirs
    finally:
        dirs.stop_all()
