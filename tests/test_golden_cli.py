"""Behaviour kept across refactors: every case of tests/golden_cli.py (the report in text and
JSON, `logs`, `metrics show` and what `status` reads, on each recorded run, and every
`--help`) renders exactly as recorded in tests/golden/. After an intended change of output:
`python -m tests.golden_cli --write`, and commit the diff with the change."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests import golden_cli

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
CASES = golden_cli.cases()


def test_every_recorded_run_and_command_has_cases() -> None:
    assert len(golden_cli.runs()) >= 8
    assert {p.name for p in golden_cli.GOLDEN.iterdir()} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_as_recorded(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(golden_cli.ROOT.parent)
    empty = tmp_path / "no-lighthouse"
    empty.mkdir()
    text = golden_cli.cases(empty)[name]()
    want = (golden_cli.GOLDEN / name).read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                        "recorded", "now", n=2))
    assert text == want, f"{name} changed (python -m tests.golden_cli --write if meant):\n{diff}"
