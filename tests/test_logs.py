"""`ftslurm logs` and ftslurm.logtail: tail reading that never reads a whole file, merging in
time order with untimed lines kept in place, and following growth, new files, new attempts
and truncation; the CLI (CliRunner and -f through the real console script). The timestamps
themselves: tests/test_logvocab.py."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import logtail, logvocab
from ftslurm.cli import cli
from ftslurm.run import model as runs

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "failure"


def test_read_tail_last_lines_and_partial_line(tmp_path):
    p = tmp_path / "a.out"
    p.write_text("".join(f"line {i}\n" for i in range(100)) + "half a li")
    lines, offset = logtail.read_tail(p, 3, block=16)
    assert lines == ["line 97", "line 98", "line 99"]
    assert offset == p.stat().st_size - len("half a li")  # the follower resumes there
    assert logtail.read_tail(p, 0)[0] == []
    assert logtail.read_tail(p, 1000)[0][0] == "line 0"
    empty = tmp_path / "e.out"
    empty.write_text("")
    assert logtail.read_tail(empty, 5) == ([], 0)
    # the line being written, for a reader that shows it (the Lighthouse's log, status)
    assert logtail.read_tail(p, 2, block=16, partial=True)[0] == ["line 99", "half a li"]
    assert logtail.read_tail(p, max_bytes=20, partial=True)[0] == ["line 99", "half a li"]
    assert logtail.read_tail(p, max_bytes=20) == (["line 99"], offset)


def test_read_tail_never_reads_the_whole_file(tmp_path, monkeypatch):
    p = tmp_path / "big.out"
    with open(p, "w") as f:
        f.writelines(f"[titan] 2026-11-23 10:00:00,000 - root - INFO - step: {i}\n"
                     for i in range(300_000))  # fmt: skip
    size = p.stat().st_size
    assert size > 15_000_000
    read = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            data = self.fh.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

    monkeypatch.setattr(logtail, "open", lambda *a, **k: Counting(real_open(*a, **k)),
                        raising=False)  # fmt: skip
    lines, _ = logtail.read_tail(p, 20)
    assert lines[-1].endswith("step: 299999") and len(lines) == 20
    assert sum(read) <= 2 * logtail.BLOCK
    read.clear()
    lines, _ = logtail.read_tail(p, max_bytes=4096, partial=True)
    assert sum(read) <= 4096 and lines[-1].endswith("step: 299999") and len(lines) > 20


def test_untimed_lines_stay_with_their_line_and_files_keep_their_order():
    a = ["[titan] 2026-11-23 10:00:01,000 - a1",
         "Traceback (most recent call last):",
         "RuntimeError: boom",
         "[titan] 2026-11-23 10:00:00,500 - a2 (earlier, logged by another rank)",
         "[titan] 2026-11-23 10:00:03,000 - a3"]  # fmt: skip
    b = ["2026-11-23T10:00:00.000 [INFO] b1", "2026-11-23T10:00:02.000 [INFO] b2"]
    merged = logtail.merge([logtail.keyed(a, "r0"), logtail.keyed(b, "r1")])
    assert [(e.label, e.text.split()[-1]) for e in merged] == [
        ("r1", "b1"), ("r0", "a1"), ("r0", "last):"), ("r0", "boom"), ("r0", "rank)"),
        ("r1", "b2"), ("r0", "a3"),
    ]  # fmt: skip
    # leading untimed lines take the first time found (or the time before the tail)
    assert logtail.keyed(["  }", "2026-11-23T10:00:05.000 x"], "r0")[0].key == pytest.approx(
        logvocab.line_time("2026-11-23T10:00:05.000")
    )
    assert logtail.keyed(["  }"], "r0", last=7.0)[0].key == 7.0


def real_run(tmp_path: Path, job: str = "8") -> Path:
    run = tmp_path / "torchft" / f"tft-{job}"
    run.mkdir(parents=True)
    for i in (0, 1):
        data = gzip.decompress((FIX / "tft-8" / f"tft-8_{i}.out.gz").read_bytes())
        (run / f"tft-{job}_{i}.out").write_bytes(data)
    return run


def test_cli_logs_merges_real_logs_in_time_order(tmp_path, monkeypatch):
    real_run(tmp_path)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    r = CliRunner().invoke(cli, ["logs", "-n", "5"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == 10
    assert sum(x.startswith("[r0] ") for x in lines) == 5
    assert sum(x.startswith("[r1] ") for x in lines) == 5
    times = [logvocab.line_time(x[5:]) for x in lines]
    known = [t for t in times if t is not None]
    assert known == sorted(known)
    only1 = CliRunner().invoke(cli, ["logs", "-n", "2", "--replica", "1", "--job", "8"])
    assert only1.output.splitlines() == [
        "[r1] [2026-11-23 09:55:49]  torchrun exited with code 1",
        "[r1] not requeueing: stopped by a signal from Slurm or the user; Slurm decides what is"
        " next",
    ]
    # the task id as squeue shows it: job 8, replica 1
    assert CliRunner().invoke(cli, ["logs", "-n", "2", "--job", "8_1"]).output == only1.output
    bad = CliRunner().invoke(cli, ["logs", "--job", "8_x"])
    assert bad.exit_code == 2 and "is not a job id (42, or 42_1" in bad.output
    colour = CliRunner().invoke(cli, ["logs", "-n", "1", "--replica", "0", "--color"])
    assert colour.output.startswith("\x1b[36m[r0]")


def test_cli_logs_reads_archived_logs(tmp_path, monkeypatch):
    """A run kept gzipped: `.out.gz` files (the recorded fixtures as they are) and a log
    gzipped in place read as text, the same lines as the plain logs; was bytes, or "no
    replica logs"."""
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    plain = CliRunner().invoke(cli, ["logs", "--run-dir", str(real_run(tmp_path)), "-n", "4"])
    assert plain.exit_code == 0 and len(plain.output.splitlines()) == 8, plain.output
    archived = CliRunner().invoke(cli, ["logs", "--run-dir", str(FIX / "tft-8"), "-n", "4"])
    assert archived.exit_code == 0, archived.output
    assert archived.output == plain.output
    in_place = tmp_path / "in-place"
    in_place.mkdir()
    for i in (0, 1):
        archive = FIX / "tft-8" / f"tft-8_{i}.out.gz"
        (in_place / f"tft-8_{i}.out").write_bytes(archive.read_bytes())
    got = CliRunner().invoke(cli, ["logs", "--run-dir", str(in_place), "-n", "4"])
    assert got.exit_code == 0 and got.output == plain.output, got.output
    # the live log wins over its archive; a truncated archive gives what could be read
    (in_place / "tft-8_0.out.gz").write_bytes(b"")
    assert runs.replica_logs(in_place)["r0"].name == "tft-8_0.out"
    whole = gzip.decompress((in_place / "tft-8_1.out").read_bytes()).decode().splitlines()
    cut = tmp_path / "cut.out.gz"
    cut.write_bytes((in_place / "tft-8_1.out").read_bytes()[:-300])
    lines, offset = logtail.read_tail(cut, 1000)
    assert 0 < len(lines) < len(whole) and lines == whole[: len(lines)]
    assert offset == cut.stat().st_size
    last = logtail.read_tail(cut, max_bytes=2000)[0]
    assert last and sum(len(x) + 1 for x in last) <= 2000 and last == lines[-len(last) :]
    # following an archive: read once, never as bytes
    f = logtail.Follower(lambda: {"r1": in_place / "tft-8_1.out"})
    assert [e.text for e in f.start(2)] == whole[-2:]
    assert f.poll() == []


