"""The tests' one way to run `ftslurm`, to put fake programs on PATH and to stop a Lighthouse a
test left running; tests/conftest.py turns the last two into fixtures (`fake_bin`,
`lighthouse_dirs`) and isolates every test's state.

Two ways to run the CLI, because they test different things: `ftslurm(...)` starts the real
`python -m ftslurm` (what a user runs: the exit status, one `Error:` line on stderr, signals,
processes it leaves), `invoke(...)` calls the click command in this process (quick; a unit
test may use it, as it starts nothing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner, Result

from ftslurm import lighthouse as lh
from ftslurm import procs
from ftslurm.errors import UserError

REPO = Path(__file__).resolve().parent.parent

Env = Mapping[str, "str | None"]


def environment(env: Env | None = None, inherit: bool = True) -> dict[str, str]:
    """This process's environment with `env` on top (a None value unsets the name), or
    `env` alone when `inherit` is False (a test that built the whole environment itself,
    e.g. from the Slurm client's)."""
    full = dict(os.environ) if inherit else {}
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def ftslurm(
    *args: str | bytes,
    env: Env | None = None,
    inherit: bool = True,
    cwd: str | Path | None = None,
    timeout: float = 60,
    input: str | bytes | None = None,
    errors: str | None = "strict",
    text: bool = True,
    **run: Any,
) -> subprocess.CompletedProcess[Any]:
    """`python -m ftslurm ARGS` in a new process (this interpreter), its output captured as
    text (`text` False: as bytes, `input` bytes too). `errors="replace"` for a test whose
    point is bytes that are not UTF-8. `run`: more of subprocess.run's (`preexec_fn`)."""
    return subprocess.run(
        [sys.executable, "-m", "ftslurm", *args], env=environment(env, inherit), cwd=cwd,
        capture_output=True, text=text, timeout=timeout, input=input,
        errors=errors if text else None, **run,
    )  # fmt: skip


def lighthouse_cli(state_dir: Path | None, *args: str | bytes, command: str = "lighthouse",
                   **kw: Any) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`ftslurm COMMAND ARGS` (default `ftslurm lighthouse ARGS`) in a new process with the
    Lighthouse's state in `state_dir` (FTSLURM_LIGHTHOUSE_DIR; None: the test's own);
    `command` "" runs `ftslurm ARGS`. `kw` as `ftslurm` takes them."""
    env = dict(kw.pop("env", None) or {})
    if state_dir is not None:
        env["FTSLURM_LIGHTHOUSE_DIR"] = str(state_dir)
    return ftslurm(*([command] if command else []), *args, env=env, **kw)


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The run was a user error: exit 2, nothing on stdout, one `Error:` line on stderr and
    no traceback. Returns that line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def ftslurm_popen(
    *args: str, env: Env | None = None, inherit: bool = True, cwd: str | Path | None = None,
    **popen: Any,
) -> subprocess.Popen[Any]:  # fmt: skip
    """`python -m ftslurm ARGS` started, not waited for (a test that signals it while it runs);
    stdout and stderr are text pipes unless `popen` says otherwise. The caller waits for it."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    return subprocess.Popen([sys.executable, "-m", "ftslurm", *args],
                            env=environment(env, inherit), cwd=cwd, **popen)  # fmt: skip


def invoke(*args: str, env: Mapping[str, str | None] | None = None, input: str | None = None,
           command: click.Command | None = None) -> Result:  # fmt: skip
    """The click command (default: the whole `ftslurm` CLI) run in this process by click's
    runner: no process starts, so a unit test may use it. `env` as click's runner takes it."""
    if command is None:
        from ftslurm.cli import cli as command
    return CliRunner().invoke(command, list(args), env=env, input=input)


def executable(path: Path, text: str) -> Path:
    """`text` (with its own `#!` line) written to `path` and made executable (0755)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@dataclass
class FakeBin:
    """A folder put first on PATH, holding the fake programs (`sbatch`, `squeue`, `torchrun`)
    a test writes with `add`; PATH is restored by the fixture's monkeypatch."""

    dir: Path

    def add(self, name: str, body: str, shebang: str = "#!/bin/sh") -> Path:
        """A program `name` that runs `body` under `shebang`."""
        return executable(self.dir / name, f"{shebang}\n{body}")

    def python(self, name: str, code: str) -> Path:
        """A program `name` that runs `code` with this interpreter (ftslurm importable)."""
        return self.add(name, code, shebang=f"#!{sys.executable}")


def stop_lighthouse(state_dir: Path, grace: float = 2) -> None:
    """Whatever a test left running from `state_dir` is stopped: first as `ftslurm lighthouse
    stop` does (its pidfile and state: the Lighthouse and its session), then any process whose
    command line still holds the dir (the launcher's path is in each of its processes': a
    test that broke the state files on purpose leaves them unnamed there)."""
    with contextlib.suppress(UserError):  # a port still held: ended below
        lh.stop(state_dir, grace=grace)
    mine = str(state_dir)
    left = [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and int(p.name) != os.getpid()
            and mine in procs.proc_cmdline(int(p.name))]  # fmt: skip
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class LighthouseDirs:
    """Lighthouse state dirs of one test, under its tmp_path; each one `new` made or `track`
    was told of is stopped (`stop_lighthouse`) when the test ends, whatever it did."""

    root: Path
    dirs: list[Path] = field(default_factory=list)

    def new(self, name: str = "lighthouse") -> Path:
        """The path of a state dir not yet created (ftslurm creates it private)."""
        return self.track(self.root / name)

    def track(self, state_dir: Path) -> Path:
        """Stop whatever runs from `state_dir` too (a copy the test made of one)."""
        if state_dir not in self.dirs:
            self.dirs.append(state_dir)
        return state_dir

    def stop_all(self) -> None:
        for d in self.dirs:
            stop_lighthouse(d)
