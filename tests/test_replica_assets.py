"""Assets: the download's error paths with a fake hub (never the network), and the local
tokenizer + dataset builder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftslurm.errors import UserError
from ftslurm.replica import assets

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

TOKEN = "hf_secret_token_never_printed_123"


def _hub_error(cls_name: str, status: int | None = None) -> Exception:
    """An exception shaped like huggingface_hub's (class name in the MRO, response.status_code),
    built without a network response object."""
    import huggingface_hub.errors as hub_errors

    cls = getattr(hub_errors, cls_name)
    err = cls.__new__(cls)
    Exception.__init__(err, f"401 Client Error for url https://huggingface.co/x token={TOKEN}")
    err.response = type("R", (), {"status_code": status})()
    return err


def _raiser(exc: Exception):
    calls = []

    def fake(**kwargs):
        calls.append(kwargs)
        raise exc

    fake.calls = calls
    return fake


def test_missing_token_is_one_clear_line(tmp_path: Path) -> None:
    fake = _raiser(AssertionError("the hub must not be called"))
    with pytest.raises(UserError, match="set HF_TOKEN or pass --token"):
        assets.download_tokenizer(tmp_path, None, hub_download=fake)
    assert fake.calls == []


@pytest.mark.parametrize(
    ("exc", "expect"),
    [
        (lambda: _hub_error("GatedRepoError", 403), "is gated and this token has no access"),
        (lambda: _hub_error("HfHubHTTPError", 401), "rejected the token"),
        (lambda: _hub_error("RepositoryNotFoundError", 404), "not found or is not visible"),
        (lambda: ConnectionError("no route to host"), "cannot download tokenizer.json"),
    ],
)
def test_hub_refusals_become_user_errors(tmp_path: Path, exc, expect: str) -> None:
    fake = _raiser(exc())
    with pytest.raises(UserError) as info:
        assets.download_tokenizer(tmp_path, TOKEN, hub_download=fake)
    msg = str(info.value)
    assert expect in msg
    assert TOKEN not in msg and "\n" not in msg
    assert fake.calls[0]["token"] == TOKEN and fake.calls[0]["repo_id"] == assets.HF_REPO


def test_download_fetches_the_three_files(tmp_path: Path) -> None:
    got = []

    def fake(repo_id: str, filename: str, local_dir: Path, token: str) -> str:
        got.append(filename)
        path = Path(local_dir) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return str(path)

    files = assets.download_tokenizer(tmp_path / "hf", TOKEN, hub_download=fake)
    assert got == ["tokenizer.json", "tokenizer_config.json", "original/tokenizer.model"]
    assert files == [tmp_path / "hf" / name for name in got]
    assert [f.read_text() for f in files] == ["{}"] * 3


@pytest.mark.process
def test_cli_download_without_network_blames_the_network(tmp_path: Path) -> None:
    """The real huggingface_hub, offline (HF_HUB_OFFLINE=1: what it does when the Hub cannot
    be reached, without the retries): the error names the network, not the repository."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": TOKEN}
    r = subprocess.run(
        [sys.executable, "-m", "ftslurm", "assets", "download", "--dest", str(tmp_path / "dl")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("Error: cannot download tokenizer.json from huggingface.co")
    assert "check the network" in r.stderr and TOKEN not in r.stderr


def test_download_fails_at_once_when_the_hub_does_not_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No DNS for the Hub: one line at once, instead of huggingface_hub's five retries (~24 s);
    behind a proxy the name is the proxy's business and the download is tried."""
    import huggingface_hub

    fake = _raiser(_hub_error("GatedRepoError", 403))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.setenv("HF_ENDPOINT", "https://no-such-host.invalid")
    for var in (*assets._PROXY_VARS, "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError, match=r"cannot resolve no-such-host\.invalid .*HTTPS_PROXY"):
        assets.download_tokenizer(tmp_path / "dl", TOKEN)
    assert not fake.calls
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    with pytest.raises(UserError, match="gated"):
        assets.download_tokenizer(tmp_path / "dl", TOKEN)
    assert [c["token"] for c in fake.calls] == [TOKEN]  # with a proxy, the hub is asked once
    monkeypatch.setenv("HF_ENDPOINT", "not a url")
    with pytest.raises(UserError, match="HF_ENDPOINT='not a url' is not a URL"):
        assets.download_tokenizer(tmp_path / "dl", TOKEN)


def test_cli_download_gated_is_one_line_without_token_echo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    from ftslurm.commands.assets import assets as group

    fake = _raiser(_hub_error("GatedRepoError", 403))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    result = CliRunner().invoke(  # localhost: the name resolves on any machine
        group, ["download", "--dest", str(tmp_path)],
        env={"HF_TOKEN": TOKEN, "HF_ENDPOINT": "https://localhost"},
    )  # fmt: skip
    assert isinstance(result.exception, UserError)
    assert "gated" in str(result.exception) and TOKEN not in str(result.exception)
    assert TOKEN not in result.output
    assert fake.calls and fake.calls[0]["token"] == TOKEN


def test_make_local_builds_small_deterministic_assets(tmp_path: Path) -> None:
    a_tok, a_data = assets.make_local(tmp_path / "a", limit_chars=300_000)
    b_tok, b_data = assets.make_local(tmp_path / "b", limit_chars=300_000)
    assert (a_data / "data.jsonl").read_bytes() == (b_data / "data.jsonl").read_bytes()
    assert (a_tok / "tokenizer.json").read_bytes() == (b_tok / "tokenizer.json").read_bytes()
    rows = [json.loads(ln) for ln in (a_data / "data.jsonl").read_text().splitlines()]
    assert len(rows) > 50 and all(set(r) == {"text"} and r["text"].strip() for r in rows)

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(a_tok / "tokenizer.json"))
    assert tok.get_vocab_size() < 2048
    assert tok.token_to_id(assets.BOS) is not None and tok.token_to_id(assets.EOS) is not None
    ids = tok.encode("def main() -> None:\n    return 1\n").ids
    assert max(ids) < 2048
    assert tok.decode(ids) == "def main() -> None:\n    return 1\n"
    config = json.loads((a_tok / "tokenizer_config.json").read_text())
    assert config["bos_token"] == assets.BOS and config["eos_token"] == assets.EOS


def test_torchtitan_loads_the_local_tokenizer(tmp_path: Path) -> None:
    tok_dir, _ = assets.make_local(tmp_path, limit_chars=200_000)
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    tok = HuggingFaceTokenizer(str(tok_dir))
    ids = tok.encode("hello world", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.get_vocab_size() < 2048


def test_launcher_builds_missing_local_assets_once(tmp_path: Path) -> None:
    from ftslurm.replica.launcher import job

    job._ensure_cpu_assets(tmp_path)
    tok = tmp_path / "assets" / "local" / "tokenizer" / "tokenizer.json"
    data = tmp_path / "assets" / "local" / "dataset" / "data.jsonl"
    assert tok.exists() and data.exists()
    stamp = tok.stat().st_mtime_ns
    job._ensure_cpu_assets(tmp_path)  # present: not rebuilt
    assert tok.stat().st_mtime_ns == stamp


def test_dest_that_cannot_be_a_folder_is_one_line(tmp_path: Path) -> None:
    from ftslurm.cli import cli

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for argv in (["make-local", "--dest", str(blocker / "sub")],
                 ["download", "--dest", str(blocker / "sub")]):  # fmt: skip
        r = CliRunner().invoke(cli, ["assets", *argv], env={"HF_TOKEN": TOKEN})
        assert isinstance(r.exception, UserError), r.output
        assert f"cannot create the folder {blocker / 'sub'}" in str(r.exception)


def test_gpu_launcher_without_the_tokenizer_stops_before_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEVICE=cuda and no downloaded tokenizer: one line naming the download, exit 2 (not a
    crash that every FT requeue repeats); a folder given in FTSLURM_EXTRA_ARGS wins."""
    from ftslurm.replica import plan as planlib
    from ftslurm.replica.launcher import job

    monkeypatch.setenv("FTSLURM_PROJECT", str(tmp_path))
    env = {"FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1", "FTSLURM_TORCHRUN": "false"}
    with pytest.raises(UserError, match=r"tokenizer missing: .*/assets/hf/Llama-3\.1-8B/"
                       r"tokenizer\.json.*ftslurm assets download"):  # fmt: skip
        job.main(["job"], env)
    mine = tmp_path / "my-tokenizer"
    mine.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (mine / name).write_text("{}")
    for given in (f"--model.hf_assets_path={mine}", f"--model.hf-assets-path={mine}",
                  f"--model.hf_assets_path {mine}"):  # fmt: skip
        plan = planlib.build_ft_plan({**env, "FTSLURM_EXTRA_ARGS": given}, tmp_path)
        job._check_tokenizer(plan)  # present: nothing said, in every form tyro takes
    assert planlib.flag_values(["--model.hf_assets_path"], "--model.hf_assets_path") == []
