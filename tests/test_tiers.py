"""The test tiers of tests/conftest.py: a test marked `unit` that starts a process fails, even
when the code under test swallows the error; a test in no tier is `process`; a test that asks
for the local Slurm cluster is `slurm` whatever its own marks say, so `-m "not slurm"` never
starts Slurm. Runs an inner pytest session (in this process) with a copy of the conftest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)

CONFTEST = Path(__file__).with_name("conftest.py")
MARKERS = """
[pytest]
markers =
    unit: u
    process: p
    slurm: s
    training: t
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(MARKERS)
    return pytester


UNIT_STARTS = '''
import multiprocessing, os, subprocess, sys
import pytest
from ftslurm import runner

pytestmark = pytest.mark.unit

def test_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_swallowed():
    try:
        runner.run(["true"])
    except Exception:
        pass

def test_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)

def test_multiprocessing():
    p = multiprocessing.Process(target=print)
    p.start()
    p.join()

def test_system():
    os.system("true")

def test_pure():
    assert sum([1, 2]) == 3
'''


def test_a_unit_test_that_starts_a_process_fails(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_starts=UNIT_STARTS)
    result = inner.runpytest("-m", "unit", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=5)
    out = result.stdout.str()
    for what in ("subprocess.Popen", "os.fork", "multiprocessing start", "os.system"):
        assert f"a test marked unit started a process ({what}" in out, what
    # the swallowed one fails too, naming the command
    assert "test_swallowed - " in out and "subprocess.Popen: true)" in out


def test_each_test_gets_a_tier_and_its_own_beats_its_modules(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_others='''
import subprocess, sys
import pytest

def test_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.fixture(scope="module")
def slurm_cluster():
    raise AssertionError("a deselected test started the cluster")

def test_wants_slurm(slurm_cluster):
    pass

@pytest.mark.training
def test_trains():
    pass
''')
    inner.makepyfile(test_mixed='''
import subprocess, sys
import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

def test_pure():
    pass

@pytest.mark.process
def test_spawns():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.slurm
def test_on_slurm():
    pass
''')
    names = ("test_process", "test_wants_slurm", "test_trains", "test_pure", "test_spawns",
             "test_on_slurm")  # fmt: skip
    for expr, selected in [
        ("process", ["test_process", "test_spawns"]),
        ("slurm", ["test_wants_slurm", "test_on_slurm"]),
        ("not slurm and not training", ["test_process", "test_pure", "test_spawns"]),
        ("unit", ["test_pure"]),
    ]:
        result = inner.runpytest("-m", expr, "-p", "no:cacheprovider", "-v")
        ran = [n for n in names if f"::{n} " in result.stdout.str()]
        assert ran == selected, (expr, result.stdout.str())
    says = "selected test(s) are marked slurm: they start the local Slurm cluster as root"
    shown = [says in inner.runpytest("-m", expr, "-p", "no:cacheprovider").stdout.str()
             for expr in ("not training", "not slurm and not training")]  # fmt: skip
    assert shown == [os.geteuid() == 0, False]
    # a module's unit does not reach its process test: the guard leaves that one alone
    inner.runpytest("-m", "process", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    inner.runpytest("-m", "unit", "-p", "no:cacheprovider").assert_outcomes(passed=1)
