"""`ftslurm assets download` and `ftslurm doctor --assets` through the CLI in this process: a
token from HF_TOKEN is taken without a warning, and an --assets path in a symlink loop is one
error line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import invoke
from tests.entry_point import error_line as _one_error_line
from tests.entry_point import run_main as _main

pytestmark = pytest.mark.unit

TOKEN = "hf_secret_token_never_printed_456"


def test_assets_token_from_the_environment_does_not_warn(monkeypatch, tmp_path):
    monkeypatch.setattr("ftslurm.replica.assets.download_tokenizer", lambda d, t: [d / t])
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = invoke("assets", "download", "--dest", str(tmp_path))
    assert res.exit_code == 0
    assert res.stderr == ""


# ------------------------------------------------------------------ doctor --assets


def test_doctor_assets_in_a_symlink_loop_is_one_line(tmp_path: Path, monkeypatch, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code, out, err = _main(monkeypatch, capsys, "doctor", "--assets", str(loop))
    assert code == 2 and out == ""
    assert str(loop) in _one_error_line(err) and "symlink loop" in err
