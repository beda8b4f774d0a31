"""Comments and docstrings of `ftslurm/` point only where a reader of this repository can go.

Why: a comment explains why the code is as it is now; its history belongs in commit messages.
This project's own issue numbers (`issue N`, `(issue N)`, `#N`) and paths into a notes folder
outside the repository (`../shared/notes/...`) are references nobody with a clone can follow.
A public upstream reference names its project (`torchtitan issue N`,
`pytorch/torchtitan#N`) and stays allowed; so do files of this repository (`docs/*.md`,
a module).

A story of the past is flagged too: a date (`YYYY-MM-DD`, "on <date> it did ...") and "seen in
CI", since a comment states the present reason (keeping the figure that explains a choice) and
the day something happened is history. A date inside backquotes (a constant's value), a
timestamp of an example log line (the date followed by a time) and a date in a path
(`docs/cpu/<date>/`) are not a story.

Comments are read with `tokenize`, docstrings (module, class, function) with `ast`; string
literals in code are not looked at (a log line may quote anything). Files that still had hits
when this check was written are listed in ALLOWED with their count: a listed file may only go
down (lower its count, or drop it, as its comments are swept); any other file must have none.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ftslurm"

# the word before `issue N` that makes it an upstream reference: a public project, or owner/repo
_UPSTREAM = (
    r"(?:torchtitan|torchft|pytorch|torch|slurm|schedmd|tokio|huggingface_hub|transformers"
    r"|prometheus|click|cpython|python|[\w.-]+/[\w.-]+)"
)
_ISSUE = re.compile(r"(?i)(?<![\w/])(?:(" + _UPSTREAM + r")(?:'s)?\s+)?issues?\s+#?\d+")
# `#N` alone; `owner/repo#N` is upstream; `#1f77b4` (a colour) is not a number
_HASH = re.compile(r"(?<![\w&/#])([\w.-]+/[\w.-]+)?#\d+\b")
_NOTES = re.compile(r"(?:\.\./)?shared/notes|(?<![\w/-])notes/[\w.-]+\.md")

# file (relative to the repository) -> hits it still has; lower these as files are swept
ALLOWED: dict[str, int] = {}

# file -> dates and "seen in CI"s it still has (story_refs); lower these as files are swept
ALLOWED_STORIES: dict[str, int] = {}

# swept: these must never enter ALLOWED or ALLOWED_STORIES
SWEPT = (
    "ftslurm/report/render.py", "ftslurm/report/clock.py", "ftslurm/report/heals.py",
    "ftslurm/report/goodput.py", "ftslurm/report/reader.py", "ftslurm/report/events.py",
    "ftslurm/event_log.py", "ftslurm/versions.py",
    "ftslurm/report/sources.py", "ftslurm/report/restarts.py", "ftslurm/report/__init__.py",
    "ftslurm/slurm/parse.py", "ftslurm/slurm/args.py", "ftslurm/textsafe.py",
    "ftslurm/safefile.py", "ftslurm/logfile.py", "ftslurm/errors.py",
    "ftslurm/lighthouse/config.py", "ftslurm/lighthouse/address.py",
    "ftslurm/lighthouse/command.py", "ftslurm/lighthouse/ports.py", "ftslurm/cluster/config.py",
    "ftslurm/replica/slots.py", "ftslurm/replica/assets.py", "ftslurm/replica/launcher/watchdog.py",
    "ftslurm/replica/config_error.py", "ftslurm/replica/launcher/attempt_guard.py",
    "ftslurm/replica/worker/early_sync.py", "ftslurm/replica/worker/fixes.py",
    "ftslurm/replica/worker/diloco_state.py",
    "ftslurm/replica/launcher/preflight.py",
    "ftslurm/replica/launcher/lifecycle.py", "ftslurm/replica/launcher/failure_history.py",
    "ftslurm/failure_modes.py", "ftslurm/replica/handoff.py", "ftslurm/report/live.py",
    "ftslurm/replica/worker/train.py", "ftslurm/replica/launcher/warm_restart.py",
    "ftslurm/knobs.py",
    "ftslurm/wait.py",
)  # fmt: skip


def comment_texts(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment (without its `#`) and every module, class and function
    docstring of `source`."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string[1:]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc


def history_refs(text: str) -> list[str]:
    """The references in `text` a reader of this repository cannot follow."""
    found = [m.group(0) for m in _ISSUE.finditer(text) if not m.group(1)]
    found += [m.group(0) for m in _HASH.finditer(text) if not m.group(1)]
    found += [m.group(0) for m in _NOTES.finditer(text)]
    return found


def hits(source: str) -> list[tuple[int, str]]:
    return [(line, ref) for line, text in comment_texts(source) for ref in history_refs(text)]


# backquoted spans (may wrap a line); a date then counts only outside them
_TICKS = re.compile(r"`[^`]*`")
# a date that is not part of a word or path, and not a timestamp's (a time follows it)
_DATE = re.compile(r"(?<![\w/.-])\d{4}-\d{2}-\d{2}(?![\w/-])(?!T\d|\s+\d\d:\d\d)")
_SEEN_IN_CI = re.compile(r"(?i)\bseen in CI\b")


def story_refs(text: str) -> list[str]:
    """The dates and "seen in CI"s of `text` that tell when something happened."""
    bare = _TICKS.sub("``", text)
    return [m.group(0) for m in _DATE.finditer(bare)] + [
        m.group(0) for m in _SEEN_IN_CI.finditer(bare)
    ]


def story_hits(source: str) -> list[tuple[int, str]]:
    return [(line, ref) for line, text in comment_texts(source) for ref in story_refs(text)]


def package_hits(
    find: Callable[[str], list[tuple[int, str]]] = hits,
) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        found = find(path.read_text(encoding="utf-8"))
        if found:
            out[path.relative_to(ROOT).as_posix()] = found
    return out


@pytest.mark.parametrize("text", [
    "see issue 12", "(issue 29)", "Issue 9, parts 2 and 3", "issue 28 item 3", "issues 4 and 5",
    "the goal of #44", "from ../shared/notes/slurm-minicluster.md", "shared/notes/x.md",
    "shape from notes/torchtitan-cpu.md", "this issue 7", "issue #7",
])  # fmt: skip
def test_a_reference_nobody_can_follow_is_found(text: str) -> None:
    assert history_refs(text), text


@pytest.mark.parametrize("text", [
    "torchtitan issue 4754", "torchft's issue 12", "pytorch/torchtitan#4686", "torchtitan PR 4686",
    "colour #1f77b4", "#9467bd", "reboot_issued", "docs/benchmarks-cpu.md", "fix 9 (fixes.py)",
    "an issue with NFS", "Slurm issue 1234", "`%N|%T`", "noqa: E501", "replica 28",
])  # fmt: skip
def test_an_upstream_or_in_repository_reference_is_allowed(text: str) -> None:
    assert not history_refs(text), text


def test_comments_and_docstrings_are_read_but_not_code_strings() -> None:
    source = (
        '"""Module (issue 1)."""\n'
        "x = 'issue 2'  # see issue 3\n"
        "class C:\n"
        '    """shared/notes/c.md"""\n'
        "    def f(self):\n"
        '        """#4"""\n'
        "        return 'shared/notes/not-a-comment.md'\n"
    )
    assert sorted(hits(source)) == [(1, "issue 1"), (2, "issue 3"), (4, "shared/notes"), (6, "#4")]


