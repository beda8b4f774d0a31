"""A `--signal=B:USR1@<s>` whose seconds the launcher refuses is refused by `ftslurm submit`
before sbatch runs, whether it comes from the command line, $SBATCH_SIGNAL or the script's
`#SBATCH --signal` line: its margin reaches every task as FTSLURM_TIME_LIMIT_SIGNAL_S, and a
value outside that knob's range made each task fail once the queue wait was over."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from ftslurm import knobs, paths, submission
from ftslurm.errors import UserError
from tests.clirun import FakeBin, ftslurm, one_error_line

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
FT = ROOT / paths.FT_SCRIPT
KNOB = knobs.KNOBS[knobs.TIME_LIMIT_SIGNAL]


def _plan(options: list[str], script: Path = FT, **env: str) -> submission.SbatchPlan:
    full = {"PATH": os.environ["PATH"], "FTSLURM_OUTPUTS": "/nonexistent/outputs", **env}
    request = submission.SubmitRequest(str(script), [*options, "--array=0-1"], env=full)
    return submission.plan(request, say=lambda line: None)


def _ft_script_with(tmp_path: Path, directive: str) -> Path:
    """The FT script with its `#SBATCH --signal` line replaced by `directive`."""
    text = FT.read_text()
    assert "#SBATCH --signal=B:USR1@300\n" in text
    script = tmp_path / paths.FT_SCRIPT
    script.write_text(text.replace("#SBATCH --signal=B:USR1@300\n", directive + "\n"))
    return script


@pytest.mark.parametrize("at", [0, KNOB.maximum + 1, 70000, 10**12])
def test_a_signal_option_out_of_the_knobs_range_is_refused(at: int) -> None:
    with pytest.raises(UserError) as e:
        _plan([f"--signal=B:USR1@{at}"])
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"--signal=B:USR1@{at}: "), text
    assert f"takes {KNOB.minimum} to {KNOB.maximum} s ({knobs.TIME_LIMIT_SIGNAL})" in text
    with pytest.raises(UserError, match=f"USR1 {at} s"):
        _plan(["--signal", f"B:SIGUSR1@{at}"])  # the two-word form


def test_sbatch_signal_from_the_environment_is_checked() -> None:
    with pytest.raises(UserError, match="^SBATCH_SIGNAL=B:USR1@0: "):
        _plan([], SBATCH_SIGNAL="B:USR1@0")
    assert _plan([], SBATCH_SIGNAL="B:USR1@45").job_env[knobs.TIME_LIMIT_SIGNAL] == "45"


def test_the_scripts_sbatch_signal_line_is_checked(tmp_path: Path) -> None:
    script = _ft_script_with(tmp_path, "#SBATCH --signal=B:USR1@0")
    with pytest.raises(UserError, match=r"'s #SBATCH --signal=B:USR1@0: USR1 0 s"):
        _plan([], script)
    # the command line's --signal replaces the script's line, as in sbatch
    assert _plan(["--signal=B:USR1@30"], script).job_env[knobs.TIME_LIMIT_SIGNAL] == "30"


@pytest.mark.parametrize("at", [KNOB.minimum, KNOB.maximum, 300])
def test_the_knobs_whole_range_passes(at: int) -> None:
    plan = _plan([f"--signal=B:USR1@{at}"])
    assert plan.job_env[knobs.TIME_LIMIT_SIGNAL] == str(at)
    assert f"--signal=B:USR1@{at}" in plan.argv


def test_the_range_is_the_registrys(monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = dataclasses.replace(KNOB, minimum=10, maximum=500)
    monkeypatch.setitem(knobs.KNOBS, knobs.TIME_LIMIT_SIGNAL, narrow)
    with pytest.raises(UserError, match="takes 10 to 500 s"):
        _plan(["--signal=B:USR1@600"])
    with pytest.raises(UserError, match="takes 10 to 500 s"):
        _plan(["--signal=B:USR1@5"])


def test_a_signal_that_misses_the_launcher_is_not_range_checked() -> None:
    """No USR1 to the batch shell: no margin reaches the job, only the warning is said."""
    assert knobs.TIME_LIMIT_SIGNAL not in _plan(["--signal=USR1@0"]).job_env


@pytest.mark.process
def test_submit_refuses_in_one_line_and_never_runs_sbatch(fake_bin: FakeBin,
                                                          tmp_path: Path) -> None:  # fmt: skip
    ran = tmp_path / "sbatch-ran"
    fake_bin.add("sbatch", f"touch {ran}\necho 42\n")
    for argv, env in [(["--signal=B:USR1@0"], {}), ([], {"SBATCH_SIGNAL": "B:USR1@70000"})]:
        r = ftslurm("submit", *argv, "--array=0-1", str(FT), env=env, cwd=tmp_path, timeout=60)
        line = one_error_line(r)
        assert "out of range" in line and knobs.TIME_LIMIT_SIGNAL in line, line
    assert not ran.exists()
