"""`ftslurm submit` before sbatch runs: the env and options the job gets, and the checks.

sbatch here is a stand-in that records what it was given (its answer, `42`, is the shape
`sbatch --parsable` prints, tests/test_slurm_parse.py); the real script on the real local
Slurm is submitted the same way in tests/ftjob.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import paths
from ftslurm.commands.submit import export_also, submit
from tests.ftjob import KNOB_ENV_RE

FT = Path(__file__).resolve().parent.parent / paths.FT_SCRIPT


@pytest.fixture
def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `sbatch` on PATH that writes its arguments, FTSLURM_OUTPUTS and FTSLURM_PYTHON to a
    file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch.json"
    script = bin_dir / "sbatch"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps("
        "{'argv': sys.argv[1:], 'outputs': os.environ.get('FTSLURM_OUTPUTS'),"
        " 'python': os.environ.get('FTSLURM_PYTHON')}))\n"
        "print(42)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in [k for k in os.environ if KNOB_ENV_RE.match(k)]:
        monkeypatch.delenv(var)
    return record


def _submit(cwd: Path, *argv: str, **env: str):
    cwd.mkdir(parents=True, exist_ok=True)
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(submit, ["--json", *argv], env=env)
    finally:
        os.chdir(old)


def test_the_job_writes_its_logs_where_ftslurm_reads_them(tmp_path: Path, fake_sbatch: Path):
    """Submitted from any folder, the job gets the absolute outputs folder that `ftslurm
    logs/status` read (the script's default, `outputs` of the submit folder, would differ)."""
    project = tmp_path / "checkout"
    r = _submit(tmp_path / "elsewhere", "--array=0-1", str(FT), FTSLURM_PROJECT=str(project))
    assert r.exit_code == 0, r.output
    got = json.loads(fake_sbatch.read_text())
    assert got["outputs"] == str(project / "outputs")
    assert got["python"] == sys.executable  # the nodes run the submitting environment
    assert json.loads(r.stdout)["log_dir"] == str(project / "outputs" / "torchft" / "tft-42")
    assert (tmp_path / "elsewhere" / "outputs" / "torchft").is_dir()  # Slurm's --output folder
    # a relative FTSLURM_OUTPUTS means the submit folder's, for the job as for ftslurm
    r = _submit(tmp_path / "sub", "--array=0-1", str(FT), FTSLURM_OUTPUTS="outs")
    assert r.exit_code == 0, r.output
    assert json.loads(fake_sbatch.read_text())["outputs"] == str(tmp_path / "sub" / "outs")
    # a FTSLURM_PYTHON of the user's stays
    r = _submit(tmp_path / "sub", "--array=0-1", str(FT), FTSLURM_PYTHON="/opt/venv/bin/python")
    assert json.loads(fake_sbatch.read_text())["python"] == "/opt/venv/bin/python"


def test_cpu_preset_alone_asks_for_a_cpu_node(tmp_path: Path, fake_sbatch: Path):
    r = _submit(tmp_path / "s", "--array=0-1", str(FT), FTSLURM_PRESET="debug_cpu",
                FTSLURM_OUTPUTS=str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code == 0, r.output
    argv = json.loads(fake_sbatch.read_text())["argv"]
    assert {"--gpus-per-task=0", "--cpus-per-task=1", "--export=ALL,DEVICE=cpu"} <= set(argv)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"DEVICE": "gpu"}, "DEVICE='gpu' is not supported"),
        ({"FTSLURM_PRESET": "llama3_8b"}, "preset llama3_8b is for the classic script"),
        ({"FTSLURM_PRESET": "debug"}, "FTSLURM_PRESET='debug' is not supported"),
        ({"TORCHFT_LIGHTHOUSE": "http://login-0"}, "no port"),
        ({"STEPS": "-5"}, "STEPS=-5 must be at least 1"),
        ({"FTSLURM_EXTRA_ARGS": "'unclosed"}, "does not parse"),
        ({"PROCESS_GROUP": "mpi"}, "PROCESS_GROUP='mpi' is not supported"),
        # read by the training worker only, yet refused here rather than on every rank
        ({"FTSLURM_CHECKSUM_EVERY": "abc"}, "FTSLURM_CHECKSUM_EVERY='abc' is not an integer"),
        ({"FTSLURM_CHECKSUM_ASYNC": "maybe"}, "FTSLURM_CHECKSUM_ASYNC='maybe' is not a boolean"),
        ({"FTSLURM_FIX_HEAL_TIMEOUT": "2"}, "FTSLURM_FIX_HEAL_TIMEOUT='2' is not a boolean"),
        # a knob of the other mode: refused too, not ignored
        ({"SYNC_STEPS": "ten"}, "SYNC_STEPS='ten' is not an integer"),
    ],
)
def test_bad_device_or_preset_is_refused_before_sbatch(
    tmp_path: Path, fake_sbatch: Path, env: dict[str, str], message: str
):
    """Every task would fail on its node after the queue wait: refused here instead."""
    r = _submit(tmp_path / "s", "--array=0-1", str(FT), FTSLURM_OUTPUTS=str(tmp_path / "o"), **env)
    assert r.exit_code != 0 and message in str(r.exception)
    assert not fake_sbatch.exists()


