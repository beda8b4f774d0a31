"""`lighthouse status`, `status` and `metrics show` at 1,024 replicas, on a real page.

tests/fixtures/lighthouse/status-1024.html.gz is the /status page of torchft's real
Lighthouse with 1,024 replicas (how it was recorded: the README there): 498 KB, quorum 2 of
1,014 members, replica 77 in the quorum with an old heartbeat (lost), 700 recovering, 10 ids
heartbeating outside the quorum, replica 5's old uuid gone. Before, at that scale: `lighthouse
status` printed every member and heartbeat up to 50 of each (and got no answer from a loaded
Lighthouse: its 2 s bounded the whole read), `status` printed 1,024 rows, and `metrics show`
said `ftslurm_lighthouse_up 0` for a Lighthouse that took 2.4-3.1 s to answer.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ftslurm import daemon
from ftslurm import status as st
from ftslurm.lighthouse import lifecycle, status_page
from ftslurm.lighthouse.status_page import (
    CutAnswer,
    Deadline,
    http_get,
    parse_status_html,
    read_page,
    summarize,
)
from ftslurm.metrics.snapshot import build_snapshot
from tests.clirun import invoke
from tests.fakeslurm import FakeSlurm

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FIX = Path(__file__).parent / "fixtures"
PAGE = gzip.decompress((FIX / "lighthouse" / "status-1024.html.gz").read_bytes()).decode()
MAX_LINES = 40  # what a person reads of 1,024 replicas
LOST, HEALING = "torchtitan_ft_77:", "torchtitan_ft_700:"


def managed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
            probe_url: str = "http://127.0.0.1:29510/status") -> None:  # fmt: skip
    """A managed Lighthouse that `lh.status` finds running, probed at `probe_url`."""
    state = daemon.DaemonState(
        "lighthouse", 4242, None, time.time() - 60, ["lighthouse"], "lighthouse",
        extra={"address": "http://login-0:29510", "bind": "0.0.0.0:29510",
               "probe_url": probe_url},
    )  # fmt: skip
    monkeypatch.setattr(daemon.Daemon, "lookup",
                        lambda self, clean_stale=True: daemon.Lookup(state))  # fmt: skip
    monkeypatch.setenv("FTSLURM_LIGHTHOUSE_DIR", str(tmp_path / "lh"))


@pytest.fixture
def lighthouse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A managed Lighthouse whose every read of its /status page answers PAGE and is counted
    in the returned list."""
    managed(monkeypatch, tmp_path)
    reads: list[str] = []

    def get(url: str, timeout: object) -> tuple[int, str]:
        reads.append(url)
        return 200, PAGE

    monkeypatch.setattr(lifecycle, "http_get", get)
    return reads


def test_the_1024_page_is_read_whole_and_fast():
    took = min(_timed(parse_status_html, PAGE)[1] for _ in range(3))
    q = parse_status_html(PAGE)
    assert took < 0.2, took
    assert (q.quorum_id, len(q.members), len(q.heartbeats), q.readable) == (2, 1014, 1025, True)
    s = summarize(q)
    assert s.states == {"lost": 1, "late": 0, "healing": 1, "joining": 10, "gone": 1,
                        "training": 1012}  # fmt: skip
    assert [r.replica_id.split(":")[0] for r in s.not_training[:2]] == [
        "torchtitan_ft_77", "torchtitan_ft_700"]  # fmt: skip


def _timed(fn, *args):  # noqa: ANN001, ANN202
    t0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t0


def test_lighthouse_status_at_1024_is_counts_then_the_replicas_not_training(lighthouse):
    r = invoke("lighthouse", "status")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    assert lighthouse == ["http://127.0.0.1:29510/status"]  # one read of the page
    at = next(i for i, line in enumerate(lines) if line.startswith("Replicas:"))
    assert "1025 id(s): 1012 training, 1 healing, 0 late, 1 lost" in lines[at]
    assert lines[at + 1].startswith("Heartbeats: 1023 live (0 late")
    assert lines[at + 2] == "Not training (13):"
    listed = lines[at + 3 :]
    assert listed[0].startswith(f"  {LOST}") and "lost: heartbeat 12.1 s ago (old)" in listed[0]
    assert listed[1].startswith(f"  {HEALING}") and "RECOVERING  healing" in listed[1]
    assert not any("training: heartbeat" in line for line in lines)  # the 1,012 are counted
    every = invoke("lighthouse", "status", "--all").output.splitlines()
    assert sum(line.startswith("  torchtitan_ft_") for line in every) == 1025


def test_more_than_20_not_training_are_cut_with_a_pointer_to_all(lighthouse, monkeypatch):
    """Every heartbeat old (a Lighthouse that heard from nobody for a while): 1,025 ids not
    training, 20 shown."""
    silent = re.sub(r'class="heartbeat\s*"', 'class="heartbeat old"', PAGE)
    monkeypatch.setattr(lifecycle, "http_get", lambda url, timeout: (200, silent))
    lines = invoke("lighthouse", "status").output.splitlines()
    assert len(lines) <= MAX_LINES
    assert "1012 training" not in lines and "Not training (1025):" in lines
    assert lines[-1] == "  ... and 1005 more (--all / --json for all)"


