"""A Slurm client for unit tests: the real `SlurmClient` (its argument lists, parsers and error
texts) whose tools answer from a script (recorded output, tests/fixtures/slurm) instead of
running, and which records every command it was asked to run.

    fake = FakeSlurm().on(args.sinfo_nodes_cmd(), recorded("sinfo_alloc.txt")).install(mp)
    ... code under test calls ftslurm.slurm.client ...
    assert fake.calls == [args.sinfo_nodes_cmd()]

An answer is the tool's stdout (exit 0), a `Completed` (any exit code: with check, a non-zero
one raises CommandError as the runner does), an exception to raise, or a function of the
argument list returning one of those. Several answers are given one per call, the last one
repeating (a job's states as it is polled). A command without an answer exits 1, as a tool
that lacks the option would (`squeue --json` on an old Slurm).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Union

import pytest

from ftslurm.runner import CommandError, Completed
from ftslurm.slurm import client

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"

Answer = Union[str, Completed, BaseException, Callable[[list[str]], "Answer"]]


def recorded(name: str) -> str:
    """A file of tests/fixtures/slurm (see its README for the command and the moment)."""
    return (FIXTURES / name).read_text()


class FakeSlurm(client.SlurmClient):
    """The client with scripted tools. `missing`: tools `which` does not find."""

    def __init__(self, env: Mapping[str, str] | None = None, missing: Sequence[str] = ()):
        super().__init__(env={"PATH": "/fake/bin", **(env or {})}, local_conf=Path("/nonexistent"))
        self.missing = set(missing)
        self.answers: list[tuple[list[str], list[Answer]]] = []
        self.calls: list[list[str]] = []

    def on(self, cmd: Sequence[str], *answers: Answer) -> FakeSlurm:
        """Answer commands starting with `cmd` (the longest such `cmd` wins)."""
        self.answers.append((list(cmd), list(answers)))
        return self

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
        """Every `ftslurm.slurm.client` call of the test goes to this fake."""
        monkeypatch.setattr(client, "override", self)
        return self

    def which(self, tool: str) -> str | None:
        return None if tool in self.missing else f"/fake/bin/{tool}"

    def _run(self, cmd: list[str], timeout: float, env: dict[str, str], check: bool,
             cwd: Path | None) -> Completed:  # fmt: skip
        self.calls.append(cmd)
        scripted = [(p, a) for p, a in self.answers if cmd[: len(p)] == p]
        if not scripted:
            answer: Answer = Completed(cmd, 1, "", f"fakeslurm: no answer for {cmd}")
        else:
            _, answers = max(scripted, key=lambda pa: len(pa[0]))
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        while callable(answer):
            answer = answer(cmd)
        if isinstance(answer, BaseException):
            raise answer
        out = answer if isinstance(answer, Completed) else Completed(cmd, 0, answer, "")
        if check and out.returncode != 0:
            raise CommandError(cmd, out.returncode, out.stderr or out.stdout)
        return out
