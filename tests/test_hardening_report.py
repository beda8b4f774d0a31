"""Hardening of `report`, `logs` and `status` against hostile or broken input:
terminal escapes in log lines, non-regular files and endless pipes given to `report`,
newline-free logs, numbers too long for int(), and replica logs that cannot be read.
Every test here fails without its fix."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from ftslurm import logtail, logvocab
from ftslurm import status as st
from ftslurm.errors import UserError
from ftslurm.report import build_report, sources
from ftslurm.report import reader as R
from tests.clirun import ftslurm, ftslurm_popen, invoke

REPO = Path(__file__).resolve().parent.parent
# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    """The environment of a command run here: this checkout, no user state."""
    state = tmp_path / "user-state"
    return {
        **os.environ, "PYTHONPATH": str(REPO), "FTSLURM_LIGHTHOUSE_DIR": str(state / "lh"),
        "FTSLURM_EVENTS": str(state / "events.jsonl"), "FTSLURM_OUTPUTS": str(state / "out"),
        **more,
    }  # fmt: skip

STEP_LINE = "[titan] 2026-11-23 10:00:0{i},000 - root - INFO - step: {i}  loss:  2.5"


def run_dir(tmp_path: Path, lines: dict[int, bytes], job: str = "7") -> Path:
    run = tmp_path / "torchft" / f"tft-{job}"
    run.mkdir(parents=True)
    for i, data in lines.items():
        (run / f"tft-{job}_{i}.out").write_bytes(data)
    return run


# ---------------------------------------------------------------- 7: terminal escapes


def test_logs_shows_terminal_controls_escaped_never_raw(tmp_path):
    """A log line that sets the window title (OSC), clears the screen (CSI), rings the bell or
    moves the cursor back is shown as text; tabs stay tabs; torchtitan's colour codes are
    dropped (they colour, they say nothing)."""
    hostile = (
        b"[titan] 2026-11-23 10:00:01,000 - x - INFO - \x1b]0;owned\x07title\x1b[2Jclear"
        b" bell\x07 back\x08 cr\rend \xc2\x9b6n c1\ttab\n"
        b"[titan] 2026-11-23 10:00:02,000 - root - INFO - \x1b[31mstep: 3  \x1b[32mloss:  2.5"
        b"\x1b[39m\n"
    )
    run = run_dir(tmp_path, {0: hostile})
    for colour in ("--no-color", "--color"):
        r = invoke("logs", "--run-dir", str(run), "-n", "5", colour)
        assert r.exit_code == 0, r.output
        first, second = r.output.splitlines()
        body = first[first.index("[titan]") :]  # after the prefix (coloured with --color)
        assert "\x1b" not in body and "\x07" not in body and "\x08" not in body
        assert "\r" not in body and "\x9b" not in body
        assert "\\x1b]0;owned\\x07title\\x1b[2Jclear bell\\x07 back\\x08 cr\\x0dend " in body
        assert "\\x9b6n c1\ttab" in body  # C1 CSI escaped, the tab kept
        assert second.endswith("- root - INFO - step: 3  loss:  2.5")


def test_logs_notes_escape_job_names_from_file_names(tmp_path):
    """Job names come from file names, which may hold anything a shell lets one create."""
    run = tmp_path / "copy"
    run.mkdir()
    (run / "tft-11_0.out").write_text(STEP_LINE.format(i=1) + "\n")
    (run / "tft-1\x1b[2J_0.out").write_text(STEP_LINE.format(i=1) + "\n")
    os.utime(run / "tft-11_0.out", (1e9, 1e9))  # the other job is the newest
    r = invoke("logs", "--run-dir", str(run), "-n", "1")
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stderr and "showing job 1\\x1b[2J, the newest" in r.stderr


def test_status_table_escapes_what_it_did_not_write():
    row = st.Row(0, "RUNNING", "bad\x07reason", "node\x1b]0;x\x07", 1, 1, 5, 2.0, 1.0, 3, "")
    quorum = st.Quorum(True, "lh:29510", 4, ["evil\x1b[2J_0:uuid"], "ok", 1)
    text = st.render_table(7, [row], quorum)
    assert "\x1b" not in text and "\x07" not in text
    assert "node\\x1b]0;x\\x07" in text and "bad\\x07reason" in text
    assert "(evil\\x1b[2J_0)" in text


# ---------------------------------------------------------------- 8: report of a non-regular file


def _small_files() -> None:
    """In the child: no file over 64 MiB (a report that copies /dev/zero stops there)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


def _report(*args: str, tmpdir: Path) -> subprocess.CompletedProcess:
    return ftslurm("report", *args, env=env(tmpdir.parent, TMPDIR=str(tmpdir)), inherit=False,
                   text=False, preexec_fn=_small_files)  # fmt: skip


