"""`ftslurm report` through click (CliRunner) and through the console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftslurm.errors import UserError
from tests.clirun import ftslurm, invoke

FIX = Path(__file__).parent / "fixtures" / "report"


# reports of recorded runs must not pick up the checkout's own Lighthouse or failure log
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def test_text_on_guide_excerpt():
    res = invoke("report", str(FIX / "guide"))
    assert res.exit_code == 0, res.output
    out = res.output
    assert "13:49:41.512  quorum 3 changed at step 21: 1/2 replicas [0]; left: 1" in out
    assert "replica 1 at step 21 (left-quorum) at 13:49:32.462" in out
    assert "1/2 replicas from step 21 to 142, 2 m 43 s (13:49:41.512 -> 13:52:24.923)" in out
    assert "replica 0 -> replica 1 at step 142 (13:52:26.769)" in out
    assert "13:51:42.000  replica 1 attempt 1 launched on worker-0" in out


def test_json_is_the_documented_structure():
    res = invoke("report", str(FIX / "cpu-run1"), "--json")
    assert res.exit_code == 0, res.output
    j = json.loads(res.output)
    for key in ("quorums", "failures", "recoveries", "degraded", "summary"):
        assert key in j
    assert set(j["quorums"][0]) >= {"quorum_id", "time", "step", "participants"}
    assert set(j["failures"][0]) >= {"time", "replica", "step", "kind"}
    assert set(j["recoveries"][0]) >= {"time", "step", "source_replica", "target_replica"}
    assert set(j["degraded"][0]) >= {
        "start_step", "end_step", "start_time", "end_time", "replicas", "group_size"
    }
    assert j["summary"]["failure_to_next_commit_s"] == [5.242]
    # docs/report.md documents every top-level key
    doc = (Path(__file__).parent.parent / "docs" / "report.md").read_text()
    for key in j:
        assert f"`{key}`" in doc, key


def test_plot_option(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    res = invoke("report", str(FIX / "cpu-run1"), "--plot", str(png))
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    # a folder that is not there is a typo to report, not a path to create
    typo = invoke("report", str(FIX / "cpu-run1"), "--plot", str(tmp_path / "x/r.png"))
    assert isinstance(typo.exception, UserError) and "not a folder" in str(typo.exception)
    assert typo.output == "" and not (tmp_path / "x").exists()


def test_help_has_an_example():
    res = invoke("report", "--help")
    assert res.exit_code == 0
    assert "ftslurm report outputs/torchft/tft-12" in res.output


@pytest.mark.process
def test_user_error_not_traceback(tmp_path):
    res = invoke("report", str(tmp_path / "missing"))
    assert isinstance(res.exception, UserError)
    assert str(res.exception) == f"no such file or directory: {tmp_path / 'missing'}"
    proc = ftslurm("report", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"Error: no logs found in {tmp_path} " \
        "(expected tft-<job>_<i>.out replica logs or a lighthouse log)"


def test_user_mistakes_are_errors_not_silent(tmp_path):
    """A report of nothing, a plot it cannot write, or a named file that is not there: an
    error naming it, not an empty report with exit code 0 (nor a traceback after the text)."""
    junk = tmp_path / "junk.out"
    junk.write_bytes(bytes(range(256)) * 20)
    guide = str(FIX / "guide")
    cases = [
        ([str(junk)], "nothing to report: no torchft, torchtitan or ftslurm launcher line in"),
        ([guide, "--plot", str(tmp_path / "t.txt")], "the timeline is a PNG"),
        ([guide, "--events", str(tmp_path / "nope.jsonl")], "--events"),
        ([guide, "--lighthouse", str(tmp_path)], "a directory; give the log file"),
    ]
    for argv, message in cases:
        res = invoke("report", *argv)
        assert isinstance(res.exception, UserError) and message in str(res.exception), argv
        assert res.output == "", argv  # nothing printed before the error


def test_a_folder_of_unrelated_logs_is_named_in_one_short_line(tmp_path):
    """`ftslurm report .` in a folder of other programs' logs: the error names three of the
    files read and counts the rest, instead of listing every one."""
    for i in range(40):
        (tmp_path / f"other-{i:02d}.log").write_text("nothing of torchft here\n")
    res = invoke("report", str(tmp_path))
    assert isinstance(res.exception, UserError)
    message = str(res.exception)
    assert message.count(".log") == 3 and " and 37 more (" in message, message


@pytest.mark.process
def test_a_pipe_is_read_like_a_file(tmp_path):
    """`cat log | ftslurm report /dev/stdin` (and `<(...)`): the report reads each file
    twice; a pipe is spooled to a temporary file first, and that file is removed at exit."""
    import gzip

    log = gzip.decompress((FIX / "cpu-run1" / "replica_0.log.gz").read_bytes())
    (tmp_path / "replica_0.log").write_bytes(log)
    named = ftslurm("report", str(tmp_path / "replica_0.log"), "--json", text=False)
    piped = ftslurm("report", "/dev/stdin", "--json", input=log, text=False,
                    env={"TMPDIR": str(tmp_path)})  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    a, b = json.loads(named.stdout)["summary"], json.loads(piped.stdout)["summary"]
    assert a == b and a["steps_committed"] > 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replica_0.log"]  # spool removed


@pytest.mark.process
def test_piped_input_is_not_mixed_with_the_managed_lighthouse_log(tmp_path):
    """Named input (a pipe included) is the whole report: the managed Lighthouse's log, which
    every run shares, is added only to a run folder's report."""
    lh_dir = tmp_path / "lh"
    lh_dir.mkdir()
    (lh_dir / "lighthouse.log").write_bytes((FIX / "guide" / "lighthouse.log").read_bytes())
    env = {"FTSLURM_LIGHTHOUSE_DIR": str(lh_dir), "TMPDIR": str(tmp_path)}
    r = ftslurm("report", "/dev/stdin", input=b"not a log line\n" * 3, text=False, env=env)
    assert r.returncode == 2 and b"nothing to report" in r.stderr, r.stdout + r.stderr
