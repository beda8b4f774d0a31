"""The metrics exporter's bounds: what it fetches from a Lighthouse (a /status that never ends is
a Lighthouse down, not memory), a heartbeat's id from the network never breaks a scrape, the
group size has a cap, a scrape waits a bounded time for the logs and reads only files that
changed, `metrics serve` listens on the loopback by default and answers /metrics and /healthz
only, and a host that is no host name is one line.

Memory is checked as the peak RSS of the command in its own process (tests/peak_rss.py),
against a cap of 200 MB."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ftslurm import metrics, runner
from ftslurm.lighthouse.status_page import Heartbeat, QuorumPage, http_get, parse_status_html
from ftslurm.metrics.collector import FtslurmCollector, MetricsSources
from ftslurm.metrics.snapshot import UNKNOWN, build_snapshot, slot
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.peak_rss import RSS_CAP_KB, measured

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def one_error_line(done: runner.Completed | subprocess.CompletedProcess[str], starts: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith(starts) and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- the Lighthouse as a source


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Forever(BaseHTTPRequestHandler):
    """A "Lighthouse" whose /status never ends."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        block = b"x" * (1 << 16)
        try:
            while True:
                self.wfile.write(block)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


def test_a_lighthouse_that_streams_for_ever_is_down_not_memory(tmp_path: Path):
    """4 GB in 8 s before; now the answer is cut at 16 MiB or 2 s: the Lighthouse shows as
    down and the exporter stays small."""
    with http_server(Forever) as url:
        with pytest.raises(OSError):
            http_get(url + "/status", timeout=2.0)
        rc, rss, out, err = measured(tmp_path, "metrics", "show", "--lighthouse-url", url,
                                     env={"FTSLURM_OUTPUTS": str(tmp_path)})  # fmt: skip
    assert rc == 0, err
    assert "ftslurm_lighthouse_up 0.0" in out.read_text()
    assert rss < RSS_CAP_KB, rss


def heartbeat_page(*ids: str) -> str:
    beats = "".join(f'<li class="heartbeat">{i}: seen 0.5s ago</li>\n' for i in ids)
    return ("Current quorum_id: 3 <br>\n<h2>Heartbeats</h2>\n<ul>\n" + beats + "</ul>\n")


def test_a_5000_digit_replica_id_is_counted_as_unknown():
    """`LighthouseClient(url).heartbeat('9'*5000)` made the slot order raise ValueError
    (int() of 5,000 digits): `metrics show` crashed and /metrics answered 500."""
    page = parse_status_html(heartbeat_page("9" * 5000, "torchtitan_ft_1:ab12",
                                            "a\x1b]0;PWNED\x07b", "x y", "torchtitan_ft_0"))
    snap = build_snapshot(page, None, group_size=3)
    states = {r.replica: r.state for r in snap.replicas}
    assert states == {"0": "joining", "1": "joining", "2": "absent", UNKNOWN: "joining"}
    assert slot("torchtitan_ft_99999999999999:u") == UNKNOWN  # an array index past 10^9
    assert slot("spare-host-3") == "spare-host-3"  # a plain id without an index is itself
    text = "".join(str(m) for m in metrics.families(snap))
    assert "9999999999" not in text and "PWNED" not in text


def test_a_5000_digit_heartbeat_through_the_cli_and_the_endpoint(tmp_path: Path):
    page = heartbeat_page("9" * 5000, "torchtitan_ft_0:ab").encode()

    class Lighthouse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Lighthouse) as url:
        env = {"FTSLURM_OUTPUTS": str(tmp_path)}
        show = ftslurm("metrics", "show", "--lighthouse-url", url, env=env)
        assert show.returncode == 0 and "Traceback" not in show.stderr, show.stderr
        assert 'ftslurm_replica_state{replica="unknown",state="joining"} 1.0' in show.stdout
        src = MetricsSources(lighthouse_url=url, run=[str(tmp_path)])
        server = metrics.serve(metrics.registry(src), "127.0.0.1", 0)
        try:
            code, body = http_get(server.url, 10)
        finally:
            server.close()
    assert code == 200 and 'replica="0"' in body and 'replica="unknown"' in body


# ---------------------------------------------------------------- the exporter's limits


def test_group_size_past_the_cap_is_one_line():
    """--group-size 1000000 took 47 s and 2.5 GB (10^12: MemoryError)."""
    for size in ("1000000", "1000000000000"):
        done = ftslurm("metrics", "show", "--group-size", size, "--lighthouse-url",
                       "http://127.0.0.1:9")  # fmt: skip
        one_error_line(done, "Error: Invalid value for '--group-size'")
        assert "1<=x<=10000" in done.stderr


