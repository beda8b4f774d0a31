"""A Lighthouse heartbeat timeout below two of torchft's heartbeat intervals is refused, in one
line that names the fix, wherever it can be set: `ftslurm lighthouse start` (flag and knob),
`ftslurm demo`, the Python API's config, and a value read back from a saved state (restart).
Below the floor the Lighthouse drops live replicas between heartbeats and the launcher's
watchdog kills every attempt (exit 137)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from ftslurm import knobs
from ftslurm.errors import UserError
from ftslurm.lighthouse.config import LighthouseConfig, check_heartbeat_timeout
from ftslurm.lighthouse.lifecycle import recorded_config
from tests.clirun import invoke

pytestmark = pytest.mark.unit

FLOOR = knobs.HEARTBEAT_TIMEOUT_FLOOR_MS


def test_the_floor_is_twice_the_installed_torchfts_heartbeat_interval() -> None:
    """The constant follows torchft's Manager default (read from its source, not imported:
    importing torchft imports torch)."""
    spec = importlib.util.find_spec("torchft")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchft is not installed")
    source = (Path(next(iter(spec.submodule_search_locations))) / "manager.py").read_text()
    found = re.search(r"heartbeat_interval: timedelta = timedelta\(milliseconds=(\d+)\)", source)
    assert found, "torchft's Manager no longer declares heartbeat_interval as expected"
    assert int(found.group(1)) == knobs.TORCHFT_HEARTBEAT_INTERVAL_MS
    assert FLOOR == 2 * knobs.TORCHFT_HEARTBEAT_INTERVAL_MS == 200


@pytest.mark.parametrize("ms", [1, 50, 100, FLOOR - 1])
def test_the_config_refuses_a_timeout_below_the_floor(ms: int) -> None:
    with pytest.raises(UserError) as e:
        LighthouseConfig(heartbeat_timeout_ms=ms)
    text = str(e.value)
    assert "\n" not in text and f"--heartbeat-timeout-ms {FLOOR} or more" in text, text
    assert LighthouseConfig(heartbeat_timeout_ms=FLOOR).heartbeat_timeout_ms == FLOOR
    assert LighthouseConfig(heartbeat_timeout_ms=None).heartbeat_timeout_ms is None


@pytest.mark.parametrize("ms", ["50", "0", str(FLOOR - 1)])
def test_lighthouse_start_refuses_the_flag_below_the_floor(ms: str, tmp_path: Path) -> None:
    r = invoke("lighthouse", "start", "--heartbeat-timeout-ms", ms,
               "--state-dir", str(tmp_path / "lh"))  # fmt: skip
    assert r.exit_code == 2, r.output
    assert f"is below {FLOOR} ms" in r.output and f"--heartbeat-timeout-ms {FLOOR}" in r.output
    assert not (tmp_path / "lh").exists()


def test_lighthouse_start_and_restart_refuse_the_knob_below_the_floor(tmp_path: Path) -> None:
    env = {"FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS": "50"}
    for command in ("start", "restart"):
        r = invoke("lighthouse", command, "--state-dir", str(tmp_path / "lh"), env=env)
        assert r.exit_code == 2 and f"must be at least {FLOOR}" in r.output, r.output
    assert knobs.KNOBS["FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS"].minimum == FLOOR


def test_the_demo_refuses_below_the_floor() -> None:
    r = invoke("demo", "--backend", "local", "--dry-run", "--heartbeat-timeout-ms", "50")
    assert r.exit_code == 2 and f"is below {FLOOR} ms" in r.output, r.output
    r = invoke("demo", "--backend", "local", "--dry-run",
               env={"FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS": "50"})  # fmt: skip
    assert r.exit_code == 2 and f"must be at least {FLOOR}" in r.output, r.output
    from ftslurm.demo import DemoConfig

    with pytest.raises(UserError, match=f"below {FLOOR} ms"):
        DemoConfig(backend="local", heartbeat_timeout_ms=50).validate()
    DemoConfig(backend="local", heartbeat_timeout_ms=FLOOR).validate()


def _last_start(state_dir: Path, heartbeat_timeout_ms: int) -> Path:
    """The record `stop` keeps of the last start, as an older version (or another user) left
    it, with `heartbeat_timeout_ms`."""
    state_dir.mkdir(mode=0o700)
    config = {"bind": "127.0.0.1:0", "min_replicas": 1, "quorum_tick_ms": 100,
              "join_timeout_ms": 10000, "heartbeat_timeout_ms": heartbeat_timeout_ms,
              "advertise": None}  # fmt: skip
    path = state_dir / "lighthouse.last.json"
    path.write_text(json.dumps({"config": config, "requested_bind": "127.0.0.1:0",
                                "binary": None, "log_max_mb": 64.0, "port": 0}))  # fmt: skip
    return path


def test_a_recorded_timeout_below_the_floor_is_refused_naming_its_file(tmp_path: Path) -> None:
    path = _last_start(tmp_path / "lh", 50)
    with pytest.raises(UserError) as e:
        recorded_config(tmp_path / "lh")
    text = str(e.value)
    assert str(path) in text and f"--heartbeat-timeout-ms {FLOOR} or more" in text, text
    given = recorded_config(tmp_path / "lh", {"heartbeat_timeout_ms": 2000})
    assert given.heartbeat_timeout_ms == 2000  # the user's word replaces the recorded one


def test_a_recorded_timeout_at_the_floor_is_kept(tmp_path: Path) -> None:
    _last_start(tmp_path / "lh", FLOOR)
    assert recorded_config(tmp_path / "lh").heartbeat_timeout_ms == FLOOR


def test_the_check_takes_none_as_the_binarys_default() -> None:
    check_heartbeat_timeout(None)
    with pytest.raises(UserError, match=r"^the thing 5 is below"):
        check_heartbeat_timeout(5, "the thing")
