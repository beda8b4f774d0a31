"""As root, `ftslurm submit` neither creates nor uses a log folder that is a symbolic link or
belongs to another user: with `--chdir` into another user's folder, root followed an
`outputs` link planted there and created the log folders wherever it pointed (and root's job
would then write its logs there). Refused in one line, before anything is made or sbatch
runs; a user's own link (outputs on scratch storage) still works for that user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ftslurm import paths, submission
from ftslurm.errors import UserError
from tests.clirun import FakeBin, ftslurm, one_error_line

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(os.geteuid() != 0, reason="plants folders of another user: needs root"),
]

ROOT = Path(__file__).resolve().parent.parent
FT = ROOT / paths.FT_SCRIPT
NOBODY = 65534


def _request(job_dir: Path, outputs: Path) -> submission.SubmitRequest:
    env = {"PATH": os.environ["PATH"]}
    return submission.SubmitRequest(str(FT), [f"--chdir={job_dir}", "--array=0-1"], env=env,
                                    outputs=outputs)  # fmt: skip


def _theirs(tmp_path: Path) -> Path:
    """A folder of another user (nobody), as --chdir."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    return theirs


def test_a_planted_outputs_link_in_the_job_dir_is_refused(tmp_path: Path) -> None:
    theirs, target = _theirs(tmp_path), tmp_path / "target"
    target.mkdir()
    (theirs / "outputs").symlink_to(target)
    with pytest.raises(UserError) as e:
        submission.plan(_request(theirs, tmp_path / "o"))
    text = str(e.value)
    assert "\n" not in text and f"refusing to use {theirs / 'outputs'} as a log folder" in text
    assert "symbolic link" in text, text
    assert list(target.iterdir()) == [] and not (tmp_path / "o").exists()


def test_an_outputs_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = _theirs(tmp_path)
    (theirs / "outputs").mkdir()
    os.chown(theirs / "outputs", NOBODY, NOBODY)
    with pytest.raises(UserError, match=f"belongs to uid {NOBODY}"):
        submission.plan(_request(theirs, tmp_path / "o"))
    assert not (theirs / "outputs" / "torchft").exists()


def test_a_link_below_the_outputs_folder_is_refused(tmp_path: Path) -> None:
    job, target = tmp_path / "job", tmp_path / "target"
    (job / "outputs").mkdir(parents=True)
    target.mkdir()
    (job / "outputs" / "torchft").symlink_to(target)
    with pytest.raises(UserError, match="torchft as a log folder as root: it is a symbolic link"):
        submission.plan(_request(job, tmp_path / "o"))


def test_the_outputs_folder_of_the_runs_is_checked_too(tmp_path: Path) -> None:
    """FTSLURM_OUTPUTS (here the request's `outputs`): its `torchft` folder a planted link."""
    job, outputs, target = tmp_path / "job", tmp_path / "o", tmp_path / "target"
    job.mkdir()
    outputs.mkdir()
    target.mkdir()
    (outputs / "torchft").symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        submission.plan(_request(job, outputs))
    os.chown(target, NOBODY, NOBODY)
    (outputs / "torchft").unlink()
    target.rename(outputs / "torchft")  # a real folder now, of another user
    with pytest.raises(UserError, match=f"belongs to uid {NOBODY}"):
        submission.plan(_request(job, outputs))


def test_a_link_planted_after_the_plan_is_refused_before_sbatch(tmp_path: Path) -> None:
    theirs, target = _theirs(tmp_path), tmp_path / "target"
    target.mkdir()
    planned = submission.plan(_request(theirs, tmp_path / "o"))
    (theirs / "outputs").symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        submission.run(planned)  # refused before sbatch: no process starts in this unit test
    assert list(target.iterdir()) == []


def test_roots_own_folders_are_made_and_used(tmp_path: Path) -> None:
    theirs = _theirs(tmp_path)  # root may still make its own outputs in it
    folders = submission.plan(_request(theirs, tmp_path / "o")).folders
    for folder in folders:
        submission.check_log_dir(folder)
    assert [f.path for f in folders] == [theirs / "outputs" / "torchft", tmp_path / "o" / "torchft"]


def test_a_users_own_link_is_theirs_to_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: an outputs link to scratch storage is the user's own set-up."""
    job, scratch = tmp_path / "job", tmp_path / "scratch"
    job.mkdir()
    scratch.mkdir()
    (job / "outputs").symlink_to(scratch)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    submission.plan(_request(job, tmp_path / "o"))


@pytest.mark.process
def test_submit_says_it_in_one_line(tmp_path: Path, fake_bin: FakeBin) -> None:
    ran = tmp_path / "sbatch-ran"
    fake_bin.add("sbatch", f"touch {ran}\necho 42\n")
    theirs, target = _theirs(tmp_path), tmp_path / "target"
    target.mkdir()
    (theirs / "outputs").symlink_to(target)
    r = ftslurm("submit", f"--chdir={theirs}", "--array=0-1", str(FT), cwd=tmp_path, timeout=60)
    line = one_error_line(r)
    assert line.startswith(f"Error: refusing to use {theirs / 'outputs'} as a log folder"), line
    assert not ran.exists() and list(target.iterdir()) == []
