"""Issue 30's findings that have no better home: each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm import procs
from ftslurm.cli import cli

TOKEN = "hf_secret_token_never_printed_456"


def test_assets_token_on_the_command_line_warns_and_is_never_printed(monkeypatch, tmp_path):
    seen = {}

    def fake_download(dest: Path, token: str | None) -> list[Path]:
        seen["token"] = token
        return [dest / "tokenizer.json"]

    monkeypatch.setattr("ftslurm.replica.assets.download_tokenizer", fake_download)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    res = CliRunner().invoke(cli, ["assets", "download", "--token", TOKEN, "--dest", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert seen["token"] == TOKEN
    assert "visible to every user of this machine in `ps`" in res.stderr
    assert "HF_TOKEN=hf_..." in res.stderr
    assert TOKEN not in res.output + res.stderr


def test_assets_token_from_the_environment_does_not_warn(monkeypatch, tmp_path):
    monkeypatch.setattr("ftslurm.replica.assets.download_tokenizer", lambda d, t: [d / t])
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = CliRunner().invoke(cli, ["assets", "download", "--dest", str(tmp_path)])
    assert res.exit_code == 0
    assert res.stderr == ""


@pytest.mark.parametrize(
    "text", ["99999999999999999999", "4194305", "0", "-5", "1e23", "١٢٣", "", "12 13"]
)
def test_a_pidfile_with_garbage_is_no_pid(tmp_path: Path, text: str) -> None:
    f = tmp_path / "x.pid"
    f.write_text(text + "\n")
    assert procs.read_pidfile(f) is None
    assert procs.pid_alive(procs.read_pidfile(f)) is False


def test_a_pidfile_with_a_pid_is_read(tmp_path: Path) -> None:
    f = tmp_path / "x.pid"
    f.write_text(" 4194304\n")
    assert procs.read_pidfile(f) == 4194304
    assert procs.valid_pid(1.0) is None and procs.valid_pid(True) is None