@pytest.mark.process
def test_report_refuses_a_device_a_fifo_and_a_socket_at_once(tmp_path):
    """`report /dev/zero` copied the device into /tmp without end; a named pipe with no writer
    blocked forever; a socket failed late. Each is one line, exit 2, nothing written."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.out"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, what in (("/dev/zero", "a character device"), (str(fifo), "a named pipe"),
                           (str(sock_path), "a socket")):  # fmt: skip
            t = time.monotonic()
            for argv in ([path], ["--lighthouse", path], ["--events", path]):
                r = _report(*argv, tmpdir=spool)
                err = r.stderr.decode()
                assert r.returncode == 2 and err.count("\n") == 1, (argv, err)
                assert err.startswith(f"Error: {path}: {what}, not a log file"), err
            assert time.monotonic() - t < 30
            assert list(spool.iterdir()) == []
    finally:
        sock.close()


@pytest.mark.process
def test_a_pipe_is_spooled_into_a_file_nobody_can_leave_behind(tmp_path):
    """`report /dev/stdin` still reads a pipe (it is read twice), but into an unnamed file:
    killed while it reads (SIGKILL: no handler runs), nothing is left in TMPDIR."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    proc = ftslurm_popen("report", "/dev/stdin", env=env(tmp_path, TMPDIR=str(spool)),
                         inherit=False, text=False, stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=_small_files)  # fmt: skip
    try:
        assert proc.stdin is not None
        # a pipe holds 64 KiB: once 4 MiB are written, the report has read most of them
        proc.stdin.write(b"y" * (4 << 20))
        proc.stdin.flush()
        assert list(spool.iterdir()) == []
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert list(spool.iterdir()) == []
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()


def test_a_pipe_longer_than_the_spool_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SPOOL_MAX", 1 << 20)
    r, w = os.pipe()

    def writer() -> None:
        try:
            with os.fdopen(w, "wb") as fh:
                for _ in range(3):
                    fh.write(b"z" * (1 << 20))
        except BrokenPipeError:
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        with pytest.raises(UserError, match=r"a pipe of more than 1 MiB: save it to a file"):
            sources.find_run_files([f"/proc/self/fd/{r}"])
    finally:
        os.close(r)
        t.join(10)
    assert not t.is_alive()


def test_a_regular_file_is_read_in_place(tmp_path):
    log = tmp_path / "replica_0.log"
    log.write_text(STEP_LINE.format(i=1) + "\n")
    files = sources.find_run_files([str(log)], lighthouse=[str(log)])
    assert files.replica_logs == [log] and files.lighthouse_logs == [log]


# ---------------------------------------------------------------- 9: newline-free logs


def _newline_free(path: Path, mib: int, tail: bytes = b"\n") -> Path:
    """One line of `mib` MiB (a timestamp, then x), written in blocks."""
    with open(path, "wb") as fh:
        fh.write(b"[titan] 2026-11-23 10:00:00,000 - " + b"x" * ((1 << 20) - 34))
        for _ in range(mib - 1):
            fh.write(b"x" * (1 << 20))
        fh.write(tail)
    return path


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_read_tail_of_a_newline_free_log_shows_it_cut_in_bounded_memory(tmp_path):
    p = _newline_free(tmp_path / "tft-7_0.out", 24)
    (lines, offset), peak = _peak(lambda: logtail.read_tail(p, 5))
    assert offset == p.stat().st_size
    [line] = lines
    assert line.startswith("[titan] 2026-11-23 10:00:00,000 - xxx")
    head, marker = line[: logtail.LINE_MAX], line[logtail.LINE_MAX :]
    assert set(head[40:]) == {"x"}
    assert marker == f" [... line cut: {(24 << 20) - logtail.LINE_MAX} more bytes]"
    assert peak < 6 * logtail.LINE_MAX, peak  # was 2-3 times the file
    # the same through the follower (the tail `logs` shows), and with normal lines after it
    with open(p, "ab") as fh:
        fh.write(b"".join(STEP_LINE.format(i=i).encode() + b"\n" for i in range(1, 4)))
    entries, peak = _peak(lambda: logtail.Follower(lambda: {"r0": p}).start(3))
    assert [e.text for e in entries] == [STEP_LINE.format(i=i) for i in range(1, 4)]
    assert peak < 6 * logtail.LINE_MAX, peak


def test_a_cut_line_keeps_its_time_in_the_merge(tmp_path):
    p = _newline_free(tmp_path / "tft-7_0.out", 3)
    [e] = logtail.Follower(lambda: {"r0": p}).start(1)
    assert e.key == logvocab.line_time("2026-11-23 10:00:00,000")
    assert e.text.endswith(f" [... line cut: {(3 << 20) - logtail.LINE_MAX} more bytes]")


