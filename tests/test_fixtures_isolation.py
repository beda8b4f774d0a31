"""The state isolation of tests/conftest.py: every test runs with its own HOME, XDG folders,
outputs, Lighthouse state dir, event log and cluster dir, never the checkout's outputs/ or the
user's home; a name a module fixture or the test itself sets wins; `python -m ftslurm` run by a
test sees the same folders. The per-test and precedence checks run an inner pytest session
(in this process) with a copy of the conftest, as tests/test_tiers.py does."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import paths
from tests.clirun import REPO

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
STATE = ("FTSLURM_OUTPUTS", "FTSLURM_LIGHTHOUSE_DIR", "FTSLURM_EVENTS", "FTSLURM_CLUSTER_DIR")
HOME = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
# where ftslurm keeps state, as ftslurm reads it (the same code in an `ftslurm` process)
WHERE = ("import json; from pathlib import Path; from ftslurm import paths; print(json.dumps("
         "{'outputs': str(paths.outputs_dir()), 'lighthouse': str(paths.lighthouse_dir()), "
         "'events': str(paths.events_log()), 'cluster': str(paths.cluster_dir()), "
         "'home': str(Path.home())}))")  # fmt: skip


def _where() -> dict[str, str]:
    return {"outputs": str(paths.outputs_dir()), "lighthouse": str(paths.lighthouse_dir()),
            "events": str(paths.events_log()), "cluster": str(paths.cluster_dir()),
            "home": str(Path.home())}  # fmt: skip


def _is_under(path: str | Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


@pytest.mark.unit
def test_a_test_sees_neither_the_checkouts_outputs_nor_the_users_home(
    isolated_state: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    where = _where()
    user_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    basetemp = tmp_path_factory.getbasetemp()
    for name, path in where.items():
        assert not _is_under(path, REPO / "outputs"), (name, path)
        assert _is_under(path, basetemp), (name, path)
    assert Path(where["home"]) != user_home and os.environ["HOME"] == where["home"]
    assert set(isolated_state) == set(STATE + HOME)  # this test's own, every one
    for name in HOME[1:]:
        assert _is_under(os.environ[name], Path(where["home"])), name
    # what the isolation hides: without it the same code names the checkout's outputs/
    # (a test that ran so would read a user's runs there, or write beside them)
    with pytest.MonkeyPatch.context() as mp:
        for name in STATE:
            mp.delenv(name)
        mp.delenv("FTSLURM_PROJECT", raising=False)
        assert paths.outputs_dir() == REPO / "outputs"
        assert paths.lighthouse_dir() == REPO / "outputs" / "lighthouse"


@pytest.mark.unit
def test_the_test_sets_a_state_knob_itself_and_it_wins(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.setenv("FTSLURM_OUTPUTS", str(tmp_path / "mine"))
    assert paths.outputs_dir() == tmp_path / "mine"


def test_a_process_a_test_starts_sees_the_same_folders() -> None:
    out = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert json.loads(out.stdout) == _where()


INNER = '''
import json, os
from pathlib import Path
import pytest

NAMES = {names!r}
SEEN = Path({seen!r})


def record(test):
    with SEEN.open("a") as f:
        f.write(json.dumps({{"test": test, **{{n: os.environ.get(n) for n in NAMES}}}}) + "\\n")


@pytest.fixture(scope="module")
def module_outputs(tmp_path_factory):
    chosen = str(tmp_path_factory.mktemp("module-outputs"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FTSLURM_OUTPUTS", chosen)
        yield chosen


def test_one():
    record("one")


def test_two():
    record("two")


def test_module_fixture_keeps_its_own(module_outputs):
    assert os.environ["FTSLURM_OUTPUTS"] == module_outputs
    record("module")


def test_own_setting(monkeypatch):
    monkeypatch.setenv("FTSLURM_EVENTS", "/x/events.jsonl")
    record("own")
'''


def test_each_test_gets_its_own_folders_and_a_fixtures_own_setting_wins(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.jsonl"
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_inner=INNER.format(names=STATE + HOME, seen=str(seen)))
    before = {n: os.environ.get(n) for n in STATE + HOME}
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert {n: os.environ.get(n) for n in STATE + HOME} == before  # restored after
    rows = {r.pop("test"): r for r in map(json.loads, seen.read_text().splitlines())}
    one, two = rows["one"], rows["two"]
    for name in STATE + HOME:
        assert one[name] and two[name] and one[name] != two[name], name
        assert one[name] != before[name], name  # not the outer test's either
    # a module fixture's FTSLURM_OUTPUTS stays; the rest is still the test's own
    assert rows["module"]["FTSLURM_OUTPUTS"] not in (one["FTSLURM_OUTPUTS"], two["FTSLURM_OUTPUTS"])
    assert "module-outputs" in rows["module"]["FTSLURM_OUTPUTS"]
    assert rows["module"]["HOME"] not in (one["HOME"], two["HOME"])
    assert rows["own"]["FTSLURM_EVENTS"] == "/x/events.jsonl"
