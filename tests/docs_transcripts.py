"""The report transcripts in README.md and docs/demo.md, rendered from a recorded real run.

A transcript printed by hand drifts from the code: the docs showed a report whose goodput
line the report had long stopped printing. So each transcript is the fenced block between

    <!-- report-transcript: tests/fixtures/report/<run> [from="<text>" to="<text>"] -->
    <!-- /report-transcript -->

and holds what `ftslurm report <run>` prints at the current code: whole, or cut to the lines
from the first one holding `from` to the first one after it holding `to`, a `...` line
standing for each part cut. tests/test_docs_transcripts.py renders each one again and
compares; after a change of the report's text, write them anew:

    python -m tests.docs_transcripts --write

and commit the docs' diff with the change that explains it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests import clirun

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "demo.md")
CUT = "..."
OPEN = re.compile(r"^<!-- report-transcript: (?P<run>\S+)(?P<opts>(?: \w+=\"[^\"]*\")*) -->$")
CLOSE = "<!-- /report-transcript -->"
OPTION = re.compile(r" (\w+)=\"([^\"]*)\"")


class TranscriptError(Exception):
    """A marker that cannot be rendered: unclosed, an unknown option, a cut whose line is gone."""


@dataclass(frozen=True)
class Marker:
    """One transcript's opening comment: the run (relative to the repository root) and the
    cut, if any."""

    run: str
    start: str | None = None
    end: str | None = None


def parse_marker(line: str) -> Marker | None:
    """The marker on `line`, or None when the line opens no transcript."""
    m = OPEN.match(line)
    if not m:
        return None
    opts = dict(OPTION.findall(m["opts"]))
    unknown = set(opts) - {"from", "to"}
    if unknown:
        raise TranscriptError(f"unknown option(s) {sorted(unknown)} in {line!r}")
    return Marker(m["run"], opts.get("from"), opts.get("to"))


def render(run: str) -> str:
    """`ftslurm report <run>` as a user sees it, in this process (paths stay relative to the
    repository root, the caller's working directory); a failing report is an error here."""
    result = clirun.invoke("report", run, env={"COLUMNS": "100", "NO_COLOR": "1"})
    if result.exit_code != 0:
        raise TranscriptError(f"ftslurm report {run} exited {result.exit_code}: "
                              f"{result.output}{result.exception!r}")
    return result.output


def cut(lines: list[str], start: str | None, end: str | None) -> list[str]:
    """`lines` from the first holding `start` to the first after it holding `end` (both
    kept), with `...` where lines were left out before or after."""
    first = 0 if start is None else _find(lines, start, 0)
    last = len(lines) - 1 if end is None else _find(lines, end, first)
    return ([CUT] if first > 0 else []) + lines[first:last + 1] + (
        [CUT] if last < len(lines) - 1 else [])


def _find(lines: list[str], text: str, at: int) -> int:
    for i in range(at, len(lines)):
        if text in lines[i]:
            return i
    raise TranscriptError(f"no report line holds {text!r} (the cut's anchor is gone)")


def block(marker: Marker, report: Callable[[str], str] = render) -> list[str]:
    """The fenced block a marker stands for: the command, then its output (cut)."""
    out = report(marker.run).splitlines()
    return ["```", f"$ ftslurm report {marker.run}", *cut(out, marker.start, marker.end), "```"]


def rewrite(text: str, report: Callable[[str], str] = render) -> str:
    """`text` with every transcript block replaced by its rendering now."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        marker = parse_marker(lines[i])
        i += 1
        if marker is None:
            continue
        try:
            close = lines.index(CLOSE, i)
        except ValueError:
            raise TranscriptError(f"{marker.run}: no {CLOSE} after its marker") from None
        out += [*block(marker, report), CLOSE]
        i = close + 1
    return "\n".join(out)


def markers(text: str) -> list[Marker]:
    return [m for line in text.split("\n") if (m := parse_marker(line)) is not None]


def stale(pages: tuple[Path, ...] = PAGES) -> list[Path]:
    """The pages whose transcripts differ from what the report prints now."""
    return [p for p in pages if rewrite(p.read_text()) != p.read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the transcripts in place")
    args = parser.parse_args(argv)
    import os

    os.chdir(ROOT)
    if args.write:
        for page in PAGES:
            page.write_text(rewrite(page.read_text()))
        print(f"wrote the transcripts of {', '.join(str(p.relative_to(ROOT)) for p in PAGES)}")
        return 0
    differ = stale()
    print("\n".join(str(p.relative_to(ROOT)) for p in differ) or "all equal")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
