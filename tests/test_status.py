"""`ftslurm status`: rows from recorded real `squeue --json` output (of a mimic FT array) and
real replica logs (a CPU run of the FT script with a requeued replica); provenance in
tests/fixtures/failure/README.md."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import status as st
from ftslurm.cli import cli
from ftslurm.slurm.parse import parse_squeue_json
from tests.fakeslurm import FakeSlurm

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "failure"


def squeue(monkeypatch: pytest.MonkeyPatch, recorded: str | None) -> FakeSlurm:
    """The fake client's `squeue --json`: a recorded one, or (None) the same with no jobs."""
    data = json.loads((FIX / f"{recorded or 'squeue_running'}.json").read_text())
    if recorded is None:
        data["jobs"] = []
    return FakeSlurm().on(["squeue", "--json"], json.dumps(data)).install(monkeypatch)


def real_log(tmp_path: Path, task: int) -> Path:
    out = tmp_path / f"tft-12_{task}.out"
    out.write_bytes(gzip.decompress((FIX / "tft-8" / f"tft-8_{task}.out.gz").read_bytes()))
    return out


def test_summary_of_a_real_log_with_two_attempts(tmp_path):
    s = st.read_summary(real_log(tmp_path, 1))
    assert (s.last_step, s.last_loss, s.attempt) == (20, 6.81537, 1)
    s0 = st.read_summary(real_log(tmp_path, 0))
    assert (s0.last_step, s0.attempt) == (30, 0)


def test_summary_reads_only_the_tail(tmp_path):
    path = tmp_path / "big.out"
    with open(path, "w") as f:
        f.write("[2026-11-23 10:00:00]  launching replica 0 (attempt 3) on worker-0\n")
        f.write("step: 1  loss: 9.0\n")
        for _ in range(5000):
            f.write("filler line without a step " * 4 + "\n")
        f.write("[titan] 2026-11-23 10:00:09,000 - root - INFO - step: 77  loss:  1.25000\n")
    s = st.read_summary(path, tail_bytes=4096)
    assert (s.last_step, s.last_loss) == (77, 1.25)
    assert s.attempt is None  # the banner is far before the tail: not read


def test_missing_log_is_a_row_with_dashes():
    s = st.read_summary(Path("/nonexistent/tft-1_0.out"))
    assert not s.exists and s.last_step is None


def test_rows_from_recorded_squeue_during_a_node_down(tmp_path):
    jobs = parse_squeue_json((FIX / "squeue_node_down_pending.json").read_text())
    logs = {0: st.summarize_tail("step: 5  loss: 2.5", "a", mtime=100.0)}
    rows = st.build_rows(jobs, 12, logs, now=103.0)
    assert [(r.replica, r.state, r.reason, r.node, r.restarts, r.job_id) for r in rows] == [
        (0, "RUNNING", "", "worker-0", 0, 13),
        (1, "PENDING", "BeginTime", "", 1, 12),
    ]
    assert (rows[0].last_step, rows[0].last_loss, rows[0].idle_s) == (5, 2.5, 3.0)
    assert rows[1].last_step is None and rows[1].idle_s is None
    table = st.render_table(12, rows, st.Quorum(running=False))
    lines = table.splitlines()
    assert lines[0] == "job 12: 2 array task(s)"
    assert lines[1].split() == ["REPLICA", "STATE", "REASON", "NODE", "RESTARTS", "ATTEMPT",
                                "STEP", "LOSS", "LAST", "LOG"]  # fmt: skip
    assert lines[2].split() == ["0", "RUNNING", "-", "worker-0", "0", "-", "5", "2.5000", "3s",
                                "ago"]  # fmt: skip
    assert lines[3].split()[:5] == ["1", "PENDING", "BeginTime", "-", "1"]
    assert lines[-1] == "lighthouse: not running"
    data = json.loads(json.dumps(st.to_json(12, rows, None)))
    assert data["tasks"][1]["reason"] == "BeginTime" and data["lighthouse"] is None


def test_quorum_line():
    q = st.Quorum(True, "http://login-0:29511", 4, ["torchtitan_ft_0:ab", "torchtitan_ft_1:cd"],
                  heartbeating=2)  # fmt: skip
    assert st.render_quorum(q) == (
        "lighthouse: http://login-0:29511 quorum 4: 2 members "
        "(torchtitan_ft_0, torchtitan_ft_1), 2 heartbeating"
    )
    assert "running" in st.render_quorum(st.Quorum(True, "http://x:1"))


