"""The CLI skeleton: fast, torch-free, one-line errors with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from ftslurm import __version__
from ftslurm.cli import COMMANDS, cli


def test_importing_cli_does_not_import_torch():
    code = (
        "import sys, ftslurm.cli; "
        "bad = [m for m in ('torch', 'torchft', 'torchtitan', 'matplotlib') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_help_lists_every_command_without_importing_them():
    code = (
        "import sys; sys.argv = ['ftslurm', '--help']\n"
        "from ftslurm.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in sys.modules if m.startswith('ftslurm.commands.')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    for name in COMMANDS:
        assert name in out.stdout
    assert "LOADED []" in out.stdout


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


@pytest.mark.parametrize(
    "argv",
    [["no-such-command"], ["cluster", "up", "--nodes", "many"], ["cluster", "--bogus"]],
)
def test_user_mistakes_exit_2_without_traceback(argv):
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "Error:" in out.stderr


def test_every_command_module_imports():
    import importlib

    for name, (target, _) in COMMANDS.items():
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), name


def test_user_error_is_one_line_exit_2(tmp_path):
    env_dir = tmp_path / "nothing"
    out = subprocess.run(
        [sys.executable, "-m", "ftslurm", "cluster", "env", "--state-dir", str(env_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "ftslurm cluster up" in out.stderr