def test_swept_files_stay_clean() -> None:
    assert not set(SWEPT) & set(ALLOWED)


def test_no_issue_numbers_or_notes_paths_in_comments() -> None:
    over = {f: found for f, found in package_hits().items() if len(found) > ALLOWED.get(f, 0)}
    assert not over, (
        "comments/docstrings cite this project's issues or notes outside the repository; say "
        "why the code is as it is now, point to a file here or to a public upstream issue "
        "(`torchtitan issue N`, `owner/repo#N`) instead:\n"
        + "\n".join(
            f"  {f}:{line}: {ref}  (allowed {ALLOWED.get(f, 0)})"
            for f, found in over.items()
            for line, ref in found
        )
    )


@pytest.mark.parametrize("text", [
    "Seen in CI on 2026-11-26 (8 replicas)", "seen in CI", "(Until 2026-11-25 it asked after one "
    "inner step)", "measured 2026-11-27: 3.05 s", "on 2026-11-25\nit asked",
])  # fmt: skip
def test_a_story_of_the_past_is_found(text: str) -> None:
    assert story_refs(text), text


@pytest.mark.parametrize("text", [
    "`2000-01-01`: no log is older", "`[titan] 2026-11-23\n10:10:51,647`",
    '{"time": "2026-11-23T08:51:02.461+00:00"', "[2025-07-16 13:51:42]  launching replica 1",
    "docs/cpu/2026-11-27/checkpoint/", "on CPU this costs ~1.1 s", "a run seen in the logs",
    "FT_MAX_REQUEUES=2026", "1-2-3",
])  # fmt: skip
def test_a_constant_a_line_shape_or_a_path_is_no_story(text: str) -> None:
    assert not story_refs(text), text


def test_stories_are_read_in_comments_and_docstrings() -> None:
    source = (
        '"""Module."""\n'
        "x = 'seen in CI on 2026-11-26'  # seen in CI\n"
        "def f():\n"
        '    """Until 2026-11-25 it waited."""\n'
    )
    assert sorted(story_hits(source)) == [(2, "seen in CI"), (4, "2026-11-25")]


def test_swept_files_tell_no_story() -> None:
    assert not set(SWEPT) & set(ALLOWED_STORIES)


def test_no_dates_or_seen_in_ci_in_comments() -> None:
    found = package_hits(story_hits)
    over = {f: refs for f, refs in found.items() if len(refs) > ALLOWED_STORIES.get(f, 0)}
    assert not over, (
        'comments/docstrings tell when something happened (a date, "seen in CI"); say why the '
        "code is as it is now (a figure may stay) and leave the day to the commit message; a "
        "constant's date goes in backquotes:\n"
        + "\n".join(
            f"  {f}:{line}: {ref}  (allowed {ALLOWED_STORIES.get(f, 0)})"
            for f, refs in over.items()
            for line, ref in refs
        )
    )