class SlowReport(MetricsSources):
    """Logs that take as long to read as the test says (`release`)."""

    def __init__(self) -> None:
        super().__init__(report_ttl_s=0.0, report_wait_s=0.5)
        self.release = threading.Event()
        self.reads = 0

    def read_page(self) -> QuorumPage | None:
        return QuorumPage(quorum_id=1, heartbeats=[Heartbeat("torchtitan_ft_0:a", 0.1)])

    def report_key(self):  # noqa: ANN201 - the files never change here
        return ("same",)

    def read_report(self):  # noqa: ANN201
        self.reads += 1
        self.release.wait(60)
        return {"summary": {"group_size": 2}, "files": ["/x/tft-4/tft-4_0.out"]}


def test_a_scrape_does_not_wait_for_slow_logs():
    """A run folder of 10,000 logs made every scrape read them all (35-41 s); now a scrape
    waits report_wait_s at most, then answers with the last complete report; files that did
    not change are not read again (bench/metrics_scrape.py --logs 10000 gives the figures)."""
    src = SlowReport()
    col = FtslurmCollector(src)
    t = time.monotonic()
    snap = col.snapshot()
    assert time.monotonic() - t < 10  # 0.5 s expected: the read is still going on
    assert snap.lighthouse_up and not snap.logs_up
    assert col.snapshot().logs_up is False and src.reads == 1  # one read under way, shared
    src.release.set()
    wait_for(lambda: col.snapshot().logs_up, timeout=30, what="the report")
    assert col.snapshot().run == "tft-4"
    assert src.reads == 1  # the same files (report_key): not read again, whatever the TTL


def test_a_changed_file_is_read_again(tmp_path: Path):
    run = tmp_path / "tft-5"
    run.mkdir()
    log = run / "tft-5_0.out"
    log.write_text("[2026-11-23 10:00:00]  launching replica 0 (attempt 0) on worker-0\n")
    src = MetricsSources(lighthouse_url="http://127.0.0.1:9", run=[str(run)], report_ttl_s=0)
    first = src.report_key()
    assert first == src.report_key() and first is not None and str(log) in first[0]
    with open(log, "a") as fh:
        fh.write("[2026-11-23 10:00:09]  launching replica 0 (attempt 1) on worker-1\n")
    assert src.report_key() != first


# ---------------------------------------------------------------- where it listens, what it answers


def listening_address(port: int) -> str:
    """The local address of the socket listening on `port`, from /proc/net/tcp{,6}."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                return addr
    raise AssertionError(f"nothing listens on {port}")


def get(url: str) -> tuple[int, bytes]:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_serve_listens_on_the_loopback_and_answers_two_paths(tmp_path: Path):
    """It listened on every interface and answered any path."""
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FTSLURM_OUTPUTS": str(tmp_path)}
    child = runner.spawn([sys.executable, "-m", "ftslurm", "metrics", "serve", "--port", "0",
                          "--lighthouse-url", "http://127.0.0.1:9"], log_path=log, env=env)
    try:
        wait_for(lambda: "/metrics" in log.read_text(), timeout=30, what="the exporter's URL")
        url = log.read_text().splitlines()[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert listening_address(port) == "0100007F"  # 127.0.0.1, not 0.0.0.0 / ::
        base = url.removesuffix("/metrics")
        code, body = get(url)
        assert code == 200 and b"ftslurm_lighthouse_up 0.0" in body
        assert get(base + "/healthz") == (200, b"ok\n")
        for path in ("/", "/metricsx", "/metrics/", "/favicon.ico", "/status"):
            assert get(base + path)[0] == 404, path
        assert "no authentication" not in log.read_text()  # only said when exposed
    finally:
        child.send_signal(signal.SIGTERM)
        if runner.wait_for_exit(child, 10) is None:
            child.kill()
            runner.wait_for_exit(child, 10)


def test_serve_on_every_interface_says_it_is_exposed(tmp_path: Path):
    server = metrics.serve(metrics.registry(MetricsSources(lighthouse_url="http://127.0.0.1:9")),
                           "0.0.0.0", 0)  # fmt: skip
    try:
        assert server.exposed and server.url.startswith("http://127.0.0.1:")
        assert listening_address(server.port) == "00000000"
    finally:
        server.close()
    local = metrics.serve(metrics.registry(MetricsSources()), "127.0.0.1", 0)
    local.close()
    assert not local.exposed


@pytest.mark.parametrize("host", ["\udcff", "no-such-host.invalid", "not a host!"])
def test_a_host_that_is_no_host_name_is_one_line(host: str):
    """`--host $'\\xff'` raised UnicodeError (idna) with a traceback."""
    done = ftslurm("metrics", "serve", "--host", host, "--port", "0", timeout=60,
                   errors="replace")  # the surrogate comes back in the error line
    one_error_line(done, "Error: cannot listen on ")
    assert done.stdout == ""