def test_lighthouse_problems_never_break_status(monkeypatch):
    from ftslurm import lighthouse

    def boom(**kw):
        raise RuntimeError("state dir unreadable")

    monkeypatch.setattr(lighthouse, "status", boom)
    q = st.lighthouse_quorum()
    assert q is not None and not q.running and "unreadable" in q.error


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_status_with_recorded_squeue(monkeypatch, tmp_path, as_json):
    squeue(monkeypatch, "squeue_running")
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    run = tmp_path / "torchft" / "tft-12"
    run.mkdir(parents=True)
    (run / "tft-12_1.out").write_text(
        "[2026-11-23 10:00:00]  launching replica 1 (attempt 2) on worker-1\n"
        "[titan] 2026-11-23 10:00:05,000 - root - INFO - step: 9  loss:  3.14159\n"
    )
    args = ["status", "--no-lighthouse", "--job", "12_1"] + (["--json"] if as_json else [])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    if as_json:  # --job 12_1: that replica's row only
        [t] = json.loads(r.output)["tasks"]
        assert (t["replica"], t["attempt"], t["last_step"], t["last_loss"]) == (1, 2, 9, 3.14159)
    else:
        assert "job 12: 1 array task(s)" in r.output and "3.1416" in r.output
    missing = CliRunner().invoke(cli, ["status", "--no-lighthouse", "--job", "12_5"])
    assert "job 12 has no array task 5 in squeue (tasks: 0, 1)" in str(missing.exception)


def test_cli_status_json_is_strict_when_the_loss_diverged(monkeypatch, tmp_path):
    """A run whose loss is nan is when a script reads `status --json`: no NaN in the JSON."""
    squeue(monkeypatch, "squeue_running")
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    run = tmp_path / "torchft" / "tft-12"
    run.mkdir(parents=True)
    for i, loss in ((0, "nan"), (1, "inf")):
        (run / f"tft-12_{i}.out").write_text(
            f"[2026-11-23 10:00:00]  launching replica {i} (attempt 0) on worker-{i}\n"
            f"[titan] 2026-11-23 10:00:05,000 - root - INFO - step: 9  loss:     {loss}\n"
        )
    r = CliRunner().invoke(cli, ["status", "--no-lighthouse", "--json"])
    assert r.exit_code == 0, r.output

    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    tasks = json.loads(r.output, parse_constant=refuse)["tasks"]
    assert [(t["last_step"], t["last_loss"]) for t in tasks] == [(9, None), (9, None)]
    text = CliRunner().invoke(cli, ["status", "--no-lighthouse"]).output
    assert "nan" in text and "inf" in text


def test_cli_status_without_a_job(monkeypatch):
    squeue(monkeypatch, None)
    r = CliRunner().invoke(cli, ["status"])
    assert r.exit_code != 0 and "pass --job ID" in str(r.exception)


def test_cli_status_says_when_it_has_no_logs(monkeypatch, tmp_path):
    squeue(monkeypatch, "squeue_running")
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    typo = CliRunner().invoke(cli, ["status", "--no-lighthouse", "--log-dir", str(tmp_path / "x")])
    assert typo.exit_code != 0 and "--log-dir" in str(typo.exception)
    r = CliRunner().invoke(cli, ["status", "--no-lighthouse", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["tasks"]  # stdout stays JSON
    assert f"note: no logs in {tmp_path / 'torchft' / 'tft-12'}" in r.stderr


def test_slurm_conf_that_is_not_a_file_is_said_at_once(monkeypatch, tmp_path):
    """Slurm's tools retry a missing SLURM_CONF for the whole timeout; we say it first."""
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    r = CliRunner().invoke(cli, ["status"])
    assert f"SLURM_CONF={tmp_path / 'slurm.conf'} is not a file" in str(r.exception)


def test_a_restarted_attempt_shows_no_step_until_it_trains():
    old = "[2026-11-23 10:00:00]  launching replica 1 (attempt 0) on w\nstep: 17  loss: 6.3\n"
    new = "[2026-11-23 10:01:00]  launching replica 1 (attempt 1) on w\nloading...\n"
    s = st.summarize_tail(old + new)
    assert (s.attempt, s.last_step, s.last_loss) == (1, None, None)
    s = st.summarize_tail(old + new + "step: 18  loss: 6.1\n")
    assert (s.attempt, s.last_step, s.last_loss) == (1, 18, 6.1)


def test_training_means_committed_in_this_attempt(tmp_path):
    banner = "[2026-11-23 10:01:00]  launching replica 1 (attempt 1) on w\n"
    commit = "[titan] ... - [torchtitan_ft_1:ab/0 - step 3] should_commit=True enough_replicas\n"
    before = "[titan] ... - [torchtitan_ft_1:cd/0 - step 9] should_commit=True\n"
    assert not st.summarize_tail(before + banner + "step: 2  loss: 8.1\n").training
    assert st.summarize_tail(before + banner + "step: 2  loss: 8.1\n" + commit).training
    assert st.summarize_tail(banner + "step: 2  loss: 8.1\n").training  # no torchft lines
    assert not st.summarize_tail(banner).training
    # the real log: replica 1's second attempt committed before it was stopped
    assert st.read_summary(real_log(tmp_path, 1)).training
