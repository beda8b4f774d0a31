"""Golden outputs of the CLI and of the log readers on every recorded run fixture.

A refactor that moves code between modules must not change what a user sees: the report (text
and JSON) of each recorded run, `logs` over it, what `status` reads from each replica log, and
every command's `--help`. `tests/test_golden_cli.py` renders each case and compares it with the
file recorded under tests/golden/; after an intended change of output, record them again:

    python -m tests.golden_cli --write

and commit the diff of tests/golden/ with the change that explains it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from ftslurm import status as st
from ftslurm.cli import cli

ROOT = Path(__file__).resolve().parent
FIXTURES = ROOT / "fixtures"
GOLDEN = ROOT / "golden"
# the recorded runs: every folder of replica logs (tft-<job>_<i>.out, maybe gzipped)
RUN_PARENTS = (FIXTURES / "report", FIXTURES / "multirank")
BASELINE = {"slurm-tft-11": "slurm-control-tft-6"}  # runs recorded with a control beside them


def runs() -> list[Path]:
    return sorted(d for parent in RUN_PARENTS for d in parent.iterdir()
                  if d.is_dir() and any(d.glob("*.out*")))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT.parent))


def _cli(args: list[str]) -> str:
    """Run the CLI in this process from the repository root (paths in the output stay
    relative); the exit code is part of the output."""
    result = CliRunner().invoke(cli, args, prog_name="ftslurm", catch_exceptions=False,
                                env={"COLUMNS": "100", "NO_COLOR": "1"})
    return f"$ ftslurm {' '.join(args)}\n[exit {result.exit_code}]\n{result.output}"


def _metrics(rel: str, state_dir: Path) -> str:
    """One scrape of `metrics show` over the run, no Lighthouse (an empty state dir); the
    sample of how long the read took is the one that varies, so it is left out."""
    text = _cli(["metrics", "show", rel, "--state-dir", str(state_dir)])
    text = text.replace(str(state_dir), "EMPTY-STATE-DIR")
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("ftslurm_report_build_seconds "))


def _log_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", "replace")


def _status_tails(run: Path) -> str:
    """What `ftslurm status` reads from each replica log's tail (progress, loss, ranks)."""
    out = {}
    for log in sorted(run.glob("*.out*")):
        summary = st.summarize_tail(_log_text(log)[-st.TAIL_BYTES:])
        out[log.name] = {k: v for k, v in dataclasses.asdict(summary).items()
                         if k not in ("path", "mtime")}
    return json.dumps(out, indent=1, sort_keys=True, default=str) + "\n"


def _commands(group: click.Group, prefix: list[str]) -> Iterator[list[str]]:
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        yield [*prefix, name]
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, [*prefix, name])


def cases(state_dir: Path | None = None) -> dict[str, Callable[[], str]]:
    """Case name (the golden file's name) -> a function rendering its output; `state_dir`
    is an empty folder standing for "no managed Lighthouse"."""
    empty = state_dir or ROOT / "golden-no-lighthouse"
    out: dict[str, Callable[[], str]] = {}
    for run in runs():
        rel = _rel(run)
        out[f"report-{run.name}.txt"] = lambda rel=rel: _cli(["report", rel])
        out[f"report-{run.name}.json"] = lambda rel=rel: _cli(["report", rel, "--json"])
        out[f"logs-{run.name}.txt"] = lambda rel=rel: _cli(
            ["logs", "--run-dir", rel, "-n", "3", "--no-color"])
        out[f"status-tail-{run.name}.json"] = lambda run=run: _status_tails(run)
        out[f"metrics-{run.name}.txt"] = lambda rel=rel: _metrics(rel, empty)
        if run.name in BASELINE:
            base = _rel(run.parent / BASELINE[run.name])
            out[f"report-{run.name}-baseline.json"] = lambda rel=rel, base=base: _cli(
                ["report", rel, "--baseline", base, "--json"])
    for cmd in [[], *_commands(cli, [])]:
        name = "-".join(cmd) or "main"
        out[f"help-{name}.txt"] = lambda cmd=cmd: _cli([*cmd, "--help"])
    return out


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record tests/golden/ anew")
    args = parser.parse_args(argv)
    import os

    os.chdir(ROOT.parent)
    GOLDEN.mkdir(exist_ok=True)
    differ = []
    import tempfile

    empty = Path(tempfile.mkdtemp(prefix="golden-"))
    for name, render in cases(empty).items():
        text = render()
        path = GOLDEN / name
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            differ.append(name)
    if args.write:
        stale = sorted(p.name for p in GOLDEN.iterdir() if p.name not in cases())
        for name in stale:
            (GOLDEN / name).unlink()
        removed = f"; removed {stale}" if stale else ""
        print(f"wrote {len(cases())} files to {_rel(GOLDEN)}{removed}")
        return 0
    print("\n".join(differ) or "all equal")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main_())
