"""The launcher's copy of the /status page (`launcher.snapshot_pages`): with 1,024 replicas a
read of the page waits seconds behind torchft's quorum lock, and `lighthouse status`,
`status` and `metrics show` read the copy, with its age, instead of waiting themselves. Only
a copy this user wrote, fresh, and of the Lighthouse that runs now is read."""

from __future__ import annotations

import gzip
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ftslurm.lighthouse import launcher
from ftslurm.lighthouse.lifecycle import SNAPSHOT_MAX_AGE_S, read_snapshot
from ftslurm.wait import free_port, wait_for
from tests.clirun import executable, lighthouse_cli
from tests.lighthouse_state import state_dir as state_dir  # the fixture

FIXTURES = Path(__file__).parent / "fixtures" / "lighthouse"
PAGE_1024 = FIXTURES / "status-1024.html.gz"  # recorded from a real Lighthouse of 1,024


def page_1024() -> bytes:
    return gzip.decompress(PAGE_1024.read_bytes())


def write_copy(state_dir: Path, body: bytes, age_s: float) -> Path:
    path = state_dir / launcher.SNAPSHOT
    path.write_bytes(body)
    path.chmod(0o600)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


@pytest.mark.unit
def test_a_fresh_copy_is_read_with_its_age(tmp_path: Path):
    write_copy(tmp_path, page_1024(), age_s=3.0)
    got = read_snapshot(tmp_path, started_at=time.time() - 60)
    assert got is not None
    read, age = got
    assert read.page is not None and read.error is None
    assert len(read.page.members) == 1014 and len(read.page.heartbeats) == 1025
    assert 2.5 < age < 10.0


@pytest.mark.unit
@pytest.mark.parametrize("why", ["too-old", "older-than-the-lighthouse", "others-can-write",
                                 "a-link", "missing", "no-lighthouse-page"])  # fmt: skip
def test_a_copy_that_cannot_stand_for_the_page_is_not_read(tmp_path: Path, why: str):
    started = time.time() - 60
    body = b"<html>not a status page</html>" if why == "no-lighthouse-page" else page_1024()
    path = write_copy(tmp_path, body, age_s=SNAPSHOT_MAX_AGE_S + 5 if why == "too-old" else 1.0)
    if why == "older-than-the-lighthouse":  # restarted after the copy was made
        started = time.time() + 5
    elif why == "others-can-write":
        path.chmod(0o666)
    elif why == "a-link":
        real = tmp_path / "elsewhere.html"
        path.rename(real)
        path.symlink_to(real)
    elif why == "missing":
        path.unlink()
    assert read_snapshot(tmp_path, started_at=started) is None


@pytest.mark.unit
def test_the_launcher_reads_the_url_only_from_its_own_state(tmp_path: Path, monkeypatch):
    state = {"pid": os.getpid(), "extra": {"probe_url": "http://127.0.0.1:1/status"}}
    (tmp_path / launcher.STATE_FILE).write_text(json.dumps(state))
    assert launcher.probe_url(tmp_path) == "http://127.0.0.1:1/status"
    state["pid"] = os.getpid() + 1  # another process's state (a start under way, a stale one)
    (tmp_path / launcher.STATE_FILE).write_text(json.dumps(state))
    assert launcher.probe_url(tmp_path) is None
    (tmp_path / launcher.STATE_FILE).write_text("{not json")
    assert launcher.probe_url(tmp_path) is None


@pytest.mark.unit
def test_the_copy_is_replaced_whole_with_the_time_its_read_began(tmp_path: Path):
    launcher.write_snapshot(tmp_path, b"first", began=1000.0)
    launcher.write_snapshot(tmp_path, b"second", began=2000.0)
    path = tmp_path / launcher.SNAPSHOT
    assert path.read_bytes() == b"second" and path.stat().st_mtime == 2000.0
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == [launcher.SNAPSHOT]  # no .new left


