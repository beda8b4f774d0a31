"""`ftslurm submit --time-limit-signal SECONDS`: the time limit's warning margin reaches sbatch as
`--signal=B:USR1@SECONDS`, is checked like every count, and reaches the job (its launcher says
it: Slurm does not tell a job its --signal).

sbatch here is a stand-in that records its arguments and the margin the job would get; the real
time limit on the real local Slurm is tests/test_time_limit_slurm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import knobs, paths
from ftslurm.commands.submit import launcher_signal_margin, submit
from ftslurm.replica.handoff import signal_margin_line
from tests.ftjob import KNOB_ENV_RE

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
FT = ROOT / paths.FT_SCRIPT
CLASSIC = ROOT / paths.CLASSIC_SCRIPT


@pytest.fixture
def sbatch_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `sbatch` on PATH that writes its arguments and FTSLURM_TIME_LIMIT_SIGNAL_S."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch.json"
    (bin_dir / "sbatch").write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], "
        f"'margin': os.environ.get({knobs.TIME_LIMIT_SIGNAL!r})}}))\n"
        "print(42)\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in [k for k in os.environ if KNOB_ENV_RE.match(k)]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.chdir(tmp_path)
    return record


def _run(*argv: str, **env: str):
    return CliRunner().invoke(submit, ["--json", *argv], env=env)


def _sent(record: Path) -> tuple[list[str], str | None]:
    got = json.loads(record.read_text())
    return [a for a in got["argv"] if a.startswith("--signal")], got["margin"]


def test_the_option_passes_the_signal_to_sbatch_and_the_margin_to_the_job(
    sbatch_record: Path,
) -> None:
    r = _run("--time-limit-signal", "600", "--array=0-1", str(FT))
    assert r.exit_code == 0, r.output
    assert _sent(sbatch_record) == (["--signal=B:USR1@600"], "600")


def test_the_knob_does_the_same_and_an_explicit_sbatch_signal_wins_over_it(
    sbatch_record: Path,
) -> None:
    r = _run("--array=0-1", str(FT), **{knobs.TIME_LIMIT_SIGNAL: "900"})
    assert r.exit_code == 0, r.output
    assert _sent(sbatch_record) == (["--signal=B:USR1@900"], "900")
    r = _run("--signal=B:USR1@120", "--array=0-1", str(FT), **{knobs.TIME_LIMIT_SIGNAL: "900"})
    assert r.exit_code == 0, r.output
    assert _sent(sbatch_record) == (["--signal=B:USR1@120"], "120")


def test_without_the_option_the_job_is_told_the_scripts_margin(sbatch_record: Path) -> None:
    """Nothing added: the FT script's `#SBATCH --signal=B:USR1@300` applies, and the launcher
    is told 300."""
    r = _run("--array=0-1", str(FT))
    assert r.exit_code == 0, r.output
    assert _sent(sbatch_record) == ([], "300")
    assert "#SBATCH --signal=B:USR1@300" in FT.read_text()
    r = _run("--signal", "B:SIGUSR1@45", "--array=0-1", str(FT))  # the two-word form
    assert _sent(sbatch_record) == (["--signal"], "45")


def test_a_signal_that_misses_the_launcher_is_warned_about(sbatch_record: Path) -> None:
    """Without `B:` Slurm signals job steps, not the batch shell the launcher replaced."""
    r = _run("--signal=USR1@300", "--array=0-1", str(FT))
    assert r.exit_code == 0, r.output
    assert "sends the batch shell (the launcher) no USR1" in r.stderr
    assert _sent(sbatch_record) == (["--signal=USR1@300"], None)


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "0 must be at least 1"),
        ("65536", "must be at most 65535"),
        ("\u0662", "is not an integer"),  # an Arabic-Indic two: int() takes it
        ("1_0", "is not an integer"),
        ("ten", "is not an integer"),
        ("99999999999999999999999", "must be at most 65535"),
    ],
)
def test_bad_margins_are_one_error_line_and_exit_2(
    sbatch_record: Path, value: str, message: str
) -> None:
    argv = [sys.executable, "-m", "ftslurm", "submit", "--time-limit-signal", value,
            "--array=0-1", str(FT)]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out
    [line] = [x for x in out.stderr.splitlines() if x.startswith("Error")]
    assert message in line, out.stderr
    assert "Traceback" not in out.stderr
    assert not sbatch_record.exists()


def test_the_knob_is_checked_by_the_same_rules(sbatch_record: Path) -> None:
    argv = [sys.executable, "-m", "ftslurm", "submit", "--array=0-1", str(FT)]
    env = {**os.environ, knobs.TIME_LIMIT_SIGNAL: "1_0"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert out.returncode == 2 and "is not an integer" in out.stderr, out.stderr
    assert not sbatch_record.exists()


def test_the_option_and_an_sbatch_signal_together_are_refused(sbatch_record: Path) -> None:
    r = _run("--time-limit-signal", "600", "--signal=B:USR1@300", "--array=0-1", str(FT))
    assert r.exit_code != 0
    assert "give the margin once" in str(r.exception)
    assert not sbatch_record.exists()


def test_the_classic_script_is_refused_the_option(sbatch_record: Path) -> None:
    """Its launcher has no USR1 handler: the signal would end the job early."""
    r = _run("--time-limit-signal", "600", "--nodes=2", str(CLASSIC))
    assert r.exit_code != 0 and "is for llama3.1-8b-pretraining-torchft.sh" in str(r.exception)
    assert not sbatch_record.exists()


def test_help_shows_the_default_and_an_example() -> None:
    text = CliRunner().invoke(submit, ["--help"]).output
    flat = " ".join(text.split())
    assert "--time-limit-signal SECONDS" in text
    assert "else 300: the FT script's #SBATCH --signal=B:USR1@300" in flat
    assert "ftslurm submit --time-limit-signal 600 --array=0-1" in text
    assert "E.g. 600 for a 10-minute warning" in flat


@pytest.mark.parametrize(
    "spec, margin",
    [("B:USR1@300", 300), ("B:SIGUSR1@5", 5), ("B:10@7", 7), ("RB:USR1@9", 9),
     ("B:USR1", 60), ("USR1@300", None), ("B:USR2@300", None), ("R:USR1@3", None),
     ("B:USR1@x", None)],
)  # fmt: skip
def test_which_signals_reach_the_launcher(spec: str, margin: int | None) -> None:
    assert launcher_signal_margin(spec) == margin


def test_the_launcher_line_says_the_margin_only_when_it_was_told() -> None:
    line = signal_margin_line({knobs.TIME_LIMIT_SIGNAL: "600"})
    assert line is not None and "time-limit signal: USR1 600 s before the limit" in line
    assert signal_margin_line({}) is None