def test_cli_logs_with_the_lighthouse_log(tmp_path, monkeypatch):
    from ftslurm import lighthouse

    real_run(tmp_path)
    lh = tmp_path / "lighthouse.log"
    lh.write_text("2026-11-23T09:55:48.000 [INFO] [torchft::lighthouse] - Quorum status: x\n")
    monkeypatch.setattr(lighthouse, "log_path", lambda state_dir=None: lh)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    r = CliRunner().invoke(cli, ["logs", "-n", "3", "--lighthouse"])
    assert r.exit_code == 0, r.output
    assert "[lh] 2026-11-23T09:55:48.000 [INFO]" in r.output


def test_cli_logs_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    r = CliRunner().invoke(cli, ["logs"])
    assert r.exit_code != 0 and "no run folder" in str(r.exception)
    real_run(tmp_path)
    r5 = CliRunner().invoke(cli, ["logs", "--replica", "5"])
    assert "no log of replica 5 in" in str(r5.exception) and "(there: r0, r1)" in str(r5.exception)
    gone = CliRunner().invoke(cli, ["logs", "--run-dir", str(tmp_path / "tft-99")])
    assert "does not exist (wrong --run-dir?)" in str(gone.exception)


def test_cli_logs_in_a_renamed_run_folder_and_in_dot(tmp_path, monkeypatch):
    run = real_run(tmp_path)
    copy = run.rename(tmp_path / "kept-for-the-postmortem")
    r = CliRunner().invoke(cli, ["logs", "--run-dir", str(copy), "-n", "1"])
    assert r.exit_code == 0 and {x[:4] for x in r.output.splitlines()} == {"[r0]", "[r1]"}
    monkeypatch.chdir(copy.rename(tmp_path / run.name))  # back to tft-<job>, read as "."
    dot = CliRunner().invoke(cli, ["logs", "--run-dir", ".", "-n", "1"])
    assert dot.exit_code == 0 and dot.output.splitlines() == r.output.splitlines()
    r = CliRunner().invoke(cli, ["logs", "--job", "99"])
    assert "does not exist" in str(r.exception)