# a --binary standing in for a Lighthouse of 1,024 replicas under load: it serves the recorded
# page at once until the gate file exists, then holds every /status read (torchft's quorum
# lock held by rounds that never end)
SLOW_LIGHTHOUSE = """\
    #!{python}
    import http.server, sys, time
    from pathlib import Path
    bind = sys.argv[sys.argv.index("--bind") + 1]
    host, port = bind.rsplit(":", 1)
    PAGE, GATE = Path({page!r}).read_bytes(), Path({gate!r})
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if GATE.exists():
                time.sleep(120)
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)
        def log_message(self, *a):
            pass
    print(f"Lighthouse listening on: http://{{host}}:{{port}}", file=sys.stderr, flush=True)
    http.server.ThreadingHTTPServer((host, int(port)), H).serve_forever()
"""


@pytest.mark.timeout(120)
def test_status_answers_from_the_copy_while_the_lighthouse_holds_its_page(
    tmp_path: Path, state_dir: Path
):
    """The page of a Lighthouse whose /status no longer answers (the gate) still shows, from
    the launcher's copy: `lighthouse status` and `metrics show` say it is up, with the 1,024
    replicas of the recorded page and the copy's age. Read by the commands themselves, the
    page would not come (they wait their whole deadline, then say `not answering`)."""
    page = tmp_path / "status.html"
    page.write_bytes(page_1024())
    gate = tmp_path / "gate"
    fake = executable(tmp_path / "bin" / "busy_lighthouse", textwrap.dedent(
        SLOW_LIGHTHOUSE.format(python=sys.executable, page=str(page), gate=str(gate))))
    r = lighthouse_cli(state_dir, "start", "--binary", str(fake),
                       "--bind", f"127.0.0.1:{free_port()}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    copy = state_dir / launcher.SNAPSHOT
    wait_for(copy.exists, 20, what="the launcher's first copy of the page")
    gate.touch()
    t0 = time.monotonic()
    r = lighthouse_cli(state_dir, "status", "--json")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["http_ok"] is True and st["page_from"] == "snapshot", st["http_error"]
    assert st["summary"]["members"] == 1014 and 0 <= st["page_age_s"] <= SNAPSHOT_MAX_AGE_S
    assert took < 8, took  # the live read waits 10 s for the page, then gives up
    text = lighthouse_cli(state_dir, "status")
    assert "read " in text.stdout and "s ago by the launcher" in text.stdout, text.stdout
    m = lighthouse_cli(state_dir, "show", command="metrics")
    assert m.returncode == 0, m.stderr
    assert "ftslurm_lighthouse_up 1.0" in m.stdout, m.stdout[:2000]
    assert "ftslurm_lighthouse_page_age_seconds" in m.stdout
    r = lighthouse_cli(state_dir, "stop")
    assert r.returncode == 0, r.stderr
    assert not copy.exists()  # a copy of a stopped Lighthouse's page is no status


@pytest.mark.timeout(60)
def test_live_reads_the_page_from_the_lighthouse(state_dir: Path):
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0, r.stderr
    wait_for((state_dir / launcher.SNAPSHOT).exists, 20, what="the launcher's copy")
    copied = json.loads(lighthouse_cli(state_dir, "status", "--json").stdout)
    live = json.loads(lighthouse_cli(state_dir, "status", "--json", "--live").stdout)
    assert copied["page_from"] == "snapshot" and copied["http_ok"]
    assert live["page_from"] == "live" and live["page_age_s"] == 0.0 and live["http_ok"]


@pytest.mark.unit
@pytest.mark.parametrize(("raw", "pause"), [("", 1.0), ("2.5", 2.5), ("0", None),
                                            ("nan", 1.0), ("-1", 1.0), ("x", 1.0)])
def test_the_pause_between_reads(raw: str, pause: float | None):
    assert launcher.snapshot_pause(raw) == pause


@pytest.mark.timeout(60)
def test_no_copy_when_switched_off(state_dir: Path):
    """FTSLURM_LIGHTHOUSE_SNAPSHOT_S=0: the launcher reads nothing, the commands read live."""
    env = {"FTSLURM_LIGHTHOUSE_SNAPSHOT_S": "0"}
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0", env=env)
    assert r.returncode == 0, r.stderr
    st = json.loads(lighthouse_cli(state_dir, "status", "--json").stdout)
    assert st["page_from"] == "live" and st["http_ok"]
    time.sleep(2.5)  # two of the default pauses: a launcher that reads would have made a copy
    assert not (state_dir / launcher.SNAPSHOT).exists()
