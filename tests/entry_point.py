"""`ftslurm ARGV` through its console entry point (`ftslurm.cli.main`) in this process: unlike
tests/clirun.py's `invoke` (click's runner), it goes through main's own error handling, so a
unit test sees the exit code and the one `Error:` line a user would, and starts no process."""

from __future__ import annotations

import sys

import pytest


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str):
    """`ftslurm ARGV` through the console entry point (its error handling included), in this
    process: (exit code, stdout, stderr)."""
    from ftslurm.cli import main

    monkeypatch.setattr(sys, "argv", ["ftslurm", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def error_line(err: str) -> str:
    """`err` (a run's stderr) is one `Error:` line and no traceback; returns it."""
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err
