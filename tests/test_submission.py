"""The submit service (ftslurm/submission.py) without Slurm: what a request becomes (sbatch's
argv, the job's environment, the folders made first), the demo's request, and the one
`#SBATCH` reader that `ftslurm submit` and `ftslurm doctor` share. The client is the unit
tests' fake (tests/fakeslurm.py), which records what would run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ftslurm import knobs, paths, submission
from ftslurm.demo import DemoConfig, submit_request
from ftslurm.resources import sbatch_device_options
from ftslurm.runner import Completed
from ftslurm.slurm import args
from tests import fakeslurm
from tests.ftjob import KNOB_ENV_RE

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
FT = ROOT / paths.FT_SCRIPT


class RecordingSlurm(fakeslurm.FakeSlurm):
    """The fake, also recording the environment and the folder each command runs with."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[list[str], dict[str, str], Path | None]] = []

    def _run(self, cmd, timeout, env, check, cwd) -> Completed:  # noqa: ANN001
        self.runs.append((cmd, env, cwd))
        return super()._run(cmd, timeout, env, check, cwd)


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> RecordingSlurm:
    for var in [k for k in os.environ if KNOB_ENV_RE.match(k)]:
        monkeypatch.delenv(var)
    fake = RecordingSlurm().on(["sbatch"], "7\n")
    fake.install(monkeypatch)
    return fake


def test_submit_runs_the_plans_sbatch_and_makes_its_folders_first(tmp_path, slurm) -> None:
    """What `plan` says is what `submit` runs: the same argv, environment and folder."""
    req = submission.SubmitRequest(
        str(FT), ["--partition=debug"], array="0-2", spares=1,
        knobs={"DEVICE": "cpu", "STEPS": "20"}, workdir=tmp_path / "w", outputs=tmp_path / "o",
    )  # fmt: skip
    (tmp_path / "w").mkdir()
    planned = submission.plan(req)
    assert not (tmp_path / "o").exists()  # a plan makes nothing
    done = submission.submit(req)
    assert done == submission.Submitted(7, tmp_path / "o" / "torchft" / "tft-7")
    [(cmd, env, cwd)] = slurm.runs
    assert cmd == planned.argv and cwd == tmp_path / "w"
    assert cmd[:2] == ["sbatch", "--parsable"] and cmd[-1] == str(FT)
    # the device's options first (the user's win), the array, the script's own signal kept
    assert args.sbatch_cmd(str(FT), [*sbatch_device_options("cpu"),
                                     "--partition=debug", "--array=0-2"]) == cmd  # fmt: skip
    for name, value in {"DEVICE": "cpu", "STEPS": "20", "FT_SPARES": "1",
                        "FTSLURM_OUTPUTS": str(tmp_path / "o"),
                        knobs.TIME_LIMIT_SIGNAL: "300"}.items():  # fmt: skip
        assert env[name] == value == planned.job_env[name], name
    assert (tmp_path / "w" / "outputs" / "torchft").is_dir()
    assert (tmp_path / "o" / "torchft").is_dir()


def test_the_demo_submits_what_its_plan_prints(tmp_path) -> None:
    """The demo's FT array is a request of the service; its plan line is that request as the
    `ftslurm submit` command, and the job gets the demo's knobs and the script's margin."""
    cfg = DemoConfig(spares=1, backend="slurm", outputs=tmp_path / "o")
    req = submit_request(cfg, "http://login-0:1234")
    line = req.cli_line(["DEVICE"])
    assert line.startswith("DEVICE=cpu ftslurm submit --spares 1 --array=0-2 --output=")
    assert line.endswith(str(FT))
    planned = submission.plan(req)
    assert f"--array=0-{cfg.tasks - 1}" in planned.argv
    assert f"--output={tmp_path / 'o' / 'torchft'}/slurm-%A_%a.out" in planned.argv
    assert "--gpus-per-task=0" in planned.argv  # DEVICE=cpu's node
    assert planned.cwd == paths.project_root()
    env = planned.job_env
    assert (env["TORCHFT_LIGHTHOUSE"], env["FT_SPARES"], env["FTSLURM_OUTPUTS"]) == (
        "http://login-0:1234", "1", str(tmp_path / "o"))  # fmt: skip
    assert env[knobs.TIME_LIMIT_SIGNAL] == "300" and "FTSLURM_GROUP_SIZE" not in env


def test_the_time_limit_signal_is_one_option(tmp_path, slurm) -> None:
    req = submission.SubmitRequest(str(FT), array="0-1", knobs={"DEVICE": "cpu"},
                                   time_limit_signal=600, outputs=tmp_path / "o",
                                   workdir=tmp_path)  # fmt: skip
    planned = submission.plan(req)
    assert planned.argv[-2] == "--signal=B:USR1@600"
    assert planned.job_env[knobs.TIME_LIMIT_SIGNAL] == "600"
    assert req.cli_line().startswith("ftslurm submit --time-limit-signal 600 --array=0-1 ")


def test_directives_are_read_as_sbatch_reads_them(tmp_path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n#SBATCH -a0-1\n#SBATCH --gpus-per-task 4\n"
                      "#SBATCH --gpus-per-task=2\n# a comment\n\nsrun true\n"
                      "#SBATCH --gpus-per-task=16\n")  # fmt: skip
    lines = submission.header_lines(script)
    assert submission.directives(lines) == [("-a", "0-1"), ("--gpus-per-task", "4"),
                                            ("--gpus-per-task", "2")]  # fmt: skip
    assert submission.last_directive(script, "--gpus-per-task") == "2"


def test_doctor_reads_the_gpus_per_task_of_the_header_the_last_one_wins(tmp_path) -> None:
    """sbatch takes the last `#SBATCH` line of the header; a line after the first command is
    no directive (doctor read the first match anywhere in the file)."""
    from ftslurm import doctor

    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gpus-per-task=4\n#SBATCH --gpus-per-task=2\n"
                      "srun true\n#SBATCH --gpus-per-task=16\n")  # fmt: skip
    assert doctor.script_gpus_per_task(script) == 2
    script.write_text("#!/bin/bash\nsrun true\n#SBATCH --gpus-per-task=16\n")
    assert doctor.script_gpus_per_task(script) is None
    assert doctor.script_gpus_per_task(tmp_path / "missing.sh") is None
