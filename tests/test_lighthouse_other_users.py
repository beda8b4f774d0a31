"""`lighthouse start` as root refuses what another user can change: a state dir anyone can
write, a state dir (or a folder above it) of another user, and a --binary another user owns or
can write. The "another user" is `nobody`, played by a forked child that drops root; skipped
unless the tests run as root.

Why: root ran a program another user had planted in a state dir."""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import signal
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftslurm.lighthouse import launcher
from ftslurm.wait import wait_for
from tests.clirun import lighthouse_cli, one_error_line, stop_lighthouse

pytestmark = pytest.mark.timeout(120)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user: needs root")


# the Lighthouse's output may hold bytes that are not UTF-8: replaced, never a decode error
cli = functools.partial(lighthouse_cli, errors="replace")


NOBODY = pwd.getpwnam("nobody") if "nobody" in {p.pw_name for p in pwd.getpwall()} else None


@contextlib.contextmanager
def as_nobody(body: str, **names: Path) -> Iterator[None]:
    """Run python `body` (its `names` given as Paths) as user nobody, in a forked child
    that drops root, for as long as the block runs."""
    assert NOBODY is not None
    pid = os.fork()
    if pid == 0:  # the other user
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            exec(body, {"os": os, "time": time, **names})
        finally:
            os._exit(0)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


EVIL = "import pathlib; pathlib.Path({marker!r}).write_text('ran as uid %d' % __import__('os').getuid())\n"  # noqa: E501


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
def test_root_refuses_a_state_dir_another_user_can_write(tmp_path: Path):
    """Finding 2: with a state dir anyone can write and `nobody` looping `os.replace(evil,
    'ww/torchft_lighthouse')`, `lighthouse start` as root ran `evil` as uid 0."""
    reachable = Path(tempfile.mkdtemp(prefix="ftslurm-test-"))  # pytest's folders are 0o700
    reachable.chmod(0o755)
    ww, marker = reachable / "ww", tmp_path / "pwned"
    ww.mkdir()
    ww.chmod(0o777)
    plant = textwrap.dedent("""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            evil = ww / f".evil{os.getpid()}"
            evil.write_text(EVIL)
            os.replace(evil, ww / "torchft_lighthouse")
    """)
    try:
        with as_nobody(plant, ww=ww, EVIL=EVIL.format(marker=str(marker))):
            wait_for(lambda: (ww / "torchft_lighthouse").exists(), timeout=10, what="the plant")
            for _ in range(3):
                line = one_error_line(cli(ww, "start", "--bind", "127.0.0.1:0"))
                assert f"refusing the Lighthouse state dir {ww}" in line, line
                assert "can be written by other users (mode 777)" in line, line
        assert not marker.exists(), marker.read_text()
        assert not (ww / "lighthouse.json").exists()
    finally:
        stop_lighthouse(ww)
        shutil.rmtree(reachable)


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
def test_root_refuses_a_state_dir_of_another_user(tmp_path: Path):
    """Finding 2: a state dir owned by another user was used without a word (its owner can
    replace the launcher root runs from it); so was one inside a folder of another user,
    who can rename it away and put their own in its place."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    inside = theirs / "lighthouse"
    inside.mkdir()  # root's own, in nobody's folder
    try:
        line = one_error_line(cli(theirs, "start", "--bind", "127.0.0.1:0"))
        assert f"{theirs} belongs to user nobody, not to you" in line, line
        line = one_error_line(cli(inside, "start", "--bind", "127.0.0.1:0"))
        assert f"{theirs}, a folder above it, belongs to user nobody" in line, line
        # a read-only command still reads it, and removes nothing there
        assert cli(theirs, "status").returncode == 3
    finally:
        for d in (theirs, inside):
            stop_lighthouse(d)


@needs_root
@pytest.mark.skipif(NOBODY is None, reason="no user nobody")
@pytest.mark.parametrize("how", ["owned-by-nobody", "world-writable", "folder-of-nobody"])
def test_start_refuses_a_binary_another_user_can_change(tmp_path: Path, how: str):
    """Finding 2: `start --binary` ran a binary owned by another user without a word
    (`restart` already refused a recorded one)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    binary, marker = folder / "site_lighthouse", tmp_path / "ran"
    binary.write_text(f"#!/bin/sh\necho ran >{marker}\nexec {sys.executable} "
                      f'{launcher.__file__} "$@"\n')  # fmt: skip
    binary.chmod(0o777 if how == "world-writable" else 0o755)
    if how == "owned-by-nobody":
        os.chown(binary, NOBODY.pw_uid, NOBODY.pw_gid)
    if how == "folder-of-nobody":
        os.chown(folder, NOBODY.pw_uid, NOBODY.pw_gid)
    d = tmp_path / "lh"
    try:
        line = one_error_line(cli(d, "start", "--bind", "127.0.0.1:0", "--binary", str(binary)))
        assert line.startswith(f"Error: refusing to run the Lighthouse binary {binary}: "), line
        assert not marker.exists()
    finally:
        stop_lighthouse(d)