def test_a_knob_only_the_workers_read_is_one_error_line_and_exit_2(
    tmp_path: Path, fake_sbatch: Path
):
    """`FTSLURM_CHECKSUM_EVERY=abc` used to pass and fail on every rank after the queue wait."""
    env = dict(os.environ, FTSLURM_OUTPUTS=str(tmp_path / "o"), FTSLURM_CHECKSUM_EVERY="abc")
    argv = [sys.executable, "-m", "ftslurm", "submit", "--array=0-1", str(FT)]
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr == (
        "Error: FTSLURM_CHECKSUM_EVERY='abc' is not an integer: expected a whole number >= 0\n"
    )
    assert not fake_sbatch.exists()


def test_outputs_folder_that_cannot_be_made_is_one_line(tmp_path: Path, fake_sbatch: Path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "outputs").write_text("a file in the way")
    r = _submit(tmp_path / "s", "--array=0-1", str(FT), FTSLURM_OUTPUTS=str(tmp_path / "o"))
    assert "cannot create the log folder" in str(r.exception) and "Not a directory" in str(
        r.exception
    )
    assert "--chdir" in str(r.exception)
    assert not fake_sbatch.exists()
    # the outputs folder itself: the fix names the variable's value, not "set it"
    (tmp_path / "f").write_text("a file")
    r = _submit(tmp_path / "s2", "--array=0-1", str(FT), FTSLURM_OUTPUTS=str(tmp_path / "f" / "o"))
    assert f"FTSLURM_OUTPUTS={tmp_path / 'f' / 'o'} is set" in str(r.exception)
    assert not fake_sbatch.exists()


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (["--export=NONE"], ["--export=FTSLURM_OUTPUTS"]),
        (["--export=none"], ["--export=FTSLURM_OUTPUTS"]),
        (["--export=NIL"], ["--export=FTSLURM_OUTPUTS"]),
        (["--export", "NONE"], ["--export=FTSLURM_OUTPUTS"]),
        (["--exp=NONE", "-N1"], ["-N1", "--export=FTSLURM_OUTPUTS"]),
        (["--export=ALL", "--export=NONE"], ["--export=FTSLURM_OUTPUTS"]),  # the last counts
        (["--export=EDITOR,A=1"], ["--export=EDITOR,A=1,FTSLURM_OUTPUTS"]),
        (["--export=FTSLURM_OUTPUTS=/x"], ["--export=FTSLURM_OUTPUTS=/x"]),
        (["--export=ALL"], ["--export=ALL"]),
        (["--export=ALL,A=1"], ["--export=ALL,A=1"]),
        (["--export=NONE", "--export=ALL"], ["--export=NONE", "--export=ALL"]),
        (["--partition=cpu"], ["--partition=cpu"]),
        (["--export-file=f"], ["--export-file=f"]),
    ],
)
def test_a_restricting_export_still_passes_the_outputs_folder(given: list[str], sent: list[str]):
    """sbatch --export=NONE (or a list) passes the job only what it names: FTSLURM_OUTPUTS
    is added by name (its value from sbatch's environment), or the logs go elsewhere."""
    assert export_also(given, ["FTSLURM_OUTPUTS"])[0] == sent


