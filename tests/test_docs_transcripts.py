"""The report transcripts in README.md and docs/demo.md are what `ftslurm report` prints now
for the recorded run each names (tests/docs_transcripts.py): a hand-pasted transcript showed a
goodput line the report no longer printed. After an intended change of the report's text:
`python -m tests.docs_transcripts --write`, and commit the docs' diff with the change."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests import docs_transcripts as dt

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _fake_report(run: str) -> str:
    return (f"Run: {run}\nSummary\n  failures 2\n  goodput 50.0%\n  false quorum drops 0\n"
            "\nParsed: 9\n")


@pytest.mark.parametrize("page", dt.PAGES, ids=lambda p: str(p.relative_to(dt.ROOT)))
def test_every_page_shows_a_recorded_run_report(page: Path) -> None:
    found = dt.markers(page.read_text())
    assert found, f"{page.name} has no <!-- report-transcript: RUN --> block"
    for marker in found:
        assert (dt.ROOT / marker.run).is_dir(), f"{marker.run}: no such recorded run"
        assert marker.run.startswith(("tests/fixtures/", "docs/cpu/", "docs/gpu/"))


@pytest.mark.parametrize("page", dt.PAGES, ids=lambda p: str(p.relative_to(dt.ROOT)))
def test_transcript_equals_the_report_now(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(dt.ROOT)
    text = page.read_text()
    now = dt.rewrite(text)
    diff = "".join(difflib.unified_diff(text.splitlines(True), now.splitlines(True),
                                        "in the page", "report now", n=2))
    assert now == text, (f"{page.name}'s transcript differs from the report "
                         f"(python -m tests.docs_transcripts --write if meant):\n{diff}")


def test_the_demo_page_shows_the_whole_report_and_the_readme_its_summary_end() -> None:
    demo = dt.markers((dt.ROOT / "docs" / "demo.md").read_text())
    readme = dt.markers((dt.ROOT / "README.md").read_text())
    assert [(m.start, m.end) for m in demo] == [(None, None)]
    assert readme and all(m.start and m.end for m in readme)


def test_a_stale_block_is_rewritten_and_other_text_kept() -> None:
    page = ("intro\n<!-- report-transcript: tests/fixtures/report/x -->\n```\n"
            "  goodput 99.0%\n```\n<!-- /report-transcript -->\noutro\n")
    now = dt.rewrite(page, _fake_report)
    assert now != page
    assert now == ("intro\n<!-- report-transcript: tests/fixtures/report/x -->\n```\n"
                   "$ ftslurm report tests/fixtures/report/x\nRun: tests/fixtures/report/x\n"
                   "Summary\n  failures 2\n  goodput 50.0%\n  false quorum drops 0\n\nParsed: 9\n"
                   "```\n<!-- /report-transcript -->\noutro\n")
    assert dt.rewrite(now, _fake_report) == now


def test_a_cut_keeps_its_lines_and_marks_what_it_left_out() -> None:
    page = ('<!-- report-transcript: r from="failures" to="goodput" -->\n'
            "<!-- /report-transcript -->\n")
    assert dt.rewrite(page, _fake_report).split("\n")[1:-2] == [
        "```", "$ ftslurm report r", "...", "  failures 2", "  goodput 50.0%", "...", "```"]
    whole = dt.cut(["a", "b"], "a", "b")
    assert whole == ["a", "b"]


def test_a_cut_whose_line_is_gone_an_unclosed_block_and_an_unknown_option_are_errors() -> None:
    with pytest.raises(dt.TranscriptError, match="anchor is gone"):
        dt.rewrite('<!-- report-transcript: r from="steps: 118.8%" -->\n'
                   "<!-- /report-transcript -->\n", _fake_report)
    with pytest.raises(dt.TranscriptError, match="no <!-- /report-transcript -->"):
        dt.rewrite("<!-- report-transcript: r -->\n```\n```\n", _fake_report)
    with pytest.raises(dt.TranscriptError, match="unknown option"):
        dt.parse_marker('<!-- report-transcript: r lines="1-3" -->')
