"""Links planted in the Lighthouse's state dir, and at the event log, never turn a command run
with sudo against the files they name: whole state files are written as new files renamed
over the link, an appended file (the log, the lock) refuses the start, `lighthouse logs` does
not print through a link, the launcher's log rotation does not follow one, and a state dir the
Lighthouse creates is private (0o700, its files 0o600). Real `ftslurm` CLI and real processes."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import event_log as E
from ftslurm import lighthouse as lh
from ftslurm.errors import UserError
from ftslurm.lighthouse import launcher
from ftslurm.safefile import UnsafePath
from tests.clirun import LighthouseDirs, lighthouse_cli, one_error_line

pytestmark = pytest.mark.timeout(90)
needs_torchft = pytest.mark.skipif(
    lh.torchft_extension() is None and shutil.which("torchft_lighthouse") is None,
    reason="torchft is not installed",
)
PRECIOUS = "precious: root's file, never to be written by ftslurm\n"


@pytest.fixture
def state_dir(lighthouse_dirs: LighthouseDirs) -> Path:
    """A state dir; whatever ran from it is stopped at the end, whatever the test did."""
    return lighthouse_dirs.new("lighthouse")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file only root should write; the links tests plant point at it."""
    v = tmp_path / "victim" / "passwd"
    v.parent.mkdir()
    v.write_text(PRECIOUS)
    return v


@needs_torchft
@pytest.mark.parametrize("name", ["lighthouse.last.json", "torchft_lighthouse", "lighthouse.json",
                                  "lighthouse.pid"])  # fmt: skip
def test_a_link_planted_at_a_whole_state_file_is_replaced_not_followed(
    state_dir: Path, victim: Path, name: str
):
    """Finding 4: `lighthouse.last.json` and the launcher copy were written through a link
    planted at their names (root overwrote the file it named); now each is written as a new
    file renamed over the link. The start goes on, its usual one line on stdout."""
    state_dir.mkdir()
    (state_dir / name).symlink_to(victim)
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1, r.stderr
    assert victim.read_text() == PRECIOUS
    assert not (state_dir / name).is_symlink()


@needs_torchft
@pytest.mark.parametrize("name", ["lighthouse.log", "lighthouse.lock"])
def test_a_link_planted_at_an_appended_state_file_is_refused(
    state_dir: Path, victim: Path, name: str
):
    """Finding 4: the log was appended through a link, and the lock file opened through one
    (a dangling link: root created the file it named); now the start is refused with one
    line and the target is untouched."""
    state_dir.mkdir()
    dangling = victim.with_name("created-by-root")
    (state_dir / name).symlink_to(dangling if name == "lighthouse.lock" else victim)
    line = one_error_line(lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0"))
    assert f"refusing to write {state_dir / name}: it is a symbolic link" in line, line
    assert victim.read_text() == PRECIOUS and not dangling.exists()
    assert not (state_dir / "lighthouse.json").exists()


def test_logs_does_not_print_through_a_link(state_dir: Path, victim: Path):
    """Finding 4: `lighthouse logs` (under sudo) would print whatever a planted link names."""
    state_dir.mkdir()
    (state_dir / "lighthouse.log").symlink_to(victim)
    line = one_error_line(lighthouse_cli(state_dir, "logs"))
    assert "symbolic link" in line and "precious" not in line


def test_the_event_log_is_not_appended_through_a_link(tmp_path: Path, victim: Path, monkeypatch):
    """Finding 4: `simulate-failure` (run with sudo) appended its event to whatever file a
    link at FTSLURM_EVENTS named."""
    link = tmp_path / "events.jsonl"
    link.symlink_to(victim)
    monkeypatch.setenv("FTSLURM_EVENTS", str(link))
    with pytest.raises(UnsafePath) as e:
        E.append_event(E.InjectedEvent(E.now_iso(), "kill", 1, "worker-0", "12"))
    assert str(e.value).startswith(f"refusing to write {link}: it is a symbolic link")
    assert "\n" not in str(e.value) and isinstance(e.value, UserError)
    assert victim.read_text() == PRECIOUS
    # a regular event log is appended as before, readable by a `report` run without sudo
    link.unlink()
    E.append_event(E.InjectedEvent(E.now_iso(), "kill", 1, "worker-0", "12"))
    assert len(link.read_text().splitlines()) == 1
    assert stat.S_IMODE(link.stat().st_mode) == 0o644


def test_the_launchers_log_rotation_does_not_follow_a_link(tmp_path: Path, victim: Path):
    """Finding 4: the running launcher made `<log>.new` with O_TRUNC, following a link
    planted there (truncating its target)."""
    log = tmp_path / "lighthouse.log"
    log.write_text("old lines\n")
    Path(f"{log}.new").symlink_to(victim)
    code = (f"import sys; sys.path.insert(0, {str(Path(launcher.__file__).parent)!r}); "
            f"import launcher; launcher.rotate({str(log)!r}); print('after', flush=True)")
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True, timeout=30)
    assert victim.read_text() == PRECIOUS
    assert Path(f"{log}.1").read_text() == "old lines\n" and log.read_text() == "after\n"
    assert not log.is_symlink() and stat.S_IMODE(log.stat().st_mode) == 0o600


@needs_torchft
def test_new_state_is_private(state_dir: Path):
    """Finding 4: a state dir the Lighthouse creates is 0o700 (no one else can plant a name
    in it), its files 0o600."""
    r = lighthouse_cli(state_dir, "start", "--bind", "127.0.0.1:0")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in state_dir.iterdir()}
    assert set(modes) >= {"lighthouse.json", "lighthouse.pid", "lighthouse.log",
                          "lighthouse.last.json", "lighthouse.lock", "torchft_lighthouse"}
    assert set(modes.values()) == {0o600}, modes
