"""Pidfiles and daemon state files that hold no usable pid (ftslurm/procs.py's read_pidfile and
the managed Lighthouse's state): garbage, out of range, not UTF-8 or not a regular file is no
pid, never an exception; `lighthouse status` and `stop` take such a state for stale, say "not
running" in one line and remove it (an out-of-range pid was an OverflowError in os.waitpid /
os.kill)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftslurm import procs
from tests.clirun import lighthouse_cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text", ["99999999999999999999", "4194305", "0", "-5", "1e23", "١٢٣", "", "12 13"]
)
def test_a_pidfile_with_garbage_is_no_pid(tmp_path: Path, text: str) -> None:
    f = tmp_path / "x.pid"
    f.write_text(text + "\n")
    assert procs.read_pidfile(f) is None
    assert procs.pid_alive(procs.read_pidfile(f)) is False


def test_a_pidfile_with_a_pid_is_read(tmp_path: Path) -> None:
    f = tmp_path / "x.pid"
    f.write_text(" 4194304\n")
    assert procs.read_pidfile(f) == 4194304
    assert procs.valid_pid(1.0) is None and procs.valid_pid(True) is None


# ------------------------------------------------------------------ managed daemon pidfiles


_STATE = {"name": "lighthouse", "start_ticks": None, "started_at": 0.0, "cmd": [],
          "marker": "torchft_lighthouse"}  # fmt: skip


@pytest.mark.process
@pytest.mark.parametrize(
    "files",
    [
        {"lighthouse.pid": "99999999999999999999\n"},
        {"lighthouse.pid": "-1\n"},
        {"lighthouse.pid": b"\xff\xfe\n"},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 99999999999999999999})},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 1e23})},
        {"lighthouse.json": json.dumps({**_STATE, "pid": 0}), "lighthouse.pid": "0\n"},
        {"lighthouse.json": "[]", "lighthouse.pid": "1e23\n"},
    ],
    ids=["pidfile-huge", "pidfile-negative", "pidfile-not-utf8", "state-huge", "state-float",
         "state-zero", "state-list"],
)
@pytest.mark.parametrize("command", ["status", "stop"])
def test_a_garbage_lighthouse_pid_is_stale_and_removed(tmp_path: Path, files, command):
    """Through the real CLI: one line, no traceback, and the files cleaned (they stayed, and
    an out-of-range pid was an OverflowError in os.waitpid / os.kill)."""
    state = tmp_path / "lh"
    state.mkdir()
    for name, text in files.items():
        (state / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    out = lighthouse_cli(state, command)
    assert "Traceback" not in out.stderr and "Error" not in out.stderr, out.stderr
    if command == "status":
        assert out.returncode == 3 and "not running" in out.stdout.lower(), out.stdout
    else:
        assert out.returncode == 0 and out.stderr.startswith("Lighthouse not running"), out
    assert sorted(p.name for p in state.iterdir() if p.suffix in (".pid", ".json")) == []


def test_a_pidfile_that_is_not_text_or_not_a_file_is_no_pid(tmp_path: Path) -> None:
    (tmp_path / "bytes.pid").write_bytes(b"\xff\xfe12\n")
    (tmp_path / "dir.pid").mkdir()
    assert procs.read_pidfile(tmp_path / "bytes.pid") is None
    assert procs.read_pidfile(tmp_path / "dir.pid") is None