def test_following_a_newline_free_writer_holds_one_cut_line(tmp_path):
    p = tmp_path / "tft-7_0.out"
    p.write_bytes(b"")
    f = logtail.Follower(lambda: {"r0": p})
    assert f.start(5) == []
    with open(p, "ab") as fh:
        for _ in range(6):
            fh.write(b"y" * (1 << 20))
            fh.flush()
            assert f.poll() == []
            assert len(f.sources["r0"].pending.head) <= logtail.LINE_MAX
        fh.write(b"\n" + STEP_LINE.format(i=1).encode() + b"\n")
    cut, after = f.poll()
    assert cut.text == "y" * logtail.LINE_MAX + f" [... line cut: {5 << 20} more bytes]"
    assert after.text == STEP_LINE.format(i=1)


def test_an_archived_newline_free_log_is_cut_too(tmp_path):
    import gzip

    raw = _newline_free(tmp_path / "raw", 24)
    gz = tmp_path / "tft-7_0.out.gz"
    gz.write_bytes(gzip.compress(raw.read_bytes(), 1))
    (lines, _), peak = _peak(lambda: logtail.read_tail(gz, 5))
    marker = f" [... line cut: {(24 << 20) - logtail.LINE_MAX} more bytes]"
    assert [len(x) for x in lines] == [logtail.LINE_MAX + len(marker)]
    assert lines[0].endswith(marker)
    assert peak < 8 * logtail.LINE_MAX, peak  # was twice the line


def test_report_of_a_newline_free_log_reads_in_bounded_memory(tmp_path):
    """clock_offset read the first lines with `for line in fh`: a newline-free log was one
    line in memory (300 MB -> 649 MB RSS); the reader counts the dropped line once."""
    p = _newline_free(tmp_path / "replica_0.log", 40, tail=b"")
    offset, peak = _peak(lambda: sources.clock_offset([p]))
    assert offset == 0.0 and peak < 3 * R.MAX_LINE, peak
    stats = R.ParseStats()
    assert list(R.iter_file_events(p, stats)) == [] and stats.overlong == 1


def _rss_of(args: list[str], tmp_path: Path) -> tuple[int, bytes, bytes]:
    """Peak RSS (KiB) of `ftslurm <args>` in a fresh interpreter, the end of its stdout and its
    stderr. VmHWM, not getrusage's ru_maxrss: Linux carries the parent's peak (this test
    process's) into an exec'd child's ru_maxrss, VmHWM belongs to the child's own memory."""
    code = (
        "import re, sys\n"
        "from ftslurm.cli import main\n"
        f"sys.argv = ['ftslurm', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stdout.flush()\n"
        "hwm = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print('RSS', hwm, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env(tmp_path),
                       cwd=tmp_path, timeout=120)  # fmt: skip
    err, rss = r.stderr.rsplit(b"RSS ", 1)
    return int(rss), r.stdout[-200:], err[-300:]


@pytest.mark.process
def test_logs_and_report_of_a_64_mib_newline_free_log_stay_small(tmp_path):
    """Peak RSS in a subprocess (resource.getrusage): before, `logs -n 5` took 4.5 times the
    file and `report` twice; now both stay near the interpreter's own size."""
    run = run_dir(tmp_path, {})
    _newline_free(run / "tft-7_0.out", 64)
    base, _, _ = _rss_of(["--help"], tmp_path)
    logs_rss, out, _ = _rss_of(["logs", "--run-dir", str(run), "-n", "5", "--no-color"], tmp_path)
    assert logs_rss - base < 32 << 10, (base, logs_rss)
    assert out.endswith(f"[... line cut: {(64 << 20) - logtail.LINE_MAX} more bytes]\n".encode())
    report_rss, _, err = _rss_of(["report", str(run)], tmp_path)
    assert report_rss - base < 32 << 10, (base, report_rss)
    assert b"nothing to report" in err


# ---------------------------------------------------------------- 10: numbers past int()'s limit

BIG = "9" * 5000