def test_lighthouse_status_json_has_the_page_once_and_its_counts(lighthouse):
    r = invoke("lighthouse", "status", "--json")
    out = json.loads(r.output)
    assert len(out["quorum"]["members"]) == 1014 and len(out["quorum"]["heartbeats"]) == 1025
    assert out["summary"]["states"]["training"] == 1012 and out["summary"]["old"] == 2
    assert r.output.count('"torchtitan_ft_77:') == 2  # its member item, its heartbeat item
    assert len(r.output) < len(PAGE)  # no list twice: smaller than the page it comes from
    assert lighthouse == ["http://127.0.0.1:29510/status"]


def squeue_1024() -> str:
    """The recorded `squeue --json` of a 2-task FT array, as 1,024 tasks: 0-1020 RUNNING,
    1021-1023 PENDING."""
    data = json.loads((FIX / "failure" / "squeue_running.json").read_text())
    jobs = []
    for i in range(1024):
        job = dict(data["jobs"][0], array_task_id=i, job_id=13 + i, nodes=f"worker-{i}")
        if i >= 1021:
            job.update(job_state="PENDING", state_reason="BeginTime", nodes="")
        jobs.append(job)
    data["jobs"] = jobs
    return json.dumps(data)


def test_status_at_1024_tasks_is_counts_then_the_tasks_not_training(lighthouse, monkeypatch,
                                                                   tmp_path):  # fmt: skip
    FakeSlurm().on(["squeue", "--json"], squeue_1024()).install(monkeypatch)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    r = invoke("status", "--job", "12")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    assert lighthouse == ["http://127.0.0.1:29510/status"]  # one read for the line and rows
    assert lines[0] == ("job 12: 1024 array task(s): 1021 RUNNING, 3 PENDING; 1009 training, "
                        "15 not")  # fmt: skip
    assert lines[1].startswith("lighthouse: http://login-0:29510 quorum 2: 1014 members")
    assert lines[2].startswith("lighthouse ids: 1012 training, 1 healing, 0 late, 1 lost")
    rows = {line.split()[0]: line for line in lines[5:] if line[:1].isdigit()}
    assert rows["77"].endswith("lighthouse: lost")
    assert rows["700"].endswith("lighthouse: healing")
    assert rows["1023"].split()[1] == "PENDING" and rows["1023"].endswith("PENDING")
    assert rows["5"].endswith("lighthouse: joining")  # its old uuid gone, the new one joins
    assert "RUNNING" in rows["0"] and rows["0"].endswith("lighthouse: joining")
    data = json.loads(invoke("status", "--job", "12", "--json").stdout)
    assert len(data["tasks"]) == 1024 and len(data["summary"]["not_training"]) == 15
    assert data["summary"]["not_training"]["77"] == ["lighthouse: lost"]
    every = invoke("status", "--job", "12", "--all").stdout.splitlines()
    assert len(every) == 1 + 1 + 1024 + 1  # the old table: a line per task, the quorum last


def test_status_at_1024_slots_counts_the_claims_and_lists_the_newest_takeovers(
        lighthouse, monkeypatch, tmp_path):  # fmt: skip
    """A run with warm spares claims every slot at its start (1,024 claim files) and some
    again after failures; its launchers may take several nodes out. A line each was 1,000+
    lines under the table; the default now counts the first claims and lists the newest
    takeovers and node actions, `--all` every one."""
    from ftslurm import logvocab
    from ftslurm.replica import slots
    from ftslurm.replica.launcher import preflight

    FakeSlurm().on(["squeue", "--json"], squeue_1024()).install(monkeypatch)
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path))
    run_dir = logvocab.run_dir(12, tmp_path)
    root = slots.slots_dir(run_dir)
    for slot in range(1024):
        assert slots.try_claim(root, slot, 0, slot, f"worker-{slot}", 1, 1000.0) is not None
    for k in range(15):  # spares 1024.. took slots 0..14 over, oldest first
        assert slots.try_claim(root, k, 1, 1024 + k, "spare", 1, 2000.0 + k, k) is not None
    for k in range(12):
        act = preflight.NodeAction(3000.0 + k, f"bad-{k}", "drain", "pre-flight check failed")
        preflight.record_action(run_dir, act)
    lines = invoke("status", "--job", "12").stdout.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    assert ("claims: 1024 slot(s) claimed at the start, 15 taken over since (by a spare, or a "
            "task back from a failure)") in lines
    assert "  ... 5 earlier takeover(s): ftslurm status --all lists every claim" in lines
    taken = [line for line in lines if line.startswith("claim: ")]
    assert len(taken) == 10 and "by task 1038" in taken[-1] and "by task 1029" in taken[0]
    assert "  ... 2 earlier: ftslurm status --all lists them" in lines
    assert sum(line.startswith("  bad-") for line in lines) == 10
    every = invoke("status", "--job", "12", "--all").stdout.splitlines()
    assert sum(line.startswith("claim: ") for line in every) == 1024 + 15
    assert sum(line.startswith("  bad-") for line in every) == 12