def test_export_from_the_environment_or_the_script(tmp_path: Path):
    """sbatch's order: command line, then $SBATCH_EXPORT, then the script's #SBATCH line."""
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n#SBATCH --export=NONE\necho hi\n#SBATCH --export=ALL\n")
    names = ["FTSLURM_OUTPUTS", "DEVICE"]
    assert export_also([], names, {}, str(script)) == (
        ["--export=FTSLURM_OUTPUTS,DEVICE"], names)
    assert export_also([], names, {"SBATCH_EXPORT": "ALL"}, str(script)) == ([], [])
    assert export_also([], names, {"SBATCH_EXPORT": "NONE"}, "")[0] == [
        "--export=FTSLURM_OUTPUTS,DEVICE"]
    assert export_also(["--export=ALL"], names, {"SBATCH_EXPORT": "NONE"}, "")[0] == [
        "--export=ALL"]
    assert export_also([], names, {}, "") == ([], [])


def test_export_none_reaches_sbatch_with_the_outputs_folder_and_the_knobs(
    tmp_path: Path, fake_sbatch: Path, monkeypatch: pytest.MonkeyPatch
):
    """The knobs checked here (DEVICE=cpu: CPU node options) reach the job too."""
    for var in [k for k in os.environ if k.startswith("FTSLURM_")]:  # e.g. the suite's own
        monkeypatch.delenv(var)
    r = _submit(tmp_path / "s", "--array=0-1", "--export", "NONE", str(FT),
                FTSLURM_OUTPUTS=str(tmp_path / "o"), DEVICE="cpu")  # fmt: skip
    assert r.exit_code == 0, r.output
    got = json.loads(fake_sbatch.read_text())
    exports = [a for a in got["argv"] if a.startswith("--export")]
    # the time limit's margin too (the script's #SBATCH --signal): the launcher says it
    assert exports == ["--export=FTSLURM_OUTPUTS,FTSLURM_PYTHON,FTSLURM_TIME_LIMIT_SIGNAL_S,"
                       "DEVICE=cpu"], got["argv"]  # fmt: skip
    assert "NONE" not in got["argv"] and got["outputs"] == str(tmp_path / "o")
    assert ("also passing FTSLURM_OUTPUTS, FTSLURM_PYTHON, FTSLURM_TIME_LIMIT_SIGNAL_S, "
            "DEVICE=cpu") in r.stderr


