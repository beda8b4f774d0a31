"""What `ftslurm report` takes as a log: a device, a FIFO or a socket is one line and exit 2 at
once, nothing written; a pipe is spooled into an unnamed file (nothing left behind when the
report is killed) up to a limit; a regular file is read in place."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ftslurm.errors import UserError
from ftslurm.report import sources
from tests.clirun import ftslurm, ftslurm_popen
from tests.log_inputs import STEP_LINE, env

# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def _small_files() -> None:
    """In the child: no file over 64 MiB (a report that copies /dev/zero stops there)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


def _report(*args: str, tmpdir: Path) -> subprocess.CompletedProcess:
    return ftslurm("report", *args, env=env(tmpdir.parent, TMPDIR=str(tmpdir)), inherit=False,
                   text=False, preexec_fn=_small_files)  # fmt: skip


@pytest.mark.process
def test_report_refuses_a_device_a_fifo_and_a_socket_at_once(tmp_path):
    """`report /dev/zero` copied the device into /tmp without end; a named pipe with no writer
    blocked forever; a socket failed late. Each is one line, exit 2, nothing written."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.out"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, what in (("/dev/zero", "a character device"), (str(fifo), "a named pipe"),
                           (str(sock_path), "a socket")):  # fmt: skip
            t = time.monotonic()
            for argv in ([path], ["--lighthouse", path], ["--events", path]):
                r = _report(*argv, tmpdir=spool)
                err = r.stderr.decode()
                assert r.returncode == 2 and err.count("\n") == 1, (argv, err)
                assert err.startswith(f"Error: {path}: {what}, not a log file"), err
            assert time.monotonic() - t < 30
            assert list(spool.iterdir()) == []
    finally:
        sock.close()


@pytest.mark.process
def test_a_pipe_is_spooled_into_a_file_nobody_can_leave_behind(tmp_path):
    """`report /dev/stdin` still reads a pipe (it is read twice), but into an unnamed file:
    killed while it reads (SIGKILL: no handler runs), nothing is left in TMPDIR."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    proc = ftslurm_popen("report", "/dev/stdin", env=env(tmp_path, TMPDIR=str(spool)),
                         inherit=False, text=False, stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=_small_files)  # fmt: skip
    try:
        assert proc.stdin is not None
        # a pipe holds 64 KiB: once 4 MiB are written, the report has read most of them
        proc.stdin.write(b"y" * (4 << 20))
        proc.stdin.flush()
        assert list(spool.iterdir()) == []
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert list(spool.iterdir()) == []
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()


def test_a_pipe_longer_than_the_spool_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SPOOL_MAX", 1 << 20)
    r, w = os.pipe()

    def writer() -> None:
        try:
            with os.fdopen(w, "wb") as fh:
                for _ in range(3):
                    fh.write(b"z" * (1 << 20))
        except BrokenPipeError:
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        with pytest.raises(UserError, match=r"a pipe of more than 1 MiB: save it to a file"):
            sources.find_run_files([f"/proc/self/fd/{r}"])
    finally:
        os.close(r)
        t.join(10)
    assert not t.is_alive()


def test_a_regular_file_is_read_in_place(tmp_path):
    log = tmp_path / "replica_0.log"
    log.write_text(STEP_LINE.format(i=1) + "\n")
    files = sources.find_run_files([str(log)], lighthouse=[str(log)])
    assert files.replica_logs == [log] and files.lighthouse_logs == [log]
