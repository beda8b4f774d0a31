"""One submit path, checked by reading the source: only the submit service
(`ftslurm/submission.py`) submits (the Slurm client's `sbatch`), only `ftslurm/slurm/args.py`
spells sbatch's command line, nothing hands a job to submitit's own sbatch call, and one
place reads `#SBATCH` lines. The CLI, the demo and the Python API reach Slurm through the
service; a second path (the demo's own `client.sbatch`, a `runner.run(["sbatch", ...])`, a
regex over a script's header in another module) fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ftslurm"
SERVICE = "ftslurm/submission.py"
# submitit's calls that run sbatch themselves
SUBMITIT_SUBMITS = {"map_array", "submit_array", "_submit_command", "_internal_process_submissions"}
_RE_CALLS = {"match", "search", "fullmatch", "compile", "findall", "finditer", "sub", "split"}


def _sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]  # fmt: skip


def submit_offenders(path: str, source: str) -> list[str]:
    """Where `source` submits or spells sbatch's argv outside the service's boundary."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _called(node)
            if name == "sbatch" and path != SERVICE:
                found.append(f"{path}:{node.lineno}: calls .sbatch(): submit through {SERVICE}")
            if name == "sbatch_cmd" and path not in (SERVICE, "ftslurm/slurm/client.py"):
                found.append(f"{path}:{node.lineno}: builds sbatch's argv")
            if name in SUBMITIT_SUBMITS:
                found.append(f"{path}:{node.lineno}: submitit's {name} runs sbatch itself")
            # an executor's .submit() (submitit's, in a module that uses submitit)
            if (name == "submit" and isinstance(node.func, ast.Attribute) and path != SERVICE
                    and "submitit" in source):  # fmt: skip
                owner = node.func.value
                if not (isinstance(owner, ast.Name) and owner.id == "submission"):
                    found.append(f"{path}:{node.lineno}: .submit() of something other "
                                 "than the submit service (submitit's executor?)")  # fmt: skip
        if isinstance(node, ast.List | ast.Tuple) and node.elts and path != "ftslurm/slurm/args.py":
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "sbatch":
                found.append(f"{path}:{node.lineno}: an argv that starts with sbatch")
    return found


def directive_readers(path: str, source: str) -> list[str]:
    """The places in `source` that match `#SBATCH` text (a regex or startswith over it):
    `path:function` (`path:NAME` for a module-level pattern)."""
    found = []
    tree = ast.parse(source)
    scopes: list[tuple[ast.AST, str]] = [(tree, "")]
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.ClassDef):
            scopes.append((top, top.name))
        elif isinstance(top, ast.Assign) and isinstance(top.targets[0], ast.Name):
            scopes.append((top, top.targets[0].id))
    for scope, name in scopes[1:]:
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call):
                continue
            reads = _called(node) in _RE_CALLS | {"startswith"}
            if reads and any("#SBATCH" in s for a in node.args for s in _strings(a)):
                found.append(f"{path}:{name}")
                break
    return found


def test_only_the_submit_service_submits() -> None:
    offenders = [o for path, src in _sources().items() for o in submit_offenders(path, src)]
    assert not offenders, "\n".join(offenders)


def test_the_clients_and_the_demo_go_through_the_service() -> None:
    sources = _sources()
    for path in ("ftslurm/commands/submit.py", "ftslurm/demo.py", "ftslurm/api.py"):
        assert "submission.submit(" in sources[path], f"{path} does not submit through {SERVICE}"


def test_one_function_reads_sbatch_directives() -> None:
    readers = [r for path, src in _sources().items() for r in directive_readers(path, src)]
    assert readers == [f"{SERVICE}:_DIRECTIVE"], readers
    service = ast.parse(_sources()[SERVICE])
    users = [f.name for f in ast.walk(service) if isinstance(f, ast.FunctionDef)
             and any(isinstance(n, ast.Name) and n.id == "_DIRECTIVE" for n in ast.walk(f))]
    assert users == ["directives"], users


# the checks catch what they are for: the demo's own sbatch call, a runner call with sbatch's
# argv, submitit's submission, and a second #SBATCH regex (doctor's)
OLD_DEMO = """
def setup(self):
    sbatch = client.current(env=env, timeout=60).sbatch
    self.job = sbatch(paths.project_root() / paths.FT_SCRIPT, opts, cwd=paths.project_root())
"""
DIRECT = 'def go():\n    runner.run(["sbatch", "--parsable", script])\n'
SUBMITIT = "def go(ex, task):\n    return ex.map_array(task, [0, 1])\n"
SUBMITIT_ONE = "import submitit\ndef go(ex, task):\n    return ex.submit(task)\n"
SECOND_READER = (
    'def script_gpus_per_task(text):\n'
    '    m = re.search(r"^#SBATCH\\s+--gpus-per-task[= ](\\d+)", text, re.MULTILINE)\n'
)


@pytest.mark.parametrize("source", [OLD_DEMO, DIRECT, SUBMITIT, SUBMITIT_ONE])
def test_the_submit_check_fails_on_a_second_path(source: str) -> None:
    assert submit_offenders("ftslurm/demo.py", source)


def test_the_reader_check_fails_on_a_second_reader() -> None:
    assert directive_readers("ftslurm/doctor.py", SECOND_READER) == [
        "ftslurm/doctor.py:script_gpus_per_task"
    ]


def test_the_api_signal_is_the_cli_signal() -> None:
    """One spelling of the time-limit signal, the service's, which reaches the launcher."""
    from ftslurm import submission

    spec = submission.time_limit_signal_spec(30)
    assert spec == "B:USR1@30" and submission.launcher_signal_margin(spec) == 30
    assert "time_limit_signal_spec(" in _sources()["ftslurm/api.py"]
