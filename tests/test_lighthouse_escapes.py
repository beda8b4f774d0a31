"""Terminal escapes from the network or the command line never reach the terminal through the
managed Lighthouse's commands: replica ids and addresses in `lighthouse status` and lines of
`lighthouse logs` are shown escaped; an --advertise or --bind that holds escapes, or bytes that
are not text, is one error line, not a traceback. Real `ftslurm` CLI, real Lighthouse
(torchft-nightly, port 0) and torchft's own client.

Why: escapes sent to the Lighthouse by anyone who can reach it reached the terminal."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ftslurm import lighthouse as lh
from tests.clirun import one_error_line, stop_lighthouse
from tests.lighthouse_state import cli, needs_torchft, on_port
from tests.lighthouse_state import original as original  # the fixture

pytestmark = pytest.mark.timeout(120)

ESC = "\x1b]0;PWN\x07"  # sets the terminal's title: what no output of ftslurm may do


def no_escapes(text: str) -> None:
    """No control character but newlines in what reached the terminal."""
    assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"], repr(text)
    assert "\x7f" not in text and "\x9b" not in text


CLIENT = textwrap.dedent("""
    # A replica with an id full of escapes, with torchft's own client: a quorum, heartbeats
    import importlib.util, sys
    from datetime import timedelta
    spec = importlib.util.spec_from_file_location("torchft._torchft", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    c = m.LighthouseClient(sys.argv[2], timedelta(seconds=5))
    c.quorum(replica_id=sys.argv[3], timeout=timedelta(seconds=20), address=sys.argv[3],
             store_address=sys.argv[3], step=1, world_size=1, shrink_only=False)
    c.heartbeat(sys.argv[3])
    print("QUORUM OK")
""")


@needs_torchft
def test_status_shows_ids_and_addresses_from_the_network_escaped(original: Path):
    """Findings 6 and 8: a replica id (and its manager address) holding `ESC]0;...BEL`, sent
    to the Lighthouse by anyone who reaches it, was printed raw by `lighthouse status`."""
    url = f"http://127.0.0.1:{on_port(original)}"
    out = subprocess.run([sys.executable, "-c", CLIENT, str(lh.torchft_extension()), url,
                          f"evil{ESC}id"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "QUORUM OK" in out.stdout, out.stderr
    r = cli(original, "status")
    assert r.returncode == 0, r.stderr
    assert "evil\\x1b]0;PWN\\x07id" in r.stdout, r.stdout  # shown, not done
    no_escapes(r.stdout)


def test_logs_show_escapes(tmp_path: Path):
    """Finding 8: `lighthouse logs` printed the log's escapes raw (what a replica id in a
    log line of the Lighthouse holds), tabs kept."""
    d = tmp_path / "lh"
    d.mkdir()
    (d / "lighthouse.log").write_text(f"quorum\tfrom {ESC} and \x9b2J\n")
    r = cli(d, "logs")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "quorum\tfrom \\x1b]0;PWN\\x07 and \\x9b2J\n"


@pytest.mark.parametrize("advertise", [f"::1%{ESC}", f"[fe80::1%{ESC}]", "::1%a b"])
def test_advertise_with_escapes_is_refused(tmp_path: Path, advertise: str):
    """Finding 8: `--advertise $'::1%\\e]0;PWN\\a'` passed (Python reads anything after `%`
    as an IPv6 zone) and was echoed raw on stdout in TORCHFT_LIGHTHOUSE=..."""
    d = tmp_path / "lh"
    try:
        line = one_error_line(cli(d, "start", "--bind", "127.0.0.1:0", "--advertise", advertise))
        assert line.startswith("Error: --advertise "), line
        no_escapes(line)
        assert not (d / "lighthouse.json").exists()
    finally:
        stop_lighthouse(d)


@pytest.mark.parametrize("advertise", ["fe80::1%eth0", "[fe80::1%2]", "login-0", "10.0.0.1"])
def test_advertise_zones_and_names_still_pass(advertise: str):
    lh.LighthouseConfig(advertise=advertise)


@pytest.mark.parametrize("bind", [b"\xff:0", b"[fe80::1%lo]:0", f"{ESC}:0".encode(),
                                  b"[::1%a\x07]:0", b"a b:0"])  # fmt: skip
def test_bad_bind_hosts_are_one_line(tmp_path: Path, bind: bytes):
    """Finding 9: `--bind $'\\xff:0'` raised TypeError, `--bind '[fe80::1%lo]:0'` OSError:
    tracebacks instead of one line."""
    d = tmp_path / "lh"
    try:
        r = cli(None, "start", "--bind", bind, "--state-dir", str(d))
        line = one_error_line(r)
        assert line.startswith("Error: --bind "), line
        no_escapes(line)
    finally:
        stop_lighthouse(d)
