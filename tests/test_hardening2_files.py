"""Files, links, slot claims and numbers (the second hardening pass): every test here failed
before its fix. No Slurm: the slot cases run on real slot files, the launcher's as a real
process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from ftslurm import knobs, procs, safefile
from ftslurm.errors import UserError
from ftslurm.replica import slots, standby
from ftslurm.wait import wait_for
from tests.clirun import executable, ftslurm, invoke, one_error_line

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[1]


def _victim(tmp_path: Path, name: str = "victim") -> Path:
    v = tmp_path / name
    v.write_text("precious\n")
    return v


# ------------------------------------------------------------------ links root writes through


def test_a_link_at_the_build_lock_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    from ftslurm.replica import job

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


# ------------------------------------------------------------------ slot files


def _claim_file(root: Path, slot_: int, epoch_: int, **fields: object) -> None:
    slot, epoch = slot_, epoch_
    d = {"slot": slot, "epoch": epoch, "task": slot, "host": "n", "pid": 1, "time": 100.0,
         "previous_task": None, "why": ""}  # fmt: skip
    d.update(fields)
    folder = root / f"slot-{slot}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"epoch-{epoch}.json").write_text(json.dumps(d))


def test_an_empty_far_slot_folder_costs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    (root / "slot-999999999").mkdir()
    t0 = time.monotonic()
    assert slots.slot_count(root) == 1
    assert slots.task_slots(root) == {0: "0"}
    assert [c.task for c in slots.history(root, slots.slot_count(root))] == [0]
    assert time.monotonic() - t0 < 1.0


def test_a_valid_claim_in_a_far_slot_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    _claim_file(root, 999_999_999, 0)
    t0 = time.monotonic()
    assert slots.slot_count(root) == 1
    assert slots.holders(root, 10**9).keys() == set(range(slots.MAX_SLOTS))
    assert time.monotonic() - t0 < 5.0


@pytest.mark.parametrize("bad", [
    {"task": float("inf")}, {"task": float("nan")}, {"time": 1e300}, {"time": -1e20},
    {"time": float("nan")}, {"task": True}, {"task": "3"}, {"slot": 0}, {"epoch": 7},
    {"pid": 10**30}, {"previous_task": float("-inf")}, {"host": ["x"]},
])  # fmt: skip
def test_a_malformed_claim_is_ignored_with_a_warning_and_held_by_an_unknown_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: dict[str, object]
) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    slots.try_claim(root, 1, 0, 1, "n", 1, 100.0)
    _claim_file(root, 1, 1, **bad)  # json.dumps writes Infinity / NaN as JavaScript does
    slots._warned.clear()
    holders = slots.holders(root, 2)
    assert holders[0] is not None and holders[0].task == 0
    assert holders[1] is not None and not holders[1].known and holders[1].epoch == 1
    assert slots.task_slots(root) == {0: "0", 1: "spare"}
    lines = slots.claim_lines(slots.history(root, slots.slot_count(root)))
    assert len(lines) == 2
    assert "warning: ignoring the slot claim" in capsys.readouterr().err
    # the spare's watcher neither crashes nor loses the epoch chain
    slots.record_member(root, 0, 0, "torchtitan_ft_0:a")
    w = standby.Watcher(root, 2, 300.0, lambda: (["torchtitan_ft_0:a"], []))
    assert w.poll(1000.0) is None  # vacant at the first read: claimed on the second look
    found = w.poll(1000.0 + standby.SECOND_LOOK_S)
    assert found is not None and found[0] == 1 and found[1].epoch == 1
    assert slots.try_claim(root, 1, 2, 5, "n", 1, 1000.0) is not None


def test_a_planted_far_epoch_neither_hides_the_holder_nor_blocks_claims(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "n", 1, 100.0)
    slots.try_claim(root, 0, 1, 2, "n", 1, 101.0, previous_task=0)
    _claim_file(root, 0, 999_999_999_999_999_999, task=7)
    assert slots.current(root, 0).task == 2
    assert slots.epochs(root, 0) == [0, 1]
    nxt = slots.try_claim(root, 0, slots.current(root, 0).epoch + 1, 3, "n", 1, 102.0)
    assert nxt is not None and slots.current(root, 0) == nxt
    assert slots.task_slots(root) == {0: "spare", 2: "spare", 3: "0"}


def test_status_claim_lines_are_terminal_safe(tmp_path: Path) -> None:
    root = tmp_path / "slots"
    slots.try_claim(root, 0, 0, 0, "w-0\x1b]0;PWNED\x07", 1, 100.0)
    (line,) = slots.claim_lines(slots.history(root, 1))
    assert "\x1b" not in line and "\x07" not in line and "w-0\\x1b]0;PWNED\\x07" in line


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize("raw", ["٢", "1_0", "99999999999999999999", "²", "1e3", "0x10"])
def test_ft_spares_takes_ascii_decimal_within_its_maximum(raw: str) -> None:
    with pytest.raises(UserError, match="FT_SPARES="):
        knobs.get({"FT_SPARES": raw}, "FT_SPARES")
    assert knobs.get({"FT_SPARES": " 2 "}, "FT_SPARES") == 2


@pytest.mark.parametrize("raw", ["٢", "1_0", "99999999999999999999"])
def test_the_demo_refuses_a_bad_ft_spares_in_one_line(raw: str) -> None:
    out = ftslurm("demo", "--backend", "local", "--dry-run", env={"FT_SPARES": raw},
                  timeout=20)
    line = one_error_line(out)
    assert "--spares" in line


@pytest.mark.parametrize("raw", ["18446744073709551615", "٣", "1_0", "86400001", "0"])
def test_heartbeat_timeout_ms_takes_ascii_decimal_within_a_day(raw: str) -> None:
    r = invoke("lighthouse", "start", "--heartbeat-timeout-ms", raw,
               "--state-dir", "/nonexistent/never-used")  # fmt: skip
    assert r.exit_code == 2 and "Invalid value for '--heartbeat-timeout-ms'" in r.output, r.output
    r = invoke("lighthouse", "start", "--state-dir", "/nonexistent/x",
               env={"FTSLURM_LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS": raw})
    assert r.exit_code == 2 and "Invalid value for '--heartbeat-timeout-ms'" in r.output, r.output


def test_the_count_param_type() -> None:
    from ftslurm.commands.params import Count

    assert Count(1, 5).convert("3", None, None) == 3
    assert Count(1, 5).convert(4, None, None) == 4
    for bad in ("6", "٣", "1_0", "", "3.0"):
        with pytest.raises(click.BadParameter):
            Count(1, 5).convert(bad, None, None)


def test_a_too_long_cluster_dir_is_one_error_line(tmp_path: Path) -> None:
    for long in ("/tmp/" + "a" * 5000, "/tmp/" + "/".join(["a" * 200] * 30)):
        for argv in (["cluster", "status"], ["cluster", "env"]):
            line = one_error_line(ftslurm(*argv, env={"FTSLURM_CLUSTER_DIR": long}, timeout=20))
            assert "FTSLURM_CLUSTER_DIR=" in line and "too long" in line and len(line) < 300


def test_knobs_write_outside_a_checkout_is_one_error_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "ftslurm.knobs", "--write"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "FTSLURM_PROJECT": str(tmp_path)})  # fmt: skip
    line = one_error_line(out)
    assert "docs/settings.md" in line
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the token in ps


FAKE_HUB = '''
import os
from pathlib import Path


def hf_hub_download(repo_id, filename, local_dir, token):
    cmd = Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode()
    with open(os.environ["FAKE_HUB_RECORD"], "a") as f:
        f.write(f"{cmd}|{token}\\n")
    out = Path(local_dir) / filename
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("{}")
    return str(out)
'''
TOKEN = "hf_hardening2_secret_token_789"


@pytest.mark.parametrize("how", ["--token-file", "stdin"])
def test_the_token_is_not_on_the_command_line_while_it_downloads(tmp_path: Path, how: str) -> None:
    hub = tmp_path / "fakehub" / "huggingface_hub"
    hub.mkdir(parents=True)
    (hub / "__init__.py").write_text(FAKE_HUB)
    record = tmp_path / "record"
    env = {"HF_TOKEN": None, "PYTHONPATH": f"{hub.parent}{os.pathsep}{REPO}",
           "FAKE_HUB_RECORD": str(record), "HF_HUB_OFFLINE": "1"}
    stdin = None
    if how == "--token-file":
        (tmp_path / "tok").write_text(TOKEN + "\n")
        args = ["--token-file", str(tmp_path / "tok")]
    else:
        args, stdin = ["--token-file", "-"], TOKEN + "\n"
    out = ftslurm("assets", "download", *args, "--dest", str(tmp_path / "d"), env=env,
                  input=stdin, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert TOKEN not in out.stdout + out.stderr
    seen = record.read_text().splitlines()
    assert len(seen) == 3
    for line in seen:
        cmdline, token = line.rsplit("|", 1)
        assert token == TOKEN and TOKEN not in cmdline and "download" in cmdline


def test_token_and_token_file_together_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("x\n")
    r = invoke("assets", "download", "--token", "a", "--token-file", str(tmp_path / "tok"))
    assert r.exit_code == 2 and "--token is not taken" in r.output


# ------------------------------------------------------------------ attempt folders


def _attempt_dirs(tmp: Path) -> set[str]:
    return {p.name for p in tmp.glob("ftslurm-attempt-*")}


def _launcher(tmp_path: Path, torchrun: str) -> subprocess.Popen:
    from tests.ftjob import KNOB_ENV_RE

    tok = tmp_path / "tok"
    tok.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tok / name).write_text("{}")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not KNOB_ENV_RE.match(k)}
    env.update(FTSLURM_PROJECT=str(tmp_path), FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="1",
               FTSLURM_TORCHRUN=torchrun, FTSLURM_EXTRA_ARGS=f"--model.hf_assets_path={tok}",
               TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(REPO),
               FTSLURM_PREFLIGHT="0")  # no GPU here: the node check is not under test  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "ftslurm.replica", "job"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def test_a_sigkilled_attempts_folder_is_removed_at_once(tmp_path: Path) -> None:
    """The local demo SIGKILLs its launchers' process trees (a failure, its teardown): each
    left its attempt folder behind until a later attempt started on the host."""
    slow = executable(tmp_path / "slow-torchrun", "#!/bin/sh\nexec sleep 60\n")
    p = _launcher(tmp_path, str(slow))
    try:
        wait_for(lambda: _attempt_dirs(tmp_path / "tmp"), timeout=30, what="the attempt folder")
        # torchrun itself, not the guard's first process (also a child of the launcher while
        # it starts): a kill before the guard forked away would leave nothing to remove it
        wait_for(lambda: any(procs.cmdline(c)[:1] == ["sleep"] for c in procs.descendants([p.pid])),
                 timeout=30, what="torchrun")  # fmt: skip
        procs.kill_pids(procs.process_tree(p.pid), signal.SIGKILL)
        p.wait(timeout=10)
        wait_for(lambda: not _attempt_dirs(tmp_path / "tmp"), timeout=10,
                 what="the killed attempt's folder to go")  # fmt: skip
    finally:
        procs.kill_pids(procs.process_tree(p.pid))
        p.wait(timeout=10)


def test_a_finished_attempt_leaves_no_folder_and_no_guard(tmp_path: Path) -> None:
    p = _launcher(tmp_path, "true")
    assert p.wait(timeout=60) == 0
    assert _attempt_dirs(tmp_path / "tmp") == set()
    wait_for(lambda: not [q for q in procs.pids_with_env(f"TMPDIR={tmp_path / 'tmp'}")
                          if "attempt_guard" in procs.proc_cmdline(q)],
             timeout=10, what="the guard to exit")  # fmt: skip


def test_the_guard_removes_only_an_attempt_folder_of_this_user(tmp_path: Path) -> None:
    from ftslurm.replica import attempt_guard

    other = tmp_path / "not-an-attempt"
    other.mkdir()
    assert attempt_guard.remove(other) is False and other.exists()
    link = tmp_path / "ftslurm-attempt-link"
    link.symlink_to(other)
    assert attempt_guard.remove(link) is False and other.exists()
    mine = tmp_path / "ftslurm-attempt-h-1-x"
    (mine / "sub").mkdir(parents=True)
    assert attempt_guard.remove(mine) is True and not mine.exists()


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