# ---------------------------------------------------------------- reading the page


@contextlib.contextmanager
def lighthouse_server(delay_s: float, body: bytes) -> Iterator[tuple[str, list[str]]]:
    """A loaded Lighthouse in this process: each GET answers `body` after `delay_s` (it
    renders the page behind its quorum lock); yields its URL and the paths asked."""
    asked: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.append(self.path)
            time.sleep(delay_s)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_show_is_up_on_a_slow_1024_page_read_once(tmp_path: Path):
    """The page comes after 2.5 s (2.4-3.1 s measured at 1,024 replicas): up, with its
    counts first, from one read."""
    with lighthouse_server(2.5, PAGE.encode()) as (url, asked):
        r = invoke("metrics", "show", "--lighthouse-url", url, str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "ftslurm_lighthouse_up 1.0" in r.stdout and asked == ["/status"]
    assert 'ftslurm_replicas{state="training"} 1012.0' in r.stdout
    assert r.stdout.index("ftslurm_replicas{") < r.stdout.index("ftslurm_replica_state{")
    assert 'ftslurm_replica_state{replica="77",state="absent"} 1.0' in r.stdout


def test_lighthouse_status_reads_a_slow_1024_page(monkeypatch, tmp_path):
    """`HTTP: not answering (timed out)` before, for a Lighthouse that answered in 2.5 s."""
    with lighthouse_server(2.5, PAGE.encode()) as (url, asked):
        managed(monkeypatch, tmp_path, f"{url}/status")
        r = invoke("lighthouse", "status")
    assert r.exit_code == 0 and "not answering" not in r.output, r.output
    assert "Quorum id:  2" in r.output and "Page:       498 kB in 2." in r.output
    assert asked == ["/status"]


def test_a_dead_lighthouse_is_reported_at_once_and_a_silent_one_by_its_deadline():
    with socket.socket() as s:  # a port nothing listens on: refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/status"
    t0 = time.monotonic()
    read = read_page(dead, status_page.page_deadline(1.0))
    assert read.page is None and "refused" in (read.error or "")
    assert time.monotonic() - t0 < 1.0
    with socket.socket() as silent:  # connects (the kernel's queue), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            http_get(f"http://127.0.0.1:{silent.getsockname()[1]}/status", Deadline(1.0, 0.3))
        assert time.monotonic() - t0 < 1.0


def test_the_start_of_a_cut_page_says_it_is_up_and_names_no_one_absent():
    """Only the start came (past the deadline, or over the size cap): the Lighthouse
    answered; what the start lists is true; a replica whose heartbeat is in the rest is not
    called absent (nor lost); a stream of junk is no page."""
    head = PAGE[: len(PAGE) - 30_000]  # the members, most heartbeats

    def cut(url: str, deadline: Deadline) -> tuple[int, str]:
        raise CutAnswer(110, "no whole answer in 10.0 s", 200, head.encode())

    read = read_page("http://login-0:29510/status", status_page.page_deadline(2.0), get=cut)
    page = read.page
    assert page is not None and read.cut and not status_page.whole(page) and not page.readable
    assert page.quorum_id == 2 and len(page.members) == 1014 and len(page.heartbeats) < 1000
    snap = build_snapshot(page, None, group_size=1024)
    states = {r.replica: r.state for r in snap.replicas}
    beating = {h.replica_id.split("_")[2].split(":")[0] for h in page.heartbeats}
    assert snap.lighthouse_up and "training" in {states[s] for s in beating}
    assert {states[s] for s in set(states) - beating} == {None}
    assert st.problems(st.Row(3, "RUNNING", "", "w", 0, 0, 5, 1.0, 2.0, 16, ""),
                       st._judged(page)) == []  # fmt: skip

    def junk(url: str, deadline: Deadline) -> tuple[int, str]:
        raise CutAnswer(27, "an answer over 16 MiB", 200, b"x" * 100)

    stream = read_page("http://x:1/status", status_page.page_deadline(2.0), get=junk)
    assert stream.page is None and stream.error == "an answer over 16 MiB"


def test_status_rows_are_judged_with_the_lighthouse():
    """A running task whose slot the Lighthouse does not count as training is listed, a
    spare and a task of a cut page's unnamed slot are not."""
    row = st.Row(replica=3, state="RUNNING", reason="", node="w3", restarts=0, attempt=0,
                 last_step=5, last_loss=1.0, idle_s=2.0, job_id=16, log="")  # fmt: skip
    slots = st.slot_states(parse_status_html(PAGE))
    assert st.problems(row, slots) == ["lighthouse: joining"]
    assert st.problems(st.Row(**{**vars(row), "replica": 9}), slots) == []
    assert st.problems(st.Row(**{**vars(row), "replica": 2000}), slots) == ["lighthouse: absent"]
    assert st.problems(st.Row(**{**vars(row), "slot": "spare"}), slots) == []
    quiet = st.Row(**{**vars(row), "replica": 9, "idle_s": 3600.0, "ranks": 2, "ranks_alive": 1})
    assert st.problems(quiet, slots) == ["ranks 1/2", "log quiet 60m"]
