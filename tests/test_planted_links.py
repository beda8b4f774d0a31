"""Links, FIFOs and big files planted where ftslurm, often as root, writes or reads: the CPU
assets' build lock and temporary names, slot claims, cluster.json, slurm.conf, the local
cluster's state folder. A link is refused or replaced, never followed (root would overwrite or
chmod what it names); a FIFO or /dev/zero is not read (it hung status, or filled memory). No
Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftslurm import safefile
from ftslurm.replica import slots
from tests.clirun import ftslurm, one_error_line

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[1]


def _victim(tmp_path: Path, name: str = "victim") -> Path:
    v = tmp_path / name
    v.write_text("precious\n")
    return v


def test_a_link_at_the_build_lock_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    from ftslurm.replica.launcher import job

    victim = _victim(tmp_path)
    local = tmp_path / "assets" / "local"
    local.mkdir(parents=True)
    (local / ".build.lock").symlink_to(victim)
    with pytest.raises(safefile.UnsafePath, match="is a symbolic link"):
        job._ensure_cpu_assets(tmp_path)
    assert victim.read_text() == "precious\n"


def test_make_local_never_writes_through_links_at_temporary_names(tmp_path: Path) -> None:
    from ftslurm.replica import assets

    a, b = _victim(tmp_path, "a"), _victim(tmp_path, "b")
    base = tmp_path / "ml"
    (base / "dataset").mkdir(parents=True)
    (base / "tokenizer").mkdir()
    (base / "dataset" / "data.jsonl.tmp").symlink_to(a)
    (base / "tokenizer" / "tokenizer_config.json.tmp").symlink_to(b)
    (base / "tokenizer" / "tokenizer.json.tmp").symlink_to(b)
    tok, data = assets.make_local(base, limit_chars=50_000)
    assert a.read_text() == b.read_text() == "precious\n"
    assert json.loads((tok / "tokenizer_config.json").read_text())["bos_token"] == assets.BOS
    assert (data / "data.jsonl").read_text().count("\n") > 5
    assert json.loads((tok / "tokenizer.json").read_text())["model"]["type"] == "BPE"


@pytest.mark.parametrize("linked", ["slots", "slot-0"])
def test_claims_and_finished_are_never_written_through_a_linked_folder(
    tmp_path: Path, linked: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "finished").write_text("precious\n")
    root = tmp_path / "run" / "slots"
    if linked == "slots":
        root.parent.mkdir()
        root.symlink_to(elsewhere)
    else:
        root.mkdir(parents=True)
        (root / "slot-0").symlink_to(elsewhere)
    with pytest.raises(safefile.UnsafePath, match="is a symbolic link"):
        slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    with pytest.raises(safefile.UnsafePath, match="is a symbolic link"):
        slots.record_member(root, 0, 0, "torchtitan_ft_0:x")
    if linked == "slots":
        with pytest.raises(safefile.UnsafePath, match="is a symbolic link"):
            slots.mark_finished(root, 0)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["finished"]
    assert (elsewhere / "finished").read_text() == "precious\n"


@pytest.mark.parametrize("what", ["zero", "fifo"])
def test_cluster_json_through_a_link_or_a_fifo_is_refused_at_once(
    tmp_path: Path, what: str
) -> None:
    state = tmp_path / "cluster"
    state.mkdir()
    if what == "zero":
        (state / "cluster.json").symlink_to("/dev/zero")
    else:
        os.mkfifo(state / "cluster.json")
    env = {"FTSLURM_CLUSTER_DIR": str(state)}
    t0 = time.monotonic()
    line = one_error_line(ftslurm("cluster", "env", env=env, timeout=10))
    assert str(state / "cluster.json") in line
    assert ("symbolic link" if what == "zero" else "not a regular file") in line
    st = ftslurm("cluster", "status", env=env, timeout=10)
    assert st.returncode == 3 and "not running" in st.stdout, st
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("what", ["zero", "fifo"])
def test_slurm_conf_through_a_link_or_a_fifo_is_not_read(tmp_path: Path, what: str) -> None:
    """The client reads the local slurm.conf to see whether its controller runs: a link to
    /dev/zero filled memory, a FIFO hung status, submit and simulate-failure."""
    conf = tmp_path / "slurm.conf"
    if what == "zero":
        conf.symlink_to("/dev/zero")
    else:
        os.mkfifo(conf)
    # in a child with 1 GiB of address space: reading /dev/zero must fail there, not here
    probe = ("import resource, sys; from pathlib import Path; "
             "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
             "from ftslurm.slurm import client; "
             "sys.exit(0 if client.controller_running(Path(sys.argv[1])) is False else 1)")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", probe, str(conf)], capture_output=True,
                         text=True, timeout=10, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-500:]
    assert time.monotonic() - t0 < 5
    env = {"FTSLURM_CLUSTER_DIR": str(tmp_path)}
    os.environ.pop("SLURM_CONF", None)
    for argv in (["status"], ["simulate-failure", "--dry-run", "--job", "5", "--replica", "0"]):
        out = ftslurm(*argv, env={**env, "PATH": "/nonexistent"}, timeout=10)
        assert "Traceback" not in out.stderr and out.returncode != 0, out


def test_read_checked_refuses_links_fifos_and_big_files(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("x")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    os.mkfifo(tmp_path / "fifo")
    assert safefile.read_checked(tmp_path / "ok") == b"x"
    assert safefile.read_checked(tmp_path / "missing") is None
    for name, why in (("big", "bigger than 10 bytes"), ("link", "symbolic link"),
                      ("fifo", "not a regular file")):  # fmt: skip
        with pytest.raises(safefile.UnsafePath, match=why):
            safefile.read_checked(tmp_path / name, limit=10)


def test_cluster_up_never_chmods_or_writes_through_a_linked_state_folder(tmp_path: Path) -> None:
    from ftslurm.cluster import local

    target = tmp_path / "private"
    target.mkdir(mode=0o700)
    state = tmp_path / "cluster"
    state.mkdir()
    (state / "munge").symlink_to(target)
    with pytest.raises(safefile.UnsafePath, match="is a symbolic link"):
        local._prepare_state_dir(local.new_spec(2, state))
    assert target.stat().st_mode & 0o777 == 0o700 and list(target.iterdir()) == []