def test_array_in_the_script_and_chdir(tmp_path: Path, fake_sbatch: Path):
    """`#SBATCH --array` inside the script still gets the log folder hint; --chdir moves the
    folder Slurm's --output needs to the job's working directory."""
    script = tmp_path / "my-ft.sh"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-3\n#SBATCH --output=outputs/torchft/x\n")
    job_dir = tmp_path / "jobdir"
    job_dir.mkdir()
    r = _submit(tmp_path / "s", f"--chdir={job_dir}", str(script),
                FTSLURM_OUTPUTS=str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["log_dir"] == str(tmp_path / "o" / "torchft" / "tft-42")
    assert (job_dir / "outputs" / "torchft").is_dir()
    assert not (tmp_path / "s" / "outputs").exists()


def test_array_and_chdir_in_their_other_forms(tmp_path: Path, fake_sbatch: Path):
    script = tmp_path / "short.sh"
    script.write_text("#!/bin/bash\n#SBATCH -a0-1\nsrun true\n#SBATCH --array=0-3\n")
    for chdir in (["-D", str(tmp_path / "d1")], ["--chdir", str(tmp_path / "d2")]):
        Path(chdir[1]).mkdir()
        r = _submit(tmp_path / "s", *chdir, str(script), FTSLURM_OUTPUTS=str(tmp_path / "o"))
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["log_dir"], "the -a0-1 line is an array"
        assert (Path(chdir[1]) / "outputs" / "torchft").is_dir()
    late = tmp_path / "late.sh"  # an #SBATCH line after a command is ignored by sbatch
    late.write_text("#!/bin/bash\nsrun true\n#SBATCH --array=0-3\n")
    r = _submit(tmp_path / "s", str(late), FTSLURM_OUTPUTS=str(tmp_path / "o"))
    assert r.exit_code == 0 and json.loads(r.stdout)["log_dir"] is None


@pytest.mark.parametrize("form", ["--chdir={}", "--chdir {}", "-D {}", "-D={}"])
def test_a_chdir_that_is_not_a_folder_is_refused_before_anything_is_made(
    tmp_path: Path, fake_sbatch: Path, form: str
):
    """A mistyped --chdir made its folder tree (outputs/torchft in it) and the job ran in /tmp,
    Slurm's fallback when its working directory is missing."""
    (tmp_path / "file").write_text("not a folder")
    cases = [(tmp_path / "missing" / "x", "does not exist")]
    if " " not in form:  # `--chdir FILE`: the file is the script (the --opt=value form rule)
        cases.append((tmp_path / "file", "is not a folder"))
    for given, what in cases:
        env = dict(os.environ, FTSLURM_OUTPUTS=str(tmp_path / "o"))
        argv = [sys.executable, "-m", "ftslurm", "submit", *form.format(given).split(), str(FT)]
        out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith(f"Error: --chdir {given} {what}")
        assert not (tmp_path / "missing").exists() and not (tmp_path / "o").exists()
        assert not fake_sbatch.exists()


def test_only_the_scripts_header_is_read(tmp_path: Path, fake_sbatch: Path):
    """A script with a large body (a data blob after `exit`) was read whole, twice."""
    import tracemalloc

    script = tmp_path / "big.sh"
    with open(script, "wb") as f:
        f.write(b"#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH --export=NONE\nsrun true\nexit\n")
        f.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes
    tracemalloc.start()
    try:
        r = _submit(tmp_path / "s", str(script), FTSLURM_OUTPUTS=str(tmp_path / "o"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["log_dir"] == str(tmp_path / "o" / "torchft" / "tft-42")
    assert "--export=FTSLURM_OUTPUTS" in " ".join(json.loads(fake_sbatch.read_text())["argv"])
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB"


def test_a_header_cut_by_the_read_limit_loses_only_its_last_line(tmp_path: Path):
    from ftslurm import submission as sub

    script = tmp_path / "long-header.sh"
    start, filler = "#!/bin/bash\n#SBATCH --array=0-1\n", "#" * 99 + "\n"
    whole = (sub.HEADER_MAX_BYTES - len(start)) // len(filler)  # the filler lines read whole
    script.write_text(start + filler * (whole + 1) + "#SBATCH -N1\n")
    lines = sub.header_lines(str(script))
    # the line the limit cut is dropped, not read as a short `####`; the rest is not read
    assert lines == ["#SBATCH --array=0-1"] + [filler.strip()] * whole


def test_short_options_with_an_h_in_their_value_reach_sbatch(tmp_path: Path, fake_sbatch: Path):
    """click read `-pshort` as flags -p -s -h ...: the `h` printed the help, exit 0, and
    nothing was submitted. `-h` alone is still the help."""
    job_dir = tmp_path / "high"
    job_dir.mkdir()
    r = _submit(tmp_path / "s", "-pshort", f"-D{job_dir}", str(FT),
                FTSLURM_OUTPUTS=str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code == 0 and json.loads(r.stdout)["job_id"] == 42, r.output
    assert {"-pshort", f"-D{job_dir}"} <= set(json.loads(fake_sbatch.read_text())["argv"])
    assert (job_dir / "outputs" / "torchft").is_dir()
    fake_sbatch.unlink()
    r = _submit(tmp_path / "s", "-h")
    assert r.exit_code == 0 and "Submit SCRIPT with sbatch" in r.output
    assert not fake_sbatch.exists()


def test_split_brain_warning_asks_for_a_majority_from_three_replicas():
    """More than half of the replicas per quorum: two groups cannot both get one."""
    from ftslurm.commands.submit import split_brain_warning

    url = "http://login-0:29510"
    assert split_brain_warning(2, 1, url) == ""  # a majority of 2 is both: no failover
    assert split_brain_warning(3, 2, url) == "" and split_brain_warning(8, 5, url) == ""
    assert split_brain_warning(None, 1, url) == "" and split_brain_warning(8, None, url) == ""
    warning = split_brain_warning(8, 4, url)  # half is not enough: 4 and 4
    assert warning.startswith(f"warning: the Lighthouse at {url} issues a quorum to 4 ")
    assert warning.endswith("ftslurm lighthouse restart --min-replicas 5")
    assert split_brain_warning(3, 1, url).endswith("--min-replicas 2")


@pytest.mark.timeout(60)
def test_submit_warns_when_the_managed_lighthouse_lets_a_minority_form_a_quorum(
    tmp_path: Path, fake_sbatch: Path, monkeypatch: pytest.MonkeyPatch
):
    """The real managed Lighthouse at --min-replicas 1: an array of 4 replicas (+1 spare) is
    submitted with a warning naming the fix; 2 replicas, another Lighthouse, or after the
    restart it names: no warning."""
    from ftslurm.lighthouse import lifecycle
    from ftslurm.wait import free_port

    state = tmp_path / "lighthouse"
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(state))
    info = lifecycle.start(bind=f"127.0.0.1:{free_port()}", state_dir=state, min_replicas=1)
    try:
        env = {"TORCHFT_LIGHTHOUSE": info.address, "FTSLURM_OUTPUTS": str(tmp_path / "o")}
        r = _submit(tmp_path / "s", "--spares", "1", "--array=0-4", str(FT), **env)
        assert r.exit_code == 0, r.output
        assert f"warning: the Lighthouse at {info.address} issues a quorum to 1 " in r.stderr
        assert r.stderr.rstrip().endswith("ftslurm lighthouse restart --min-replicas 3")
        assert json.loads(r.stdout)["job_id"] == 42  # submitted all the same
        r = _submit(tmp_path / "s", "--array=0-1", str(FT), **env)
        assert r.exit_code == 0 and "warning" not in r.stderr
        other = {**env, "TORCHFT_LIGHTHOUSE": "http://elsewhere:29510"}
        r = _submit(tmp_path / "s", "--array=0-3", str(FT), **other)
        assert r.exit_code == 0 and "warning" not in r.stderr
        lifecycle.restart(lifecycle.recorded_config(state, {"min_replicas": 3}), grace=5)
        r = _submit(tmp_path / "s", "--spares", "1", "--array=0-4", str(FT), **env)
        assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
    finally:
        lifecycle.stop(state, grace=2)


def test_large_array_warning_names_the_timeouts_a_large_array_needs():
    """Above 256 replicas a round takes seconds (4-5 s at 1,024 on 2 cores): a 2000 ms
    heartbeat timeout dropped live replicas and a 10 s join timeout split the array."""
    from ftslurm.submission import LARGE_ARRAY, large_array_warning

    url = "http://login-0:29510"
    defaults = {"heartbeat_timeout_ms": 2000, "join_timeout_ms": 10000}
    assert large_array_warning(LARGE_ARRAY, defaults, url) == ""
    assert large_array_warning(None, defaults, url) == ""
    warning = large_array_warning(1024, defaults, url)
    assert warning.startswith(f"warning: the Lighthouse at {url} runs with "
                              "--heartbeat-timeout-ms 2000 and --join-timeout-ms 10000 and this "
                              "array has 1024 replicas")  # fmt: skip
    assert warning.endswith("ftslurm lighthouse restart --heartbeat-timeout-ms 5000 "
                            "--join-timeout-ms 60000")  # fmt: skip
    bigger = {"heartbeat_timeout_ms": 8000, "join_timeout_ms": 10000}
    assert large_array_warning(300, bigger, url).endswith(
        "--heartbeat-timeout-ms 8000 --join-timeout-ms 60000")  # never advises a lower one
    fine = {"heartbeat_timeout_ms": 5000, "join_timeout_ms": 60000}
    assert large_array_warning(1024, fine, url) == ""
    # the binary's own default (torchft's 5000 ms) is not known to be low
    assert large_array_warning(1024, {"heartbeat_timeout_ms": None, "join_timeout_ms": 60000},
                               url) == ""  # fmt: skip


@pytest.mark.timeout(60)
def test_submit_warns_a_large_array_of_the_managed_lighthouses_timeouts(
    tmp_path: Path, fake_sbatch: Path, monkeypatch: pytest.MonkeyPatch
):
    """The real managed Lighthouse at ftslurm's defaults and an array of 300 replicas: the
    submit goes ahead with the warning; after the restart it names, none."""
    from ftslurm.lighthouse import lifecycle
    from ftslurm.wait import free_port

    state = tmp_path / "lighthouse"
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(state))
    info = lifecycle.start(bind=f"127.0.0.1:{free_port()}", state_dir=state, min_replicas=151)
    try:
        env = {"TORCHFT_LIGHTHOUSE": info.address, "FTSLURM_OUTPUTS": str(tmp_path / "o")}
        r = _submit(tmp_path / "s", "--array=0-299", str(FT), **env)
        assert r.exit_code == 0, r.output
        assert f"warning: the Lighthouse at {info.address} runs with --heartbeat-timeout-ms " \
            "2000 and --join-timeout-ms 10000 and this array has 300 replicas" in r.stderr
        assert json.loads(r.stdout)["job_id"] == 42  # submitted all the same
        options = {"heartbeat_timeout_ms": 5000, "join_timeout_ms": 60000}
        lifecycle.restart(lifecycle.recorded_config(state, options), grace=5)
        r = _submit(tmp_path / "s", "--array=0-299", str(FT), **env)
        assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
    finally:
        lifecycle.stop(state, grace=2)
