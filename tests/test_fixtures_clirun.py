"""The shared test helpers of tests/clirun.py and their fixtures in tests/conftest.py: the two
CLI runners agree, `fake_bin` puts a program first on PATH (for this process and the commands
it starts), and `lighthouse_dirs` stops at the end a Lighthouse a test left running, found by
its state dir's pidfile and state, whether the test passed or failed (an inner pytest session
with a copy of the conftest, as tests/test_tiers.py runs one)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ftslurm import __version__, procs
from tests.clirun import FakeBin, environment, ftslurm, invoke, one_error_line

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.unit
def test_environment_adds_unsets_and_replaces() -> None:
    env = environment({"FTSLURM_X": "1", "HOME": None})
    assert env["FTSLURM_X"] == "1" and "HOME" not in env and env["PATH"] == os.environ["PATH"]
    assert environment({"A": "b", "C": None}, inherit=False) == {"A": "b"}


@pytest.mark.unit
def test_invoke_runs_the_cli_in_this_process() -> None:
    r = invoke("--version")
    assert r.exit_code == 0 and __version__ in r.output


def test_the_process_runner_runs_python_m_ftslurm() -> None:
    r = ftslurm("--version")
    assert r.returncode == 0 and __version__ in r.stdout
    assert r.stdout == invoke("--version").output
    too_long = {"FTSLURM_CLUSTER_DIR": "/tmp/" + "a" * 300}
    line = one_error_line(ftslurm("cluster", "env", env=too_long))
    assert "FTSLURM_CLUSTER_DIR=" in line and "too long" in line


def test_a_fake_program_comes_first_on_path(fake_bin: FakeBin) -> None:
    sbatch = fake_bin.add("sbatch", 'echo "Submitted batch job 42 ($*)"\n')
    assert shutil.which("sbatch") == str(sbatch)
    out = subprocess.run(["sbatch", "x.sh"], capture_output=True, text=True, timeout=30)
    assert out.stdout == "Submitted batch job 42 (x.sh)\n"
    fake_bin.python("squeue", "import ftslurm, sys; print('fake', sys.argv[1:])\n")
    out = subprocess.run(["squeue", "--me"], capture_output=True, text=True, timeout=30)
    assert out.stdout == "fake ['--me']\n"


INNER = '''
import sys
from pathlib import Path
from ftslurm import daemon
from ftslurm.lighthouse.command import MARKER, NAME

OUT = Path({out!r})


def fake_lighthouse(d):
    """A process recorded as the state dir's Lighthouse as `lighthouse start` records one:
    the state dir's launcher file in its command line, its pid in lighthouse.pid/.json."""
    d.mkdir(mode=0o700)
    launcher = d / MARKER
    launcher.write_text("import time\\ntime.sleep(600)\\n")
    proc, state, _ = daemon.Daemon(d, NAME, marker=str(launcher), program=str(launcher)).start(
        [sys.executable, str(launcher)], marker=str(launcher))
    return proc.pid


def test_passes(lighthouse_dirs):
    d = lighthouse_dirs.new("lh")
    (OUT / "passes").write_text(f"{{fake_lighthouse(d)}} {{d}}")


def test_fails(lighthouse_dirs):
    d = lighthouse_dirs.new()
    (OUT / "fails").write_text(f"{{fake_lighthouse(d)}} {{d}}")
    assert False, "the test failed with its Lighthouse running"
'''


def test_lighthouse_dirs_stops_a_lighthouse_left_running(pytester: pytest.Pytester,
                                                         tmp_path: Path) -> None:  # fmt: skip
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_inner=INNER.format(out=str(tmp_path)))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    for test in ("passes", "fails"):
        pid, state_dir = (tmp_path / test).read_text().split(" ", 1)
        assert not procs.pid_alive(int(pid)), f"{test}: the fake Lighthouse {pid} still runs"
        # stopped by its state, as `ftslurm lighthouse stop` does: the state is gone too
        assert not (Path(state_dir) / "lighthouse.pid").exists(), test
        assert not (Path(state_dir) / "lighthouse.json").exists(), test


# the files that still start `python -m ftslurm` or click's runner themselves: each is to move
# to tests/clirun.py (ftjob.py and golden_cli.py run outside pytest too); the list only shrinks
OWN_RUNNERS = {
    "clirun.py",  # the one home
    "ftjob.py", "golden_cli.py", "test_bad_nodes_visible.py", "test_classic_slurm.py",
    "test_cluster.py", "test_demo.py", "test_demo_all_fail.py", "test_doctor.py",
    "test_doctor_slurm.py", "test_failure.py", "test_failure_training.py",
    "test_lighthouse_cli.py", "test_logs.py", "test_metrics.py", "test_metrics_prometheus.py",
    "test_multirank_spare_slurm.py", "test_replica_assets.py", "test_restart_in_place_slurm.py",
    "test_status.py", "test_submit.py", "test_submit_time_limit_signal.py",
    "test_time_limit_slurm.py",
    # a closed pipe as stdout (test_cli), runs under a memory probe (peak_rss: for the logs
    # tail and the exporter) and a server (exporter)
    "test_cli.py", "peak_rss.py", "test_metrics_exporter_bounds.py",
}  # fmt: skip
RUNS_FTSLURM = ('"-m", "ftslurm"', "CliRunner(")


@pytest.mark.unit
def test_only_clirun_runs_the_cli_outside_the_files_still_to_move() -> None:
    tests = Path(__file__).parent
    found = {p.name for p in tests.rglob("*.py") if p.name != Path(__file__).name
             and any(s in p.read_text(errors="replace") for s in RUNS_FTSLURM)}  # fmt: skip
    assert found - OWN_RUNNERS == set(), "run ftslurm through tests/clirun.py"
    assert "clirun.py" in found
