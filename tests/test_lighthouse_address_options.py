"""`lighthouse start --advertise` takes a host name or IP address only (a newline in it injected
a second variable into `export "$(ftslurm lighthouse start)"`), and a --bind with a colon but
no port is an error, never the default port 29510."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from ftslurm.errors import UserError
from ftslurm.lighthouse import address
from ftslurm.lighthouse.config import LighthouseConfig
from tests.clirun import LighthouseDirs, lighthouse_cli, one_error_line

pytestmark = pytest.mark.timeout(90)
needs_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
    reason="torchft is not installed",
)


@pytest.fixture
def state_dir(lighthouse_dirs: LighthouseDirs) -> Path:
    """A state dir; whatever ran from it is stopped at the end, whatever the test did."""
    return lighthouse_dirs.new("lighthouse")


@needs_torchft
@pytest.mark.parametrize("bad", ["bad\nFOO=1", "http://x:1", "login-0:29510", "two words", ""])
def test_advertise_is_a_host_only(state_dir: Path, bad: str):
    """Finding 11: `--advertise $'bad\\nFOO=1'` printed two lines on stdout (a second,
    injected, variable for `export "$(ftslurm lighthouse start)"`), `http://x:1` gave
    `http://http://x:1:PORT`. Now: one error line, exit 2, nothing started. ("" is the
    default: this machine's name.)"""
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0", "--advertise", bad)
    if bad == "":
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 1, r.stderr
        return
    line = one_error_line(r)
    assert line.startswith(f"Error: --advertise {bad!r}: give a host name or IP address only")
    assert not (state_dir / "lighthouse.json").exists()


def test_advertise_accepts_host_names_and_addresses():
    for host, shown in [("login-0", "login-0"), ("node_1.cluster.local.", "node_1.cluster.local."),
                        ("10.0.0.1", "10.0.0.1"), ("::1", "[::1]"), ("[fe80::1]", "[fe80::1]")]:
        assert LighthouseConfig(advertise=host).advertise == host
        assert address.advertised_host("0.0.0.0", host) == shown
    for bad in ("-x", "a..b", "x" * 64, "é.example", "10.0.0.1/8", "[login-0]"):
        with pytest.raises(UserError, match="--advertise"):
            LighthouseConfig(advertise=bad)


@pytest.mark.parametrize("bind", [":", "[::1]:", "127.0.0.1:", " : "])
def test_a_colon_without_a_port_is_an_error(bind: str):
    """Finding 11: `--bind :` silently meant port 29510 (where the user's Lighthouse may run:
    `--bind ":$PORT"` with PORT unset) while `[::1]:` was an error: now both are."""
    with pytest.raises(UserError, match="no port after ':'") as e:
        LighthouseConfig(bind=bind)
    assert "\n" not in str(e.value)
