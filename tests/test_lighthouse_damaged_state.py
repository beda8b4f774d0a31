"""A damaged lighthouse.json (a field of the wrong type or out of range) is said by `lighthouse
status`, in text and in --json, not a traceback; `start` (already running) and `restart` read
the same fields and write the state anew. Real `ftslurm` CLI and real Lighthouse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lighthouse_state import cli, needs_torchft
from tests.lighthouse_state import original as original  # the fixture

pytestmark = pytest.mark.timeout(120)


@needs_torchft
@pytest.mark.parametrize("damage", [
    {"config": "abc"}, {"config": {"min_replicas": "x", "bind": 5}}, {"port": "1"},
    {"address": ["x"], "probe_url": 3}, {"log_max_mb": "big", "binary": 7}, {"port": 70000},
])  # fmt: skip
def test_a_damaged_state_file_is_said_not_a_traceback(original: Path, damage: dict):
    """Finding 9: `lighthouse.json` with `extra.config="abc"` made `lighthouse status` raise
    AttributeError; `start` (already running) and `restart` read the same fields."""
    state = json.loads((original / "lighthouse.json").read_text())
    state["extra"].update(damage)
    (original / "lighthouse.json").write_text(json.dumps(state))
    r = cli(original, "status")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "the state file is damaged" in r.stdout, r.stdout
    assert f"extra.{next(iter(damage))}" in r.stdout
    r = cli(original, "status", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["damaged"], r.stderr
    r = cli(original, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = cli(original, "restart")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "the state file is damaged" not in cli(original, "status").stdout  # written anew
