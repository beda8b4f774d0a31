"""bench/knob_parses.py runs (a real launcher attempt against a real Lighthouse, a submit with a
stand-in sbatch) and shows the registry parsed once per environment, not once per reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(300)


def test_a_launch_and_a_submit_parse_the_registry_once_per_environment() -> None:
    done = subprocess.run([sys.executable, "bench/knob_parses.py", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["launch"]["rc"] == 0
    # the launcher's environment and the attempt's (it adds the restart count); the submitting
    # process's and the job's
    assert got["launch"]["parses"] == 2 < got["launch"]["load_calls"]
    assert got["submit"]["parses"] == 2 < got["submit"]["load_calls"]
