"""`ftslurm assets download` takes the Hugging Face token from HF_TOKEN, `--token-file FILE` or
standard input (`--token-file -`), never from the command line: a `--token X` stayed readable
in /proc/<pid>/cmdline (`ps`) for about a second before the command restarted itself without
it. Now `--token` is refused in one line naming the two ways, and nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import ftslurm, invoke, one_error_line

pytestmark = pytest.mark.unit

TOKEN = "hf_assets_token_never_taken_321"


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The tokens `download_tokenizer` was called with (it downloads nothing here)."""
    seen: list[str | None] = []

    def fake(dest: Path, token: str | None) -> list[Path]:
        seen.append(token)
        return [dest / "tokenizer.json"]

    monkeypatch.setattr("ftslurm.replica.assets.download_tokenizer", fake)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return seen


@pytest.mark.parametrize("given", [["--token", TOKEN], [f"--token={TOKEN}"], ["--token="],
                                   ["--token", TOKEN, "--token-file", "-"]])  # fmt: skip
def test_a_token_on_the_command_line_is_refused(given: list[str], tmp_path: Path,
                                                downloads: list[str | None]) -> None:  # fmt: skip
    r = invoke("assets", "download", *given, "--dest", str(tmp_path / "d"), input=TOKEN + "\n")
    assert r.exit_code == 2, r.output
    assert "--token is not taken" in r.output and "HF_TOKEN=hf_..." in r.output
    assert "--token-file FILE" in r.output and TOKEN not in r.output
    assert downloads == [] and not (tmp_path / "d").exists()


def test_the_environment_a_file_and_stdin_still_give_it(
    tmp_path: Path, downloads: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tok").write_text(TOKEN + "\n")
    r = invoke("assets", "download", "--token-file", str(tmp_path / "tok"), "--dest", str(tmp_path))
    assert r.exit_code == 0, r.output
    r = invoke("assets", "download", "--token-file", "-", "--dest", str(tmp_path),
               input=TOKEN + "\n")  # fmt: skip
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = invoke("assets", "download", "--dest", str(tmp_path))
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert downloads == [TOKEN, TOKEN, TOKEN]


def test_the_help_offers_no_token_option() -> None:
    text = invoke("assets", "download", "--help").output
    assert "--token-file" in text and "--token " not in text and "TEXT" not in text


def test_no_token_names_the_ways_to_give_one(tmp_path: Path) -> None:
    from ftslurm.errors import UserError
    from ftslurm.replica import assets

    with pytest.raises(UserError, match="set HF_TOKEN or pass --token-file FILE") as e:
        assets.download_tokenizer(tmp_path, None, hub_download=lambda **kw: pytest.fail())
    assert "--token " not in str(e.value)


@pytest.mark.process
def test_the_command_refuses_it_in_one_line_without_restarting(tmp_path: Path) -> None:
    r = ftslurm("assets", "download", "--token", TOKEN, "--dest", str(tmp_path / "d"),
                env={"HF_TOKEN": None}, timeout=60)  # fmt: skip
    line = one_error_line(r)
    assert "--token is not taken" in line and TOKEN not in line, line
    assert not (tmp_path / "d").exists()
