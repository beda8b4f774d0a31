"""The run model's boundary, read from the source: only `ftslurm/run/` (and `logvocab`, which
defines the shapes) reads replica progress from logs. A step or loss pattern, a commit-line
pattern or a log follower anywhere else is a second reader of the same facts, and they drift
(the benches' and tests' own step patterns missed nan losses and coloured lines)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
HOME = ("ftslurm/run/", "ftslurm/logvocab.py")
# torchtitan's step line (`step:` / `loss:` followed by a pattern) and torchft's commit line
# (`should_commit=True` inside a pattern)
_PROGRESS_PATTERN = re.compile(r"(?:step|loss):(?:\\s|\s*\(|\\d)|\\d.*should_commit=True|"
                               r"should_commit=True.*\\d")  # fmt: skip
# logvocab's parsers of progress: only the run model folds lines with them
_PROGRESS_PARSERS = {"STEP", "parse_step_line", "rank_commits", "nproc_per_node",
                     "worker_exited", "last_banner", "COMMIT_OK"}  # fmt: skip
# followers of a growing file: the run model's cursor is the one
_FOLLOWERS = {"Appended", "LogCursor"}
# readers that read other things than progress, with why they stay where they are
KNOWN = {
    "ftslurm/report/reader.py": "the report's byte prefilter of commit lines: a whole-log "
    "event reader, not progress",
    "ftslurm/report/restarts.py": "the report's restart rows: every attempt's steps of the "
    "whole log, through logvocab's STEP",
    "bench/checkpoint_cost.py": "times steps from its own single-process log; not moved yet",
}
# the consumers of progress the run model replaced a reader in: they import it
CONSUMERS = ("bench/soak.py", "bench/gpu_overhead.py", "bench/scale.py", "tests/ftjob.py",
             "tests/test_replica_training.py", "ftslurm/commands/status.py",
             "ftslurm/status.py")  # fmt: skip


def _sources() -> list[str]:
    files = [*ROOT.joinpath("ftslurm").rglob("*.py"), *ROOT.joinpath("bench").glob("*.py"),
             ROOT / "tests" / "ftjob.py", ROOT / "tests" / "test_replica_training.py"]  # fmt: skip
    return sorted(str(f.relative_to(ROOT)) for f in files)


def violations(rel: str, source: str) -> list[str]:
    """What in `source` (the file `rel`) reads progress outside the run model."""
    if rel.startswith(HOME) or rel in KNOWN:
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if _PROGRESS_PATTERN.search(text):
                found.append(f"{rel}:{node.lineno}: a step/loss/commit pattern {text[:60]!r}")
        name = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("logvocab", "L") and node.attr in _PROGRESS_PARSERS:
                name = node.attr
        elif isinstance(node, ast.ImportFrom) and node.module == "ftslurm.logvocab":
            name = next((a.name for a in node.names if a.name in _PROGRESS_PARSERS), None)
        if name:
            found.append(f"{rel}:{node.lineno}: logvocab.{name} (the run model's to use)")
        if isinstance(node, ast.ClassDef) and node.name in _FOLLOWERS:
            found.append(f"{rel}:{node.lineno}: a log follower of its own ({node.name})")
    return found


def test_only_the_run_model_reads_progress_from_logs() -> None:
    bad = [v for rel in _sources() for v in violations(rel, (ROOT / rel).read_text())]
    assert not bad, "\n".join(bad)


def test_a_step_pattern_added_to_status_is_caught() -> None:
    """The check above fails for the regressions it is there for."""
    status = (ROOT / "ftslurm" / "status.py").read_text()
    for added in [
        'import re\nSTEP = re.compile(rb"step:\\s*(\\d+)\\s+loss:\\s*([0-9.]+)")\n',
        'import re\n_C = re.compile(rb"/(\\d{1,6}) - step (\\d{1,18})\\] should_commit=True")\n',
        "from ftslurm import logvocab\nM = logvocab.STEP.search(b'')\n",
        "from ftslurm.logvocab import last_banner\n",
        "class Appended:\n    pass\n",
    ]:
        assert violations("ftslurm/status.py", status + "\n" + added), added
    assert violations("ftslurm/status.py", status) == []
    assert violations("ftslurm/run/progress.py", 'X = r"step:\\s+(\\d+)"') == []


@pytest.mark.parametrize("rel", CONSUMERS)
def test_the_progress_consumers_import_the_run_model(rel: str) -> None:
    tree = ast.parse((ROOT / rel).read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert any(m == "ftslurm.run" or m.startswith("ftslurm.run.") for m in modules), rel
