"""What `ftslurm logs` and `ftslurm status` print of text they did not write (log lines, job
names from file names, node names and reasons from Slurm, replica ids from the Lighthouse) is
shown escaped, never sent raw to the terminal: a window title (OSC), a clear screen (CSI), a
bell or a cursor move is text; tabs stay tabs; torchtitan's colour codes are dropped."""

from __future__ import annotations

import os

import pytest

from ftslurm import status as st
from tests.clirun import invoke
from tests.log_inputs import STEP_LINE, run_dir

# the managed Lighthouse's log, the event log and outputs/ of this checkout stay out of it
pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_user_state")]


def test_logs_shows_terminal_controls_escaped_never_raw(tmp_path):
    """A log line that sets the window title (OSC), clears the screen (CSI), rings the bell or
    moves the cursor back is shown as text; tabs stay tabs; torchtitan's colour codes are
    dropped (they colour, they say nothing)."""
    hostile = (
        b"[titan] 2026-11-23 10:00:01,000 - x - INFO - \x1b]0;owned\x07title\x1b[2Jclear"
        b" bell\x07 back\x08 cr\rend \xc2\x9b6n c1\ttab\n"
        b"[titan] 2026-11-23 10:00:02,000 - root - INFO - \x1b[31mstep: 3  \x1b[32mloss:  2.5"
        b"\x1b[39m\n"
    )
    run = run_dir(tmp_path, {0: hostile})
    for colour in ("--no-color", "--color"):
        r = invoke("logs", "--run-dir", str(run), "-n", "5", colour)
        assert r.exit_code == 0, r.output
        first, second = r.output.splitlines()
        body = first[first.index("[titan]") :]  # after the prefix (coloured with --color)
        assert "\x1b" not in body and "\x07" not in body and "\x08" not in body
        assert "\r" not in body and "\x9b" not in body
        assert "\\x1b]0;owned\\x07title\\x1b[2Jclear bell\\x07 back\\x08 cr\\x0dend " in body
        assert "\\x9b6n c1\ttab" in body  # C1 CSI escaped, the tab kept
        assert second.endswith("- root - INFO - step: 3  loss:  2.5")


def test_logs_notes_escape_job_names_from_file_names(tmp_path):
    """Job names come from file names, which may hold anything a shell lets one create."""
    run = tmp_path / "copy"
    run.mkdir()
    (run / "tft-11_0.out").write_text(STEP_LINE.format(i=1) + "\n")
    (run / "tft-1\x1b[2J_0.out").write_text(STEP_LINE.format(i=1) + "\n")
    os.utime(run / "tft-11_0.out", (1e9, 1e9))  # the other job is the newest
    r = invoke("logs", "--run-dir", str(run), "-n", "1")
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stderr and "showing job 1\\x1b[2J, the newest" in r.stderr


def test_status_table_escapes_what_it_did_not_write():
    row = st.Row(0, "RUNNING", "bad\x07reason", "node\x1b]0;x\x07", 1, 1, 5, 2.0, 1.0, 3, "")
    quorum = st.Quorum(True, "lh:29510", 4, ["evil\x1b[2J_0:uuid"], "ok", 1)
    text = st.render_table(7, [row], quorum)
    assert "\x1b" not in text and "\x07" not in text
    assert "node\\x1b]0;x\\x07" in text and "bad\\x07reason" in text
    assert "(evil\\x1b[2J_0)" in text
