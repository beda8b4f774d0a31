"""What the tests of the managed Lighthouse (tests/test_lighthouse_*.py) share: the skips for a
missing torchft, `ftslurm lighthouse` run with its output read leniently, a state dir and a
running Lighthouse as fixtures (each stopped at the end by `lighthouse_dirs`, whatever the test
did), the port a state records, and a SIGKILL of what a test left running."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm import procs
from tests.clirun import LighthouseDirs, lighthouse_cli

# the real Lighthouse, started by `lighthouse start` from torchft's extension module
needs_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None, reason="needs torchft's extension module"
)
# any torchft Lighthouse: the extension module or the `torchft_lighthouse` program
needs_any_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
    reason="torchft is not installed",
)

# the Lighthouse's output may hold bytes that are not UTF-8 (the point of some tests):
# replaced, never a decode error
cli = functools.partial(lighthouse_cli, errors="replace")


def on_port(state_dir: Path) -> int:
    return json.loads((state_dir / "lighthouse.json").read_text())["extra"]["port"]


def kill(pids: list[int]) -> None:
    for pid in pids:
        if procs.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def state_dir(lighthouse_dirs: LighthouseDirs) -> Path:
    """A state dir; whatever ran from it is stopped at the end, whatever the test did."""
    return lighthouse_dirs.new("lighthouse")


@pytest.fixture
def original(lighthouse_dirs: LighthouseDirs) -> Path:
    """A running Lighthouse's state dir (lhA: the one a copy is made of, where a test copies
    it), stopped at the end."""
    d = lighthouse_dirs.new("lhA")
    r = cli(d, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0, r.stderr
    return d
