"""End to end: a real torchft Lighthouse with a live 2-replica quorum, `ftslurm metrics serve`
on a free port, and a real Prometheus (Debian's `prometheus`) scraping it every second with
the shipped alert rules loaded; its query API must return the quorum size.

Needs the `prometheus` binary (CI: `.ci/run` installs it from Debian, via the README's test
command) and torchft's extension; skipped with the reason when either is missing. Every
process is started on free loopback ports and stopped by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import textwrap
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm import runner
from ftslurm.wait import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
RUN3 = Path(__file__).parent / "fixtures" / "report" / "slurm-3-replicas-tft-3"
ALERTS = ROOT / "docs" / "prometheus" / "ftslurm-alerts.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "ftslurm-dashboard.json"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        PROMETHEUS is None or PROMTOOL is None,
        reason="prometheus missing: apt-get install -y prometheus (CI installs it)",
    ),
    pytest.mark.skipif(lh.torchft_extension() is None, reason="needs torchft's extension module"),
]

# Two replicas (torchft's own LighthouseClient) form one quorum, at steps 0 and 10 (so
# replica 0 is marked recovering), then keep heartbeating until killed.
CLIENTS = textwrap.dedent(
    """
    import importlib.util, sys, threading, time
    from datetime import timedelta
    spec = importlib.util.spec_from_file_location("torchft._torchft", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    c = m.LighthouseClient(sys.argv[2], timedelta(seconds=5))
    def q(i):
        c.quorum(replica_id=f"train_{i}:uuid{i}", timeout=timedelta(seconds=30),
                 address="http://w:1", store_address="w:2", step=10 * i,
                 world_size=1, shrink_only=False)
    ts = [threading.Thread(target=q, args=(i,)) for i in range(2)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print("QUORUM OK", flush=True)
    for _ in range(1200):
        c.heartbeat("train_0:uuid0"); c.heartbeat("train_1:uuid1"); time.sleep(0.1)
    """
)


def _stop(proc) -> int | None:
    """SIGTERM, then SIGKILL after 10 s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(10)
        except Exception:
            proc.kill()
            return proc.wait(5)
    return proc.returncode


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict]:
    """Lighthouse + heartbeating clients + `ftslurm metrics serve`; stopped by pid."""
    procs: list = []
    state = tmp_path / "lighthouse"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FTSLURM_OUTPUTS": str(tmp_path / "out"),
           "FTSLURM_EVENTS": str(tmp_path / "events.jsonl"),
           "FTSLURM_LIGHTHOUSE_DIR": str(state)}  # fmt: skip
    try:
        info = lh.start(bind="127.0.0.1:0", min_replicas=2, state_dir=state)
        clients_log = tmp_path / "clients.log"
        procs.append(runner.spawn(
            [sys.executable, "-c", CLIENTS, str(lh.torchft_extension()),
             f"http://127.0.0.1:{info.port}"], log_path=clients_log, env=env))  # fmt: skip
        wait_for(lambda: "QUORUM OK" in clients_log.read_text(), timeout=60,
                 what="two clients forming a quorum")  # fmt: skip
        port = free_port()
        serve_log = tmp_path / "serve.log"
        serve = runner.spawn(
            [sys.executable, "-m", "ftslurm", "metrics", "serve", str(RUN3),
             "--lighthouse-url", f"http://127.0.0.1:{info.port}", "--host", "127.0.0.1",
             "--port", str(port), "--status-ttl", "0.5"],
            log_path=serve_log, env=env,
        )  # fmt: skip
        procs.append(serve)
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: lh.answers(url), timeout=30, what="ftslurm metrics serve answering")
        yield {"url": url, "port": port, "serve": serve, "serve_log": serve_log,
               "tmp": tmp_path}  # fmt: skip
    finally:
        for p in reversed(procs):
            _stop(p)
        lh.stop(state, grace=2)


def _query(prom: str, expr: str) -> list[dict]:
    code, body = lh.http_get(f"{prom}/api/v1/query?query={urllib.parse.quote(expr)}", 5)
    assert code == 200, body
    data = json.loads(body)
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_prometheus_scrapes_the_quorum_size(stack: dict):
    tmp: Path = stack["tmp"]
    # the scraped text passes promtool's format and naming lint
    code, text = lh.http_get(stack["url"], 5)
    assert code == 200 and "ftslurm_quorum_size 2.0" in text
    out = runner.run([PROMTOOL, "check", "metrics"], input=text, timeout=30, check=False)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr

    prom_port = free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(textwrap.dedent(f"""\
        global: {{scrape_interval: 1s, evaluation_interval: 1s}}
        rule_files: ["{ALERTS}"]
        scrape_configs:
          - job_name: ftslurm
            static_configs: [{{targets: ["127.0.0.1:{stack['port']}"]}}]
        """))  # fmt: skip
    prom_log = tmp / "prometheus.log"
    prom = runner.spawn(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        log_path=prom_log,
    )  # fmt: skip
    base = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for(lambda: lh.answers(f"{base}/-/ready"), timeout=60,
                 what=f"Prometheus ready ({prom_log})")  # fmt: skip
        found: list[dict] = []

        def scraped() -> bool:
            found[:] = _query(base, "ftslurm_quorum_size")
            return bool(found)

        wait_for(scraped, timeout=60, what="Prometheus to return ftslurm_quorum_size")
        assert [(r["metric"], r["value"][1]) for r in found] == [
            ({"__name__": "ftslurm_quorum_size", "job": "ftslurm",
              "instance": f"127.0.0.1:{stack['port']}"}, "2")]  # fmt: skip
        states = {r["metric"]["replica"]: r["metric"]["state"]
                  for r in _query(base, "ftslurm_replica_state == 1")}  # fmt: skip
        assert states == {"0": "healing", "1": "training", "2": "absent"}
        recov = {r["metric"]["replica"]: r["value"][1]
                 for r in _query(base, "ftslurm_replica_recoveries_total")}  # fmt: skip
        assert recov == {"0": "0", "1": "1", "2": "1"}
        assert _query(base, "ftslurm_group_size")[0]["value"][1] == "3"
        # the shipped rules load in a real Prometheus, and the quorum (2 of 3) is short
        code, body = lh.http_get(f"{base}/api/v1/rules", 5)
        rules = [r["name"] for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
        assert "FtslurmQuorumBelowGroupSize" in rules and len(rules) == 6
        wait_for(lambda: _query(base, 'ALERTS{alertname="FtslurmQuorumBelowGroupSize"}'),
                 timeout=30, what="the quorum alert pending")  # fmt: skip
        # every query of the shipped Grafana dashboard is valid PromQL for this Prometheus
        dash = json.loads(DASHBOARD.read_text())
        for panel in dash["panels"]:
            for t in panel["targets"]:
                expr = t["expr"].replace("$instance", ".*").replace("$__rate_interval", "1m")
                result = _query(base, expr)  # asserts status success
                if panel["title"] == "Replica lanes":
                    lanes = {r["metric"]["replica"]: r["value"][1] for r in result}
                    assert lanes == {"0": "2", "1": "3", "2": "0"}  # healing, training, absent
    finally:
        assert _stop(prom) == 0, prom_log.read_text()[-2000:]
    # SIGTERM ends the exporter cleanly
    assert _stop(stack["serve"]) == 0
    log = stack["serve_log"].read_text()
    assert log.startswith(f"{stack['url']}\n") and log.rstrip().endswith("stopped"), log
