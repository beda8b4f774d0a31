"""The nodes a run's launchers took out, where a person or Prometheus sees them: the
`ftslurm_node_taken_out` metrics (`metrics show` / `serve`), the alert rule that fires on them,
and the report's PNG timeline.

The run is a recorded one (tests/fixtures/report/slurm-tft-8, real replica logs of the local
Slurm) and its `failures/nodes.jsonl` is written by the launcher's own code
(`preflight.record_action`, `preflight.take_out`), never by hand.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ftslurm import runner
from ftslurm.metrics.snapshot import MAX_NODES, UNKNOWN, nodes_taken_out
from ftslurm.replica.launcher import preflight
from ftslurm.report import build_report
from ftslurm.wait import free_port

ROOT = Path(__file__).resolve().parent.parent
TFT8 = Path(__file__).parent / "fixtures" / "report" / "slurm-tft-8"
ALERTS = ROOT / "docs" / "prometheus" / "ftslurm-alerts.yml"
PROMTOOL = shutil.which("promtool")
_PURPLE = (0x94, 0x67, 0xBD)  # render.py's colour of the node marks


def _run_with_taken_out_nodes(tmp_path: Path) -> tuple[Path, float]:
    """tft-8 with worker-1 drained 1.5 s after replica 1's failure (report seconds), worker-2
    kept by take_out itself (FTSLURM_BAD_NODES=off: no Slurm asked), and a node whose name
    is an escape sequence. Returns the run and the drain's Unix time."""
    run = tmp_path / "tft-8"
    shutil.copytree(TFT8, run)
    fail = build_report(run).failures[0].time
    assert fail is not None
    # the logs' clock is placed on Unix time by their zone offset (report/sources.py's
    # clock_offset): 0 for these logs, which have no Lighthouse quorum line to read it from
    drain_epoch = fail + 1.5
    preflight.record_action(run, preflight.NodeAction(
        drain_epoch, "worker-1", "drain", "ftslurm: 2 failures within 10 min", "8", 1))  # fmt: skip
    said: list[str] = []
    kept = preflight.take_out({"FTSLURM_BAD_NODES": "off", "SLURM_ARRAY_JOB_ID": "8",
                               "SLURM_ARRAY_TASK_ID": "1"}, run, "worker-2",
                              "pre-flight check failed", said.append)  # fmt: skip
    assert kept.action == "kept" and said
    preflight.record_action(run, preflight.NodeAction(
        drain_epoch + 2, "\x1b[31mnode 7", "drain", "x", "8", 1))  # fmt: skip
    return run, drain_epoch


def _show(*args: str) -> runner.Completed:
    return runner.run([sys.executable, "-m", "ftslurm", "metrics", "show", *args],
                      timeout=120, check=False, cwd=ROOT)  # fmt: skip


def test_metrics_show_lists_the_nodes_taken_out(tmp_path: Path) -> None:
    run, drain_epoch = _run_with_taken_out_nodes(tmp_path)
    # no Lighthouse answers here: the logs' samples stand alone
    url = f"http://127.0.0.1:{free_port()}"
    out = _show(str(run), "--lighthouse-url", url)
    assert out.returncode == 0, out.stderr
    fams = {f.name: f for f in text_string_to_metric_families(out.stdout)}
    taken = fams["ftslurm_node_taken_out"]
    assert taken.type == "gauge" and "drain" in taken.documentation
    got = {(s.labels["node"], s.labels["how"]): s.value for s in taken.samples}
    assert got == {("worker-1", "drain"): 1, ("worker-2", "kept"): 1, (UNKNOWN, "drain"): 1}
    when = {(s.labels["node"], s.labels["how"]): s.value
            for s in fams["ftslurm_node_taken_out_timestamp_seconds"].samples}  # fmt: skip
    # the report's JSON keeps whole seconds
    assert abs(when[("worker-1", "drain")] - drain_epoch) < 1.0
    assert "\x1b" not in out.stdout
    if PROMTOOL:  # the names, HELP and types pass Prometheus's own lint
        lint = runner.run([PROMTOOL, "check", "metrics"], input=out.stdout, timeout=30,
                          check=False)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr
    # --json: the same nodes in the snapshot
    js = _show(str(run), "--lighthouse-url", url, "--json")
    nodes = json.loads(js.stdout)["nodes_taken_out"]
    assert [(n["node"], n["how"]) for n in nodes] == [
        ("unknown", "drain"), ("worker-1", "drain"), ("worker-2", "kept")]


def test_metrics_of_a_run_without_taken_out_nodes_have_no_node_series() -> None:
    out = _show(str(TFT8), "--lighthouse-url", f"http://127.0.0.1:{free_port()}")
    assert out.returncode == 0 and "ftslurm_logs_up 1.0" in out.stdout, out.stderr
    assert "ftslurm_node_taken_out" not in out.stdout