@pytest.mark.parametrize("line", [
    f"[titan] 2026-11-23 10:00:00,000 - torchft.manager - INFO - [ft_0:u/0 - step {BIG}] "
    "healing required",
    f"[titan] 2026-11-23 10:00:00,000 - root - INFO - step: {BIG}  loss:  5.9",
    f"[2026-11-23 10:00:00]  launching replica 1 (attempt {BIG}) on worker-0",
    f"[2026-11-23 10:00:00]  launching replica {BIG} (attempt 1) on worker-0",
    '2026-11-23T10:00:00.000 [INFO] [torchft::lighthouse] - Quorum! Quorum { quorum_id: 1, '
    f'participants: [QuorumMember {{ replica_id: "a_0:x", address: "", step: {BIG}, '
    'world_size: 1, shrink_only: false, commit_failures: 0 }], created: Some(Timestamp { '
    'seconds: 1, nanos: 2 }) }',
    f"2026-11-23T10:00:00.000 [INFO] Quorum! Quorum {{ quorum_id: {BIG}, participants: [], "
    "created: Some(Timestamp { seconds: 1, nanos: 2 }) }",
    "[titan] 2026-11-23 10:00:00,000 - torchft.manager - INFO - [ft_0:u/0 - step 12345678901234"
    "5678901] should_commit=True enough_replicas=True, errored=None",
], ids=["manager", "titan-step", "attempt", "replica", "member-step", "quorum-id", "19-digits"])
# fmt: skip
def test_a_number_too_long_for_a_step_is_no_event(line):
    assert logvocab.parse_line(line.encode()) is None


def test_eighteen_digits_still_parse():
    n = "9" * 18
    ev = logvocab.parse_line(f"[ft_0:u/0 - step {n}] reconfiguring for quorum_id={n}".encode())
    assert ev is not None and ev.step == int(n) and ev.quorum_id == int(n)
    assert logvocab.split_replica_id(f"ft_{BIG}:u") == (f"ft_{BIG}:u", None, None)
    assert logvocab.parse_log_name(f"tft-1_{BIG}.out") is None


def test_report_counts_a_too_long_step_as_malformed(tmp_path):
    mgr = "[titan] 2026-11-23 10:00:0{s},000 - torchft.manager - INFO - [ft_0:u/0 - step {n}] {m}"
    lines = [
        mgr.format(s=1, n=1, m="should_commit=True enough_replicas=True, errored=None"),
        mgr.format(s=2, n=BIG, m="healing required max_step=3"),
        mgr.format(s=3, n="1" * 25, m="should_commit=True enough_replicas=True, errored=None"),
        mgr.format(s=4, n=2, m="should_commit=True enough_replicas=True, errored=None"),
        f"[2026-11-23 10:00:05]  launching replica 0 (attempt {BIG}) on worker-0",
    ]
    log = tmp_path / "replica_0.log"
    log.write_text("\n".join(lines) + "\n")
    rep = build_report(str(log))
    assert rep.stats.malformed == 3
    c = rep.stats.commits[b"ft_0:u"]  # the two good steps are still counted
    assert (c.attempted, c.committed, c.max_step) == (2, 2, 2)


def test_status_skips_a_too_long_step_and_attempt():
    text = "\n".join([
        "[2026-11-23 10:00:00]  launching replica 1 (attempt 2) on worker-1",
        STEP_LINE.format(i=4),
        f"[titan] 2026-11-23 10:00:05,000 - root - INFO - step: {BIG}  loss:  1.0",
        f"[2026-11-23 10:00:06]  launching replica 1 (attempt {BIG}) on worker-1",
    ])  # fmt: skip
    s = st.summarize_tail(text)
    assert (s.attempt, s.last_step, s.last_loss) == (2, 4, 2.5)


# ---------------------------------------------------------------- 11: unreadable replica logs


def test_logs_names_each_log_it_cannot_read_and_exits_1(tmp_path):
    run = run_dir(tmp_path, {0: (STEP_LINE.format(i=1) + "\n").encode()})
    (run / "tft-7_1.out").mkdir()  # a folder named like a log
    (run / "tft-7_2.out").symlink_to(tmp_path / "gone")  # a dangling link
    r = invoke("logs", "--run-dir", str(run), "-n", "3")
    assert r.exit_code == 1, r.output
    assert r.stdout == f"[r0] {STEP_LINE.format(i=1)}\n"  # the others are still shown
    assert r.stderr.splitlines() == [
        f"Error: cannot read the log of replica 1, {run / 'tft-7_1.out'} (Is a directory)",
        f"Error: cannot read the log of replica 2, {run / 'tft-7_2.out'} "
        "(No such file or directory)",
    ]
    only0 = invoke("logs", "--run-dir", str(run), "--replica", "0")
    assert only0.exit_code == 0 and only0.stderr == ""


def test_following_says_once_which_log_it_cannot_read(tmp_path):
    run = run_dir(tmp_path, {0: (STEP_LINE.format(i=1) + "\n").encode()})
    failed: list[str] = []
    f = logtail.Follower(lambda: logtail.replica_logs(run),
                         on_error=lambda label, path, e: failed.append(label))  # fmt: skip
    assert len(f.start(5)) == 1
    (run / "tft-7_1.out").mkdir()  # appears later, unreadable
    for _ in range(3):
        assert f.poll() == []
    assert failed == ["r1"]
