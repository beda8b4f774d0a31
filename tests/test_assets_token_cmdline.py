"""`ftslurm assets download --token-file FILE` (or `-`, standard input) keeps the Hugging Face
token off the command line while it downloads: a fake huggingface_hub records the token it is
given and the /proc/self/cmdline of the process that calls it, which never holds the token;
`--token` with `--token-file` is one error line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.clirun import ftslurm, invoke

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[1]


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
