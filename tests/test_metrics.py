"""`ftslurm metrics`: the samples from recorded Lighthouse pages and recorded run logs, the
exposition prometheus_client writes (checked by `promtool check metrics`), the scrape cache,
the CLI's errors, and the shipped alert rules and dashboard.

The end-to-end test with a real Lighthouse and a real Prometheus is test_metrics_prometheus.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ftslurm import metrics, runner
from ftslurm.lighthouse.status_page import Heartbeat, Member, QuorumPage, parse_status_html
from ftslurm.metrics.collector import FtslurmCollector, MetricsSources, run_name
from ftslurm.metrics.snapshot import ABSENT, HEALING, JOINING, TRAINING, build_snapshot
from ftslurm.report import build_report

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"
LH = FIX / "lighthouse"
RUN3 = FIX / "report" / "slurm-3-replicas-tft-3"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool missing: apt-get install -y prometheus (CI installs it)"
)


def page(name: str) -> QuorumPage:
    return parse_status_html((LH / name).read_text())


@pytest.fixture(scope="module")
def run3() -> dict:
    return build_report(RUN3).to_json()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}, via prometheus_client's parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def by_replica(snap: metrics.Snapshot) -> dict[str, metrics.ReplicaSample]:
    return {r.replica: r for r in snap.replicas}


# ---------------------------------------------------------------- the samples (pure)


def test_live_quorum_with_a_recovering_member():
    snap = build_snapshot(page("status_two_members_recovering.html"), None)
    assert (snap.lighthouse_up, snap.logs_up) == (True, False)
    assert (snap.quorum_id, snap.quorum_size, snap.group_size) == (1, 2, 2)
    r = by_replica(snap)
    assert list(r) == ["0", "1"]
    assert (r["0"].state, r["0"].step) == (TRAINING, 42)
    assert (r["1"].state, r["1"].step) == (HEALING, 0)
    assert r["1"].heartbeat_age_s == pytest.approx(0.001508361)
    # no logs: no counters (absent series, never zeros that would look like a clean run)
    assert r["0"].failures is None and r["0"].steps_committed is None


def test_member_whose_heartbeat_went_old_is_absent():
    snap = build_snapshot(page("status_one_heartbeat_old.html"), None)
    r = by_replica(snap)
    assert (r["0"].state, r["1"].state) == (TRAINING, ABSENT)
    assert r["1"].heartbeat_age_s == pytest.approx(1.504813242)
    assert snap.quorum_size == 2  # the quorum stays as issued until the next one


def test_idle_lighthouse_and_group_size_list_absent_slots():
    snap = build_snapshot(page("status_idle.html"), None, group_size=3)
    assert (snap.quorum_id, snap.quorum_size, snap.group_size) == (0, 0, 3)
    assert [(r.replica, r.state, r.heartbeat_age_s) for r in snap.replicas] == [
        ("0", ABSENT, None), ("1", ABSENT, None), ("2", ABSENT, None)]  # fmt: skip


def test_restarted_replica_not_yet_in_the_quorum_is_joining():
    """Slot 1 came back under a new uuid: its old id is listed old, the new one heartbeats
    but the quorum still names the old one."""
    q = QuorumPage(
        quorum_id=7, num_participants=2,
        members=[Member("ft_0:a", step=9), Member("ft_1:old", step=8)],
        heartbeats=[Heartbeat("ft_0:a", 0.2), Heartbeat("ft_1:old", 6.0, old=True),
                    Heartbeat("ft_1:new", 0.4), Heartbeat("ft_12:x", 0.1)],
    )  # fmt: skip
    r = by_replica(build_snapshot(q, None, group_size=13))
    assert (r["1"].state, r["1"].heartbeat_age_s, r["1"].step) == (JOINING, 0.4, 8)
    assert r["12"].state == JOINING and r["5"].state == ABSENT
    assert list(r)[:3] == ["0", "1", "2"] and list(r)[-1] == "12"  # numeric order


def test_counters_from_a_recorded_3_replica_run(run3: dict):
    snap = build_snapshot(None, run3)
    assert (snap.lighthouse_up, snap.logs_up, snap.group_size) == (False, True, 3)
    r = by_replica(snap)
    assert [(x.failures, x.recoveries, x.commit_failures, x.steps_committed) for x in
            r.values()] == [(0, 0, 0, 11), (1, 1, 0, 9), (1, 1, 0, 9)]  # fmt: skip
    # the Lighthouse is down: no state, no heartbeat age
    assert {x.state for x in r.values()} == {None}
    assert {x.heartbeat_age_s for x in r.values()} == {None}


def test_commit_failures_by_replica():
    rep = build_report(FIX / "report" / "guide").to_json()
    r = by_replica(build_snapshot(None, rep))
    assert (r["0"].commit_failures, r["1"].commit_failures) == (1, 0)
    assert (r["1"].failures, r["1"].recoveries) == (1, 1)


def test_time_to_full_strength_read_when_the_report_has_it(run3: dict):
    # the report's own figures for the recorded run (its failures of replicas 1 and 2)
    got = by_replica(build_snapshot(None, run3))
    assert [x.last_time_to_full_strength_s for x in got.values()] == [None, 31.965, 36.499]
    rep = json.loads(json.dumps(run3))
    rep["failures"][0]["time_to_full_strength_s"] = 31.5  # replica 1
    rep["failures"][1]["time_to_full_strength_s"] = None  # replica 2: not yet back
    r = by_replica(build_snapshot(None, rep))
    assert [x.last_time_to_full_strength_s for x in r.values()] == [None, 31.5, None]
    rep["failures"].append({**rep["failures"][0], "time_to_full_strength_s": 12.0})
    assert by_replica(build_snapshot(None, rep))["1"].last_time_to_full_strength_s == 12.0


# ---------------------------------------------------------------- the exposition


def _families_text(snap: metrics.Snapshot) -> str:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    class Fixed:
        def collect(self):
            return metrics.families(snap, report_build_s=0.25)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())  # type: ignore[arg-type]
    return generate_latest(reg).decode()


def test_exposition_names_labels_and_values(run3: dict):
    text = _families_text(build_snapshot(page("status_two_members_recovering.html"), run3,
                                         run=run_name(run3)))
    s = samples(text)
    assert s[("ftslurm_quorum_size", ())] == 2 and s[("ftslurm_group_size", ())] == 3
    assert s[("ftslurm_quorum_id", ())] == 1
    assert s[("ftslurm_lighthouse_up", ())] == 1 and s[("ftslurm_logs_up", ())] == 1
    assert s[("ftslurm_replica_step", (("replica", "0"),))] == 42
    assert s[("ftslurm_replica_failures_total", (("replica", "2"),))] == 1
    assert s[("ftslurm_replica_steps_committed_total", (("replica", "0"),))] == 11
    states = {k[1]: v for k, v in s.items() if k[0] == "ftslurm_replica_state"}
    assert states[(("replica", "1"), ("state", "healing"))] == 1
    assert states[(("replica", "1"), ("state", "training"))] == 0
    assert states[(("replica", "2"), ("state", "absent"))] == 1
    assert sum(states.values()) == 3  # one state per replica
    assert s[("ftslurm_run_info", (("run", RUN3.name),))] == 1
    assert "# TYPE ftslurm_replica_recoveries_total counter" in text
    full = "ftslurm_replica_last_time_to_full_strength_seconds"
    assert s[full, (("replica", "1"),)] == 31.965 and s[full, (("replica", "2"),)] == 36.499
    assert (full, (("replica", "0"),)) not in s  # replica 0 never failed: no sample


@pytest.mark.process
@needs_promtool
def test_promtool_accepts_the_exposition(run3: dict):
    for snap in (build_snapshot(page("status_one_heartbeat_old.html"), run3),
                 build_snapshot(None, None)):  # fmt: skip
        out = runner.run([PROMTOOL, "check", "metrics"], input=_families_text(snap), timeout=30,
                         check=False)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.strip() == "" and out.stderr.strip() == ""  # no lint warning


# ---------------------------------------------------------------- the cache


class CountingSources(MetricsSources):
    reads = {"page": 0, "report": 0}

    def read_page(self):
        self.reads["page"] += 1
        return page("status_two_members_recovering.html")

    def read_report(self):
        self.reads["report"] += 1
        return None


@pytest.mark.usefixtures("no_user_state")  # a user's own run in outputs/ would key the report
def test_each_source_is_read_once_per_ttl():
    now = [100.0]
    src = CountingSources(status_ttl_s=2.0, report_ttl_s=10.0)
    src.reads = {"page": 0, "report": 0}
    col = FtslurmCollector(src, clock=lambda: now[0])
    for _ in range(5):
        assert {m.name for m in col.collect()} >= {"ftslurm_quorum_size"}
    assert src.reads == {"page": 1, "report": 1}
    now[0] += 2.5
    list(col.collect())
    assert src.reads == {"page": 2, "report": 1}
    now[0] += 10
    list(col.collect())
    assert src.reads == {"page": 3, "report": 2}


def test_sources_that_do_not_answer_are_down(tmp_path: Path):
    src = MetricsSources(lighthouse_url="http://127.0.0.1:9", run=[str(tmp_path)])
    s = samples(metrics.exposition(src))
    assert s == {("ftslurm_lighthouse_up", ()): 0, ("ftslurm_logs_up", ()): 0}


class BrokenReport(MetricsSources):
    def read_page(self):
        return page("status_idle.html")

    def read_report(self):
        raise ValueError("a log the parser chokes on")


def test_a_source_that_raises_is_down_and_logged(caplog: pytest.LogCaptureFixture):
    col = FtslurmCollector(BrokenReport())
    with caplog.at_level("WARNING"):
        s = samples(_families_text_of(col))
    assert s[("ftslurm_logs_up", ())] == 0 and s[("ftslurm_lighthouse_up", ())] == 1
    assert "read_report failed: ValueError: a log the parser chokes on" in caplog.text


def _families_text_of(col: FtslurmCollector) -> str:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(col)
    return generate_latest(reg).decode()


def test_status_url():
    assert MetricsSources(lighthouse_url="http://h:1/").status_url() == "http://h:1/status"
    assert MetricsSources(lighthouse_url="http://h:1/status").status_url() == "http://h:1/status"
    assert MetricsSources().status_url() is None


# ---------------------------------------------------------------- the CLI


def ftslurm(*args: str, env: dict | None = None) -> runner.Completed:
    import os
    import sys

    return runner.run([sys.executable, "-m", "ftslurm", *args], timeout=60, check=False,
                      env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})  # fmt: skip


@pytest.mark.process
def test_cli_show_prints_the_run_and_json(tmp_path: Path):
    env = {"FTSLURM_LIGHTHOUSE_DIR": str(tmp_path / "lh"), "FTSLURM_OUTPUTS": str(tmp_path)}
    out = ftslurm("metrics", "show", str(RUN3), env=env)
    assert out.returncode == 0, out.stderr
    s = samples(out.stdout)
    assert s[("ftslurm_replica_recoveries_total", (("replica", "1"),))] == 1
    assert s[("ftslurm_lighthouse_up", ())] == 0  # no managed Lighthouse in tmp_path
    out = ftslurm("metrics", "show", "--json", "--group-size", "4", str(RUN3), env=env)
    data = json.loads(out.stdout)
    assert data["group_size"] == 4 and [r["replica"] for r in data["replicas"]] == list("0123")


@pytest.mark.process
@pytest.mark.parametrize(
    "args,message",
    [(["show", "no/such/run"], "Error: RUN no/such/run: no such file or directory"),
     (["show", "--lighthouse-url", "login-0:29510"], "Error: --lighthouse-url 'login-0:29510': "
      "give http://HOST:PORT"),
     (["serve", "--port", "70000"], "Error: Invalid value for '--port'"),
     (["show", "--report-ttl", "nan"], "Error: Invalid value for '--report-ttl'")],
)  # fmt: skip
def test_cli_mistakes_are_one_line(args: list[str], message: str):
    out = ftslurm("metrics", *args)
    assert out.returncode == 2
    assert out.stderr.startswith(message) and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.process
def test_cli_serve_on_a_taken_port_is_one_line():
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        out = ftslurm("metrics", "serve", "--host", "127.0.0.1", "--port", str(port))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"Error: cannot listen on 127.0.0.1:{port} (Address already in use)\n"


@pytest.mark.process
def test_cli_help_has_examples():
    for args in (["metrics", "--help"], ["metrics", "serve", "--help"]):
        out = ftslurm(*args)
        assert out.returncode == 0 and "ftslurm metrics serve" in out.stdout
    assert "metrics" in ftslurm("--help").stdout


# ---------------------------------------------------------------- dashboard and rules

ALERTS = ROOT / "docs" / "prometheus" / "ftslurm-alerts.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "ftslurm-dashboard.json"


@pytest.mark.process
@needs_promtool
def test_alert_rules_pass_promtool_and_fire_as_documented():
    out = runner.run([PROMTOOL, "check", "rules", str(ALERTS)], timeout=30, check=False)
    assert out.returncode == 0 and "SUCCESS: 6 rules found" in out.stdout, out.stdout + out.stderr
    # promtool's rule unit tests: synthetic series in, the alerts that fire (and when) out
    tests = FIX / "metrics" / "alerts_test.yml"
    out = runner.run([PROMTOOL, "test", "rules", str(tests)], timeout=60, check=False,
                     cwd=str(tests.parent))  # fmt: skip
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_dashboard_panels_query_metrics_we_export():
    dash = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: p for p in dash["panels"]}
    assert {"Quorum size vs group size", "Replica states", "Steps/s", "Recoveries"} <= set(panels)
    exported = {
        "ftslurm_quorum_size", "ftslurm_group_size", "ftslurm_replica_state",
        "ftslurm_replica_steps_committed_total", "ftslurm_replica_recoveries_total",
        "ftslurm_replica_failures_total", "ftslurm_replica_heartbeat_age_seconds",
        "ftslurm_lighthouse_up", "ftslurm_quorum_id", "ftslurm_replica_step",
        "ftslurm_replica_commit_failures_total", "ftslurm_logs_up",
        "ftslurm_replica_last_time_to_full_strength_seconds",
        "ftslurm_node_taken_out_timestamp_seconds",
    }  # fmt: skip
    import re

    for p in dash["panels"]:
        for t in p.get("targets", []):
            names = set(re.findall(r"\bftslurm_[a-z_]+", t["expr"]))
            assert names and names <= exported, (p["title"], t["expr"])
    assert "${datasource}" in json.dumps(panels["Quorum size vs group size"]["datasource"])


def test_a_start_up_sync_is_not_counted_as_a_recovery():
    """The report marks a heal with no failure before it (a replica that joined its first
    quorum late) `after_failure: false`; the recoveries counter counts only the others."""
    report = {"recoveries": [
        {"target_replica": 1, "after_failure": False},
        {"target_replica": 1, "after_failure": True},
        {"target_replica": 0},  # a report from before the field: a recovery
    ]}  # fmt: skip
    r = by_replica(build_snapshot(None, report, group_size=2))
    assert (r["1"].recoveries, r["0"].recoveries) == (1, 1)