def test_node_labels_are_bounded_and_plain() -> None:
    bad: list[Any] = [
        {"node": "worker-1", "action": "drain", "time": "2026-11-23T09:54:55+00:00"},
        {"node": "worker-1", "action": "drain", "time": "2026-11-23T10:00:00+00:00"},
        {"node": "worker-1", "action": "drain", "time": "junk"},
        {"node": "worker-1", "action": "evict\nme", "time": "2026-11-23T09:00:00+00:00"},
        {"node": "n" * 65, "action": "avoid", "time": "2026-11-23T09:00:00"},  # no zone
        {"node": None, "action": "drain"}, "not a dict",
    ]
    got = {(n.node, n.how): n.time for n in nodes_taken_out(bad)}
    assert got == {("worker-1", "drain"): 1795428000.0, ("worker-1", UNKNOWN): 1795424400.0,
                   (UNKNOWN, "avoid"): None}  # fmt: skip
    many = [{"node": f"w{i}", "action": "avoid", "time": float(i)} for i in range(MAX_NODES + 5)]
    kept = nodes_taken_out(many)
    assert len(kept) == MAX_NODES and min(n.time or 0 for n in kept) == 5.0  # the newest


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install -y prometheus")
def test_the_node_taken_out_alert_fires(tmp_path: Path) -> None:
    series = 'ftslurm_node_taken_out{job="ftslurm",instance="login-0:9510",node="worker-1",' \
        'how="drain"}'
    (tmp_path / "t.yml").write_text(f"""
rule_files: ["{ALERTS}"]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: '{series}'
        values: '_x2 1x5'
    alert_rule_test:
      - eval_time: 1m
        alertname: FtslurmNodeTakenOut
        exp_alerts: []
      - eval_time: 4m
        alertname: FtslurmNodeTakenOut
        exp_alerts:
          - exp_labels: {{severity: warning, job: ftslurm, instance: "login-0:9510",
                         node: worker-1, how: drain}}
            exp_annotations:
              summary: "Node worker-1 taken out of the run (drain)"
              description: >-
                The launchers of login-0:9510's run found node worker-1 bad (a failed
                pre-flight check, or repeated failures there) and took it out: drain drained
                it, avoid keeps the replica off it, kept means it was the last node the array
                could run on and the replica still lands there. Fix the node; `ftslurm
                doctor` prints the command that brings it back.
""")
    out = runner.run([PROMTOOL, "test", "rules", "t.yml"], timeout=60, check=False,
                     cwd=str(tmp_path))  # fmt: skip
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _plot(rep: Any, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Any]:
    """Render the PNG; returns the texts drawn on its axes and the image's pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt

    texts: list[str] = []
    close = plt.close

    def keep_texts(fig: Any = None) -> None:
        for ax in getattr(fig, "axes", []):
            texts.extend([t.get_text() for t in ax.texts] + [ax.get_title(loc="left")])
        close(fig)

    monkeypatch.setattr(plt, "close", keep_texts)
    rep.to_plot(path)
    return texts, matplotlib.image.imread(str(path))


def _purple_pixels(img: Any) -> int:
    rgb = (img[:, :, :3] * 255).round().astype(int)
    r, g, b = _PURPLE
    return int(((abs(rgb[:, :, 0] - r) < 8) & (abs(rgb[:, :, 1] - g) < 8)
                & (abs(rgb[:, :, 2] - b) < 8)).sum())  # fmt: skip


def test_report_png_marks_each_node_taken_out(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    texts, img = _plot(build_report(TFT8), tmp_path / "bare.png", monkeypatch)
    assert _purple_pixels(img) == 0 and not any("worker" in t for t in texts)
    run, _ = _run_with_taken_out_nodes(tmp_path)
    rep = build_report(run)
    texts, img = _plot(rep, tmp_path / "nodes.png", monkeypatch)
    assert {"worker-1 drain", "worker-2 kept"} <= set(texts)
    # the escape sequence is drawn as text, not passed on
    assert not any("\x1b" in t for t in texts) and any("node 7 drain" in t for t in texts)
    assert any("nodes the launchers took out" in t for t in texts)
    # three full-height lines (1.5 px wide at 100 dpi) plus the labels: well over 200 pixels
    assert _purple_pixels(img) > 200


def test_dashboard_has_a_table_of_the_nodes_taken_out() -> None:
    dash = json.loads((ROOT / "docs" / "grafana" / "ftslurm-dashboard.json").read_text())
    (panel,) = [p for p in dash["panels"] if p["title"] == "Nodes taken out"]
    (target,) = panel["targets"]
    assert target["expr"].startswith("ftslurm_node_taken_out_timestamp_seconds{")
    assert panel["fieldConfig"]["defaults"]["unit"] == "dateTimeAsIso"  # ms since the epoch
    assert "* 1000" in target["expr"] and target["instant"] and target["format"] == "table"
