"""Pure parts of ftslurm.lighthouse: the /status HTML parser on real recorded pages, bind
addresses, advertised host, the config. No processes."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from ftslurm.errors import UserError
from ftslurm.lighthouse import address, status_page
from ftslurm.lighthouse.config import LighthouseConfig

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "lighthouse"


def recorded_status(name: str) -> str:
    """The `GET /status` body out of a recorded `=== <time> GET <path>` transcript."""
    text = (FIX / name).read_text()
    m = re.search(r"^=== \S+ GET /status\n(.*?)^\[HTTP 200\]$", text, re.S | re.M)
    assert m, name
    return m.group(1)


def test_both_replicas_up():
    """Real torchft DDP run on CPU, both replicas training (plus a stale id from another job)."""
    q = status_page.parse_status_html(recorded_status("http_both_up.txt"))
    assert q.quorum_id == 1
    assert q.next_status == (
        "New quorum not ready, only have 0 participants, need min_replicas 1 "
        "[0/0 participants healthy][2 heartbeating][shrink_only=false]"
    )
    assert q.previous_quorum_id == 1 and q.num_participants == 2
    assert q.quorum_age_s == pytest.approx(0.084761762)
    assert [m.replica_id for m in q.members] == [
        "train_ddp_0:59ccd9f9-4dfa-412b-bc27-2cb6e4b1cf37",
        "train_ddp_1:536ef6e1-05a8-40a1-8f68-197240c24336",
    ]
    m0 = q.members[0]
    assert (m0.step, m0.manager, m0.store, m0.world_size, m0.recovering) == (
        15, "http://vm:45223", "localhost:36575", 1, False,
    )  # fmt: skip
    assert [(h.replica_id.split(":")[0], h.old) for h in q.heartbeats] == [
        ("train_ddp_1", False), ("train_ddp_0", False), ("torchtitan_ft_0", True),
    ]  # fmt: skip
    assert q.heartbeats[2].age_s == pytest.approx(11.563938516)
    assert len(q.live_heartbeats) == 2


def test_replica_1_dead_for_7s():
    q = status_page.parse_status_html(recorded_status("http_r1_dead_7s.txt"))
    assert q.quorum_id == 2 and q.num_participants == 1
    assert [m.replica_id.split(":")[0] for m in q.members] == ["train_ddp_0"]
    assert q.members[0].step == 28
    assert "[1 heartbeating]" in q.next_status
    dead = [h for h in q.heartbeats if h.replica_id.startswith("train_ddp_1")]
    assert dead[0].old and dead[0].age_s == pytest.approx(7.231667674)


def test_idle_lighthouse():
    """Recorded from our own Lighthouse before any replica: no previous quorum, no heartbeats."""
    q = status_page.parse_status_html((FIX / "status_idle.html").read_text())
    assert q.quorum_id == 0
    assert q.next_status.startswith("New quorum not ready, only have 0 participants")
    assert q.previous_quorum_id is None and q.num_participants is None
    assert q.members == [] and q.heartbeats == []


def test_recovering_member_and_old_heartbeat():
    """Recorded: two replicas at steps 42 and 0 (the one at 0 is shown `recovering`), then
    replica 1 silent past the heartbeat timeout."""
    q = status_page.parse_status_html((FIX / "status_two_members_recovering.html").read_text())
    assert [(m.replica_id, m.step, m.recovering, m.world_size) for m in q.members] == [
        ("torchtitan_ft_0:0f3c", 42, False, 8),
        ("torchtitan_ft_1:9a1d", 0, True, 8),
    ]
    q = status_page.parse_status_html((FIX / "status_one_heartbeat_old.html").read_text())
    assert {h.replica_id: h.old for h in q.heartbeats} == {
        "torchtitan_ft_0:0f3c": False,
        "torchtitan_ft_1:9a1d": True,
    }


def test_garbage_and_html_escapes():
    assert status_page.parse_status_html("") == status_page.QuorumPage()
    assert status_page.parse_status_html("<html>404</html>").quorum_id is None
    page = (
        '<div class="member">\n<b>a&amp;b:1</b> <br/>\nStep: 3 <br/>\n</div>'
        '<li class="heartbeat">a&amp;b:1: seen 250ms ago</li>'
    )
    q = status_page.parse_status_html(page)
    assert q.members[0].replica_id == "a&b:1" and q.members[0].step == 3
    assert q.heartbeats[0].replica_id == "a&b:1" and q.heartbeats[0].age_s == pytest.approx(0.25)


@settings(max_examples=200, deadline=None)
@given(hs.text())
def test_parser_never_raises(text: str):
    """Any text, and any cut of a real page, parses without raising into well-typed fields
    (the status command and the metrics read them without checking)."""
    for page in (text, recorded_status("http_both_up.txt")[: len(text)]):
        q = status_page.parse_status_html(page)
        assert all(isinstance(m.replica_id, str) for m in q.members)
        assert all(isinstance(h.age_s, float) and h.age_s >= 0 for h in q.heartbeats)


@pytest.mark.parametrize(
    "text,seconds",
    [("0.084761762s", 0.084761762), ("84.7ms", 0.0847), ("12µs", 12e-6), ("3ns", 3e-9),
     ("2s", 2.0), ("abc", None), ("", None)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float | None):
    got = status_page.parse_duration(text)
    assert got == (pytest.approx(seconds) if seconds is not None else None)


def test_parse_bind(monkeypatch):
    monkeypatch.setattr(address, "default_bind_host", lambda: "[::]")
    assert address.parse_bind(None) == ("::", 29510)
    assert address.parse_bind(":0") == ("::", 0)
    assert address.parse_bind("29511") == ("::", 29511)
    assert address.parse_bind("127.0.0.1:1234") == ("127.0.0.1", 1234)
    assert address.parse_bind("[::1]:80") == ("::1", 80)
    assert address.parse_bind("[::]:29510") == ("::", 29510)
    assert address.parse_bind("0.0.0.0") == ("0.0.0.0", 29510)
    assert address.parse_bind("[::1]") == ("::1", 29510)
    assert address.parse_bind("login-0") == ("login-0", 29510)
    monkeypatch.setattr(address, "default_bind_host", lambda: "0.0.0.0")
    assert address.parse_bind(":5") == ("0.0.0.0", 5)
    for bad in ("host:99999", "a:b", "1:2:3", "[::1]:x", "[::1]:", ":", "0.0.0.0:", "h:١٢"):
        with pytest.raises(UserError):
            address.parse_bind(bad)
    assert address.format_bind("::", 5) == "[::]:5"
    assert address.format_bind("10.0.0.1", 5) == "10.0.0.1:5"


def test_advertised_host():
    assert address.advertised_host("::") == socket.gethostname()
    assert address.advertised_host("0.0.0.0", "login-0") == "login-0"
    assert address.advertised_host("10.1.2.3") == "10.1.2.3"
    assert address.advertised_host("fe80::1") == "[fe80::1]"
    assert address.probe_host("::") == "127.0.0.1" and address.probe_host("::1") == "[::1]"


def test_config_args_follow_the_cluster_guide():
    args = LighthouseConfig(bind="0.0.0.0:29510").args()
    assert args == ["--bind", "0.0.0.0:29510", "--min_replicas", "1", "--quorum_tick_ms", "100",
                    "--join_timeout_ms", "10000", "--heartbeat_timeout_ms", "2000"]  # fmt: skip
    args = LighthouseConfig(bind="0.0.0.0:1", heartbeat_timeout_ms=3000).args()
    assert args[-2:] == ["--heartbeat_timeout_ms", "3000"]
    assert "--heartbeat_timeout_ms" not in LighthouseConfig(heartbeat_timeout_ms=None).args()
    for bad in ({"min_replicas": 0}, {"join_timeout_ms": -1}, {"heartbeat_timeout_ms": 0},
                {"bind": "a:b"}):  # fmt: skip
        with pytest.raises(UserError):
            LighthouseConfig(**bad)  # validated when built: a typo never reaches a restart


def test_recorded_config_keeps_the_port_binary_and_log_cap(tmp_path: Path):
    """`restart` of a stopped Lighthouse: the last start's options, on the port it got."""
    from ftslurm import lighthouse as lh

    assert lh.recorded_config(tmp_path) == LighthouseConfig(state_dir=tmp_path)  # nothing yet
    (tmp_path / "lighthouse.last.json").write_text(json.dumps({
        "config": {"bind": "127.0.0.1:0", "min_replicas": 2, "advertise": "login-0"},
        "port": 41234, "binary": "/bin/true", "log_max_mb": 0.5,
    }))  # fmt: skip
    cfg = lh.recorded_config(tmp_path)
    assert (cfg.bind, cfg.min_replicas, cfg.advertise) == ("127.0.0.1:41234", 2, "login-0")
    assert (cfg.binary, cfg.log_max_mb, cfg.join_timeout_ms) == ("/bin/true", 0.5, 10000)
