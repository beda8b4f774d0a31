"""The one place that runs external commands.

Every subprocess in ftslurm goes through `run` (wait for the result) or `spawn` (start and
return): argument lists only, never a shell, a timeout on every wait, output captured, and one
error type, `CommandError`, that carries the command, its exit code and its stderr so a caller
can turn it into a one-line message.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ftslurm import safefile

DEFAULT_TIMEOUT_S = 60.0


class CommandError(Exception):
    """A command failed to start, exited non-zero, or ran past its timeout."""

    def __init__(self, cmd: Sequence[str], returncode: int | None, stderr: str, reason: str = ""):
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stderr = stderr
        self.reason = reason
        super().__init__(self.one_line())

    def one_line(self) -> str:
        what = self.reason or f"exit code {self.returncode}"
        last = self.stderr.strip().splitlines()[-1] if self.stderr.strip() else ""
        msg = f"`{shlex.join(self.cmd)}` failed ({what})"
        return f"{msg}: {last}" if last else msg


@dataclass(frozen=True)
class Completed:
    """The result of a finished command."""

    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str


def _env(env: Mapping[str, str] | None, extra_env: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ if env is None else env)
    merged.update(extra_env or {})
    return merged


def run(
    cmd: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    input: str | None = None,
) -> Completed:
    """Run `cmd` to completion and capture its output.

    Raises CommandError when the program is missing, when it times out, and (with check=True)
    when it exits non-zero.
    """
    cmd = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=_env(env, extra_env),
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as e:
        raise CommandError(cmd, None, "", reason=f"{cmd[0]}: not found") from e
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        raise CommandError(cmd, None, err, reason=f"timed out after {timeout:g} s") from e
    if check and proc.returncode != 0:
        raise CommandError(cmd, proc.returncode, proc.stderr or proc.stdout)
    return Completed(cmd, proc.returncode, proc.stdout, proc.stderr)


def spawn(
    cmd: Sequence[str],
    *,
    log_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    detach: bool = True,
    inherit_output: bool = False,
    output_filter: OutputFilter | None = None,
) -> subprocess.Popen:
    """Start `cmd` without waiting: stdout and stderr appended to `log_path` (or discarded;
    created 0o600, and a link planted at its name is refused: `safefile.open_append`).

    inherit_output=True: the child writes to our own stdout/stderr instead (a wrapper whose
    output is already redirected, like the FT script's per-attempt log).
    With `output_filter` as well, its stdout and stderr come through a pipe and the filter
    (`filtered_output`) before they reach our stdout; `output_done` waits for the last of it.
    With detach=True the child gets its own session, so it survives the terminal (logout,
    Ctrl-C in the shell that started it). Callers track it by pid (see ftslurm.daemon).
    """
    cmd = [str(c) for c in cmd]
    out: int | None = subprocess.DEVNULL
    if inherit_output and output_filter is not None:
        return _spawn_filtered(cmd, output_filter, _env(env, extra_env), cwd, detach)
    if inherit_output:
        out = None
    elif log_path:
        out = safefile.open_append(log_path)  # never through a link planted at its name
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=None if inherit_output else subprocess.STDOUT,
            env=_env(env, extra_env),
            cwd=cwd,
            start_new_session=detach,
        )
    except FileNotFoundError as e:
        raise CommandError(cmd, None, "", reason=f"{cmd[0]}: not found") from e
    finally:
        if out not in (None, subprocess.DEVNULL):
            os.close(out)


Child = subprocess.Popen  # what spawn returns, for callers' type hints


class OutputFilter(Protocol):
    """What `spawn(output_filter=...)` passes a child's output through (logfilter.py's)."""

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


_COPIERS: dict[int, threading.Thread] = {}  # child pid -> the thread copying its output


def _spawn_filtered(cmd: list[str], output_filter: OutputFilter, env: dict[str, str],
                    cwd: str | Path | None, detach: bool) -> subprocess.Popen:  # fmt: skip
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=write_end,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=detach)  # fmt: skip
    except FileNotFoundError as e:
        os.close(read_end)
        raise CommandError(cmd, None, "", reason=f"{cmd[0]}: not found") from e
    finally:
        os.close(write_end)
    copier = threading.Thread(target=filtered_output, args=(read_end, output_filter, 1),
                              name=f"output-of-{proc.pid}", daemon=True)  # fmt: skip
    copier.start()
    _COPIERS[proc.pid] = copier
    return proc


def filtered_output(read_fd: int, output_filter: OutputFilter, write_fd: int) -> None:
    """Copy `read_fd` through `output_filter` to `write_fd` until every writer closed it, then
    close it. It never stops reading before that: a child whose pipe filled up would block
    in its next write (training stopped by its own log). A write that fails (a full disk)
    loses that piece, not the rest; a filter that raises is dropped and the rest copied as
    it comes (the Lighthouse's log writer does the same)."""
    shorten: OutputFilter | None = output_filter
    try:
        while chunk := os.read(read_fd, 1 << 16):
            if shorten is not None:
                try:
                    chunk = shorten.feed(chunk)
                except Exception:  # noqa: BLE001 - the worker must never block on its log
                    shorten = None  # this chunk and the rest as they come
            _write_all(write_fd, chunk)
        if shorten is not None:
            with contextlib.suppress(Exception):
                _write_all(write_fd, shorten.flush())
    finally:
        os.close(read_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
        except OSError:
            return


def output_done(child: Child, timeout: float) -> bool:
    """Wait up to `timeout` seconds until the filtered output of `child` (spawn's
    output_filter) is all written: its pipe closes once the child and every process that
    inherited it have exited. True when done (or there was no filter)."""
    copier = _COPIERS.get(child.pid)
    if copier is None:
        return True
    copier.join(timeout)
    if copier.is_alive():
        return False
    _COPIERS.pop(child.pid, None)
    return True


def wait_for_exit(child: Child, timeout: float | None) -> int | None:
    """`child`'s return code once it exits, or None when it still runs after `timeout`
    seconds (None: wait as long as it takes)."""
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