def test_cli_logs_in_a_folder_with_several_jobs(tmp_path, monkeypatch):
    """Two jobs' logs in one folder (a postmortem copy): replica 0 of one job was silently
    replaced by the other's; now the newest job is shown and the others are named."""
    mixed = tmp_path / "mixed"
    old_run, new_run = real_run(tmp_path, "11"), real_run(tmp_path / "b", "13")
    mixed.mkdir()
    for run, when in ((old_run, 1_000_000), (new_run, 2_000_000)):
        for log in run.iterdir():
            os.utime(log.rename(mixed / log.name), (when, when))
    r = CliRunner().invoke(cli, ["logs", "--run-dir", str(mixed), "-n", "1"])
    assert r.exit_code == 0, r.output
    assert "showing job 13, the newest (also there: 11;" in r.stderr
    assert sorted(x[:4] for x in r.stdout.splitlines()) == ["[r0]", "[r1]"]
    assert runs.replica_logs(mixed) == {
        "r0": mixed / "tft-13_0.out", "r1": mixed / "tft-13_1.out"}  # fmt: skip


def test_follower_growth_new_files_new_attempts_truncation(tmp_path):
    run = tmp_path / "tft-5"
    run.mkdir()
    r0 = run / "tft-5_0.out"
    r0.write_text("[2026-11-23 10:00:00]  launching replica 0 (attempt 0) on worker-0\n")
    f = logtail.Follower(lambda: runs.replica_logs(run))
    assert [e.label for e in f.start(10)] == ["r0"]
    assert f.poll() == []
    with open(r0, "a") as fh:
        fh.write("2026-11-23T10:00:02.000 [INFO] x\nhalf")
    assert [e.text for e in f.poll()] == ["2026-11-23T10:00:02.000 [INFO] x"]
    with open(r0, "a") as fh:
        fh.write(" done\n[2026-11-23 10:00:09]  launching replica 0 (attempt 1) on worker-2\n")
    (run / "tft-5_1.out").write_text("2026-11-23T10:00:05.000 [INFO] r1 starts late\n")
    (run / "tft-6_1.out").write_text("another job's file\n")
    got = [(e.label, e.text) for e in f.poll()]
    assert got == [
        ("r0", "half done"),
        ("r1", "2026-11-23T10:00:05.000 [INFO] r1 starts late"),
        ("r0", "[2026-11-23 10:00:09]  launching replica 0 (attempt 1) on worker-2"),
    ]
    r0.write_text("[2026-11-23 10:01:00]  a new file\n")  # truncated / replaced
    assert [e.text for e in f.poll()] == ["[2026-11-23 10:01:00]  a new file"]


