"""The CLI skeleton: fast, torch-free, one-line errors with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import __version__
from ftslurm.cli import COMMANDS
from tests.clirun import ftslurm, ftslurm_popen, invoke


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
    result = invoke("--version")
    assert result.exit_code == 0
    assert __version__ in result.output


@pytest.mark.parametrize(
    "argv",
    [
        ["no-such-command"],
        ["cluster", "up", "--nodes", "many"],
        ["cluster", "--bogus"],
        ["simulate-failure", "--replica", "1", "--dry-run", "--down-for", "nan"],
        ["simulate-failure", "--replica", "1", "--dry-run", "--down-for", "inf"],
        ["lighthouse", "start", "--log-max-mb", "nan"],
        ["demo", "--dry-run", "--down-for", "inf"],
        ["demo", "--dry-run", "--timeout", "nan"],
    ],
)
def test_user_mistakes_exit_2_without_traceback(argv):
    out = ftslurm(*argv)
    assert out.returncode == 2
    assert out.stderr.startswith("Error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "--help`" in out.stderr


@pytest.mark.parametrize(
    "argv, where",
    [
        (["lighthouse", "start", "--bind"], "ftslurm lighthouse start"),
        (["status", "--job"], "ftslurm status"),
        (["lighthouse", "--bogus"], "ftslurm lighthouse"),
        (["no-such-command", "--job"], "ftslurm"),
    ],
)
def test_usage_error_names_the_help_of_the_command_used(argv, where):
    """click raises "Option '--bind' requires an argument" without a context: the help named
    must still be the sub-command's, not `ftslurm --help`."""
    out = ftslurm(*argv)
    where = where.replace("ftslurm", "python -m ftslurm")  # click's name for `-m ftslurm`
    assert out.returncode == 2 and out.stderr.endswith(f"See `{where} --help`.\n"), out.stderr


def test_every_command_module_imports():
    import importlib

    import click

    for name, (target, _) in COMMANDS.items():
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command) and command.name == name, (name, command)


def test_user_error_is_one_line_exit_2(tmp_path):
    env_dir = tmp_path / "nothing"
    out = ftslurm("cluster", "env", "--state-dir", str(env_dir))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "ftslurm cluster up" in out.stderr


GUIDE_RUN = Path(__file__).parent / "fixtures" / "report" / "guide"


def _run_into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """stdout is a pipe whose reader is already gone (`ftslurm ... | head` after head quit):
    deterministic, unlike racing a real `head`."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ftslurm", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)


@pytest.fixture(scope="module")
def guide_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("outputs") / "tft-12"
    run.mkdir()
    for log in GUIDE_RUN.glob("tft-12_*.out"):
        (run / log.name).write_bytes(log.read_bytes())
    return run


@pytest.mark.parametrize(
    "argv",
    [
        ["logs", "--run-dir", "GUIDE_RUN", "-n", "100000"],
        ["logs", "--help"],
        ["report", str(GUIDE_RUN)],
        ["report", str(GUIDE_RUN), "--json"],
        ["--help"],
    ],
)
def test_reader_that_stops_early_is_not_an_error(argv, guide_run):
    out = _run_into_closed_pipe(*(str(guide_run) if a == "GUIDE_RUN" else a for a in argv))
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.parametrize("group", ["lighthouse", "cluster"])
@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_closed_stdout_keeps_the_answer_of_a_status(group, fmt, tmp_path):
    """`ftslurm lighthouse status | head -1` under `set -o pipefail`: 3 = not running, as
    without the pipe (cut short, the command still answers with its exit code)."""
    out = _run_into_closed_pipe(group, "status", *fmt, "--state-dir", str(tmp_path / "none"))
    assert (out.returncode, out.stderr) == (3, "")


def test_closed_stdout_does_not_hide_a_user_error(tmp_path):
    out = _run_into_closed_pipe("report", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "Error:" in out.stderr


@pytest.mark.parametrize("what", ["logs", "lighthouse logs"])
def test_follow_stops_when_its_reader_is_gone(what, guide_run, tmp_path):
    """`ftslurm logs -f | grep -m1 ...` must end when grep does, like `tail -f`, even though
    no new line is ever written."""
    from ftslurm import lighthouse

    if what == "logs":
        argv = ["logs", "-f", "--run-dir", str(guide_run)]
    else:
        log = lighthouse.log_path(tmp_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes((GUIDE_RUN / "lighthouse.log").read_bytes())
        argv = ["lighthouse", "logs", "-f", "--state-dir", str(tmp_path)]
    p = ftslurm_popen(*argv)
    try:
        assert p.stdout is not None and p.stdout.readline()
        p.stdout.close()
        assert p.wait(timeout=20) == 0
        assert p.stderr is not None and p.stderr.read() == ""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_submit_names_the_missing_script(tmp_path, monkeypatch):
    from ftslurm.commands.submit import split_submit_args
    from ftslurm.errors import UserError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n")
    assert split_submit_args(["--array=0-1", "job.sh", "x"]) == (["--array=0-1"], "job.sh", ["x"])
    with pytest.raises(UserError, match=r"^no such script: jbo\.sh \(in "):
        split_submit_args(["--array=0-1", "jbo.sh"])
    with pytest.raises(UserError, match="^no script given: ftslurm submit --array=0-1 "):
        split_submit_args(["--array=0-1"])


def test_a_group_without_sub_command_prints_its_help_not_an_error():
    out = ftslurm("lighthouse")
    assert out.returncode == 2 and out.stderr.startswith("Usage: ")
    assert "Error" not in out.stderr and "ftslurm lighthouse start" in out.stderr


def test_a_user_error_quoting_a_control_sequence_shows_it_escaped(tmp_path):
    """An error that quotes what the user gave (a path with an OSC title sequence here) is
    printed with the control characters escaped: the terminal shows them and does not act."""
    path = tmp_path / "x\x1b]0;pwned\x07"
    out = ftslurm("report", str(path))
    assert out.returncode == 2, out
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "x\\x1b]0;pwned\\x07" in out.stderr and out.stderr.startswith("Error: ")
