"""The README is the front door and docs/ holds the rest: every relative link in README.md and
docs/*.md must reach a file (and, for `page.md#anchor`, a heading of that page), the README
stays short, and `.ci/run` still finds the README's test command where it looks for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200
# `[text](target)` and `![alt](target)`, target without spaces; an optional "title" after it
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def links(text: str) -> list[str]:
    """The link targets of Markdown text, outside code blocks and inline code."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to `-`."""
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", FENCE.sub("", text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug)
    return out


def broken(page: Path) -> list[str]:
    """`page`'s relative links that reach nothing."""
    bad = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no such file: {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            bad.append(f"{target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken(page) == []


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-heading-here) [web](https://x.invalid/y)\n"
                    "[gone](missing.md) [bad anchor](there.md#nowhere)\n"
                    "```\n[in code](not-checked.md)\n```\n`[inline](not-checked.md)`\n")
    assert [b.split(" ")[0] for b in broken(page)] == ["missing.md", "there.md#nowhere"]


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move text to docs/"


def test_ci_finds_the_readme_test_command() -> None:
    """`.ci/run` runs the line after `# 2. Run the tests` (its sed); that line must be the
    full suite's command, installing what it needs first."""
    assert "/^# 2\\. Run the tests/{n;p;q}" in (ROOT / ".ci/run").read_text()
    lines = (ROOT / "README.md").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("# 2. Run the tests"))
    cmd = lines[at + 1]
    assert cmd.startswith("apt-get update && apt-get install -y slurm-wlm munge")
    assert cmd.endswith("&& pytest -ra && python -m tests.second_stack -ra"), (
        "CI runs the whole suite, then its tier on the second stack (tests/second_stack.py)")