@pytest.mark.process
def test_logs_follow_through_the_console_script(tmp_path):
    run = tmp_path / "torchft" / "tft-7"
    run.mkdir(parents=True)
    log0 = run / "tft-7_0.out"
    log0.write_text("[2026-11-23 10:00:00]  launching replica 0 (attempt 0) on worker-0\n")
    env = {**os.environ, "FTSLURM_OUTPUTS": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftslurm", "logs", "-f", "-n", "5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().startswith("[r0] [2026-11-23 10:00:00]  launching")
        with open(log0, "a") as fh:
            fh.write("[2026-11-23 10:00:07]  launching replica 0 (attempt 1) on worker-2\n")
        assert "(attempt 1)" in proc.stdout.readline()
        (run / "tft-7_1.out").write_text("[titan] 2026-11-23 10:00:08,000 - root - step: 1\n")
        assert proc.stdout.readline().startswith("[r1] [titan]")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave it behind, then fail
            proc.communicate()
            raise
    assert proc.returncode == 0 and "Traceback" not in err


@pytest.mark.process
@pytest.mark.timeout(60)
def test_follow_in_a_folder_of_several_jobs_stays_with_one_job(tmp_path):
    """Following `.` with two jobs' logs: the newer job's lines only, also when the older
    job's log grows later (it would then become the newest), and --job picks the other."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for job, when in (("5", 1_000_000), ("7", 2_000_000)):
        log = mixed / f"tft-{job}_0.out"
        log.write_text(f"[2026-11-23 10:00:0{job}]  launching replica 0 (attempt 0) on w-{job}\n")
        os.utime(log, (when, when))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftslurm", "logs", "-f", "-n", "1", "--run-dir", str(mixed)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert "on w-7" in proc.stdout.readline()
        with open(mixed / "tft-5_0.out", "a") as fh:  # job 5 now the newest: not shown
            fh.write("[2026-11-23 10:00:20]  job 5 goes on\n")
        future = time.time() + 10**6  # ... at every poll from now on, whenever they come
        os.utime(mixed / "tft-5_0.out", (future, future))
        with open(mixed / "tft-7_0.out", "a") as fh:
            fh.write("[2026-11-23 10:00:21]  job 7 goes on\n")
        os.utime(mixed / "tft-7_0.out", (2_000_000, 2_000_000))
        # the next line is job 7's: a follower that moved to the newest job prints job 5's
        assert "job 7 goes on" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert "showing job 7" in err and "choose with --job" in err
    five = CliRunner().invoke(cli, ["logs", "--run-dir", str(mixed), "--job", "5", "-n", "5"])
    assert five.exit_code == 0 and "job 5 goes on" in five.stdout and "w-7" not in five.stdout
    none = CliRunner().invoke(cli, ["logs", "--run-dir", str(mixed), "--job", "6"])
    assert "no logs of job 6 in" in str(none.exception) and "(there: job 5, 7)" in str(
        none.exception
    )


def test_newest_run_dir(tmp_path):
    assert logvocab.newest_run_dir(tmp_path / "none") is None
    old, new = tmp_path / "tft-1", tmp_path / "tft-2"
    old.mkdir()
    new.mkdir()
    os.utime(old, (time.time() - 100, time.time() - 100))
    (tmp_path / "slurm-3_0.out").write_text("")
    assert logvocab.newest_run_dir(tmp_path) == new
