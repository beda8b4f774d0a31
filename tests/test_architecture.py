"""The package's boundaries, read from the source with `ast` (the modules checked are not
imported; the settings checks walk the CLI's options and the knob registry).

Why: an import cycle makes import order matter and hides which module owns what; the CLI
layer (`ftslurm.commands`) must stay a thin shell over the library, so that the library and
its Python API work without click; and every external process goes through `ftslurm.runner`
(one place for timeouts, logging and the fake runner the tests use). Each concept has one home,
and a second one fails here before it ships: a step or commit pattern or a log follower outside
the run model (the benches' and tests' own step patterns missed nan losses and coloured lines);
an sbatch call or `#SBATCH` reader outside the submit service; a knob read past the registry's
parser (a boolean read as `== "1"` takes `on` as off, a blank export counts as set); a signal,
a deadline loop or a timeout exception outside the process toolkit. Each rule is also run on a
small piece of source that breaks it, so a rule that could never fail is caught too.

Every import counts, module-level or inside a function (a lazy import is still a dependency).
`from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`; a
parent package run as a side effect of importing its submodule is not an edge.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from ftslurm import knobs
from ftslurm.commands.params import KnobOption

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ftslurm"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _package() -> dict[str, str]:
    """Each module's path (`ftslurm/x.py`) -> its source."""
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every module named by an import anywhere in `path` (ours and third-party alike)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.add(sub if sub in modules else mod)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of `ftslurm` it imports."""
    mods = _modules()
    names = set(mods)
    return {m: {i for i in imports_of(p, names) if i in names and i != m}
            for m, p in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# ---------------------------------------------------------------- the checker itself


def test_checker_finds_a_cycle_and_resolves_imports(tmp_path: Path) -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    mods = _modules()
    assert "ftslurm.report.render" in mods and "ftslurm" in mods
    # function-level and relative imports count; `from pkg import module` names the module
    timeline = imports_of(mods["ftslurm.report.timeline"], set(mods))
    assert "ftslurm.logvocab" in timeline
    assert "ftslurm.cluster.local" in imports_of(mods["ftslurm.demo"], set(mods))


# ---------------------------------------------------------------- the rules


def test_no_import_cycle() -> None:
    assert find_cycles(import_graph()) == []


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded to ftslurm's layers: `ftslurm.report.timeline` counts as
    `ftslurm.report`, a top-level module as itself."""
    def layer(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, bs in graph.items():
        out.setdefault(layer(a), set()).update(layer(b) for b in bs if layer(b) != layer(a))
    return out


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_no_cycle_between_packages() -> None:
    """Packages form layers: a cycle between two (the launcher importing the doctor, which
    imports the launcher's plan) makes each a part of the other."""
    assert find_cycles(package_graph(import_graph())) == []


# what the processes on a node (the launcher, `replica.launcher.job`; the training worker,
# `replica.worker.train`) may never load: login-node tools, each heavier and each a way back up
NODE_NEVER = ("ftslurm.report", "ftslurm.doctor", "ftslurm.submission", "ftslurm.commands",
              "ftslurm.cli", "ftslurm.demo", "ftslurm.daemon", "ftslurm.metrics",
              "ftslurm.status", "ftslurm.lighthouse.lifecycle")  # fmt: skip


@pytest.mark.parametrize("process", ["ftslurm.replica.launcher.job",
                                     "ftslurm.replica.worker.train"])
def test_the_node_processes_load_no_login_node_tool(process: str) -> None:
    loaded = reachable(import_graph(), process)
    bad = sorted(m for m in loaded if m.startswith(NODE_NEVER))
    assert bad == [], f"{process} imports {bad}"


REPLICA = "ftslurm.replica."
LAUNCHER, WORKER = REPLICA + "launcher", REPLICA + "worker"


def _replica_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, what it imports) of replica/'s modules, among replica/'s modules."""
    return [(m, dep) for m, deps in graph.items() if m.startswith(REPLICA)
            for dep in deps if dep.startswith(REPLICA)]  # fmt: skip


def crossings(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from one process's folder of replica/ into the other's."""
    return [(m, dep) for m, dep in _replica_imports(graph)
            if (m.startswith(LAUNCHER) and dep.startswith(WORKER))
            or (m.startswith(WORKER) and dep.startswith(LAUNCHER))]  # fmt: skip


def test_neither_process_of_a_replica_imports_the_others_modules() -> None:
    """The launcher and the training worker are two processes, one folder each: a worker
    module that imported the launcher's would run its decisions in every rank; a launcher
    module that imported the worker's would be one step from loading torch. What they share
    (variables, words, notes) is in replica/handoff.py."""
    assert crossings(import_graph()) == [], \
        "put what both sides need in replica/handoff.py (or another shared module)"


def test_the_shared_modules_of_a_replica_import_neither_process() -> None:
    """replica/'s own modules are the floor both processes stand on (the plan, the patch
    records, the exit codes, the notes): they import neither side, but `__main__`, the
    launcher's entry."""
    bad = [(m, dep) for m, dep in _replica_imports(import_graph())
           if m.count(".") == 2 and m != REPLICA + "__main__"
           and dep.startswith((LAUNCHER, WORKER))]  # fmt: skip
    assert bad == []


def test_the_floor_check_sees_a_worker_that_imports_the_launcher() -> None:
    g = {WORKER + ".train": {LAUNCHER + ".job", REPLICA + "plan"},
         LAUNCHER + ".job": {REPLICA + "handoff"}}  # fmt: skip
    assert crossings(g) == [(WORKER + ".train", LAUNCHER + ".job")]
    assert crossings({LAUNCHER + ".job": {WORKER + ".fixes"}}) == [
        (LAUNCHER + ".job", WORKER + ".fixes")]


@pytest.mark.process
def test_the_launcher_side_loads_no_torch() -> None:
    """The launcher runs on every node before torch is needed: its start stays fast, and a
    torch that cannot load fails in the worker, where the launcher sees and judges it."""
    import subprocess
    import sys

    folder = ROOT / "ftslurm" / "replica" / "launcher"
    mods = ", ".join(f"{LAUNCHER}.{p.stem}" for p in sorted(folder.glob("*.py"))
                     if p.stem != "__init__")  # fmt: skip
    code = (f"import sys, ftslurm.replica.__main__, {mods}; "
            "bad = [m for m in ('torch', 'torchtitan', 'torchft') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_layer_checks_find_a_package_cycle_and_a_reach() -> None:
    g = {"ftslurm.a.x": {"ftslurm.b.y"}, "ftslurm.b.z": {"ftslurm.a.w"}, "ftslurm.c": set()}
    assert find_cycles(package_graph(g)) == [["ftslurm.a", "ftslurm.b"]]
    assert reachable(g, "ftslurm.a.x") == {"ftslurm.b.y"}
    assert reachable({"p": {"q"}, "q": {"r"}}, "p") == {"q", "r"}


def test_report_model_imports_neither_builder_nor_renderer() -> None:
    g = import_graph()
    assert not g["ftslurm.report.model"] & {"ftslurm.report.timeline", "ftslurm.report.render"}
    assert "ftslurm.report.render" not in g["ftslurm.report.timeline"]
    assert "ftslurm.report.timeline" not in g["ftslurm.report.render"]


def _in_commands(module: str) -> bool:
    return module == "ftslurm.commands" or module.startswith("ftslurm.commands.")


def test_only_the_cli_imports_commands() -> None:
    bad = sorted(
        f"{m} -> {i}" for m, deps in import_graph().items()
        if not _in_commands(m) and m != "ftslurm.cli"
        for i in deps if _in_commands(i)
    )
    assert bad == []


def test_only_runner_imports_subprocess() -> None:
    mods = _modules()
    users = sorted(m for m, p in mods.items()
                   if "subprocess" in imports_of(p, set(mods)))
    assert users == ["ftslurm.runner"]

# ---------------------------------------------------------------- the run model
# Only ftslurm/run/ (and logvocab, which defines the shapes) reads replica progress from logs.


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
    "ftslurm/logfilter.py": "folds repeated quorum lines: the members' step range in the short "
    "line, not progress",
    "ftslurm/report/reader.py": "the report's byte prefilter of commit lines: a whole-log "
    "event reader, not progress",
    "ftslurm/report/restarts.py": "the report's restart rows: every attempt's steps of the "
    "whole log, through logvocab's STEP",
}
# the consumers of progress the run model replaced a reader in: they import it
CONSUMERS = ("bench/soak.py", "bench/gpu_overhead.py", "bench/scale.py",
             "bench/checkpoint_cost.py", "tests/ftjob.py",
             "tests/test_replica_training.py", "ftslurm/commands/status.py",
             "ftslurm/status.py")  # fmt: skip


def _progress_sources() -> list[str]:
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
    bad = [v for rel in _progress_sources() for v in violations(rel, (ROOT / rel).read_text())]
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


# ---------------------------------------------------------------- log shapes
# Every regex over a log line lives in logvocab: the modules that read logs compile none.
# logfilter.py and lighthouse/launcher.py are not among them: they run beside a Lighthouse,
# copied into its state folder where ftslurm may not be importable (standard library only).

LOG_READERS = ("ftslurm/report/", "ftslurm/run/", "ftslurm/logtail.py", "ftslurm/status.py",
               "ftslurm/demo.py", "ftslurm/lighthouse/lifecycle.py",
               "ftslurm/replica/worker/checksum.py",
               "ftslurm/metrics/collector.py")  # fmt: skip


def compiled_patterns(rel: str, source: str) -> list[str]:
    """Each `re.compile(...)` in `source` (the file `rel`)."""
    return [f"{rel}:{n.lineno}: re.compile" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "compile" and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "re"]  # fmt: skip


def test_every_log_regex_is_in_logvocab() -> None:
    files = sorted(str(f.relative_to(ROOT)) for f in ROOT.joinpath("ftslurm").rglob("*.py"))
    readers = [f for f in files if f.startswith(LOG_READERS)]
    assert "ftslurm/report/reader.py" in readers and "ftslurm/run/quorum.py" in readers
    bad = [v for rel in readers for v in compiled_patterns(rel, (ROOT / rel).read_text())]
    assert not bad, "\n".join(bad) + "\n(a log line's shape belongs in ftslurm/logvocab.py)"
    added = 'import re\n_DEVICE = re.compile(rb"FTSLURM_DEVICE=([A-Za-z]+)")\n'
    assert compiled_patterns("ftslurm/report/sources.py", added)  # the rule can fail


@pytest.mark.parametrize("rel", CONSUMERS)
def test_the_progress_consumers_import_the_run_model(rel: str) -> None:
    tree = ast.parse((ROOT / rel).read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert any(m == "ftslurm.run" or m.startswith("ftslurm.run.") for m in modules), rel

# ---------------------------------------------------------------- the submit path
# Only the submit service submits, only slurm/args.py spells sbatch's argv, one reads #SBATCH.


SERVICE = "ftslurm/submission.py"
# submitit's calls that run sbatch themselves
SUBMITIT_SUBMITS = {"map_array", "submit_array", "_submit_command", "_internal_process_submissions"}
_RE_CALLS = {"match", "search", "fullmatch", "compile", "findall", "finditer", "sub", "split"}


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
    offenders = [o for path, src in _package().items() for o in submit_offenders(path, src)]
    assert not offenders, "\n".join(offenders)


def test_the_clients_and_the_demo_go_through_the_service() -> None:
    sources = _package()
    for path in ("ftslurm/commands/submit.py", "ftslurm/demo.py", "ftslurm/api.py"):
        assert "submission.submit(" in sources[path], f"{path} does not submit through {SERVICE}"


def test_one_function_reads_sbatch_directives() -> None:
    readers = [r for path, src in _package().items() for r in directive_readers(path, src)]
    assert readers == [f"{SERVICE}:_DIRECTIVE"], readers
    service = ast.parse(_package()[SERVICE])
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
    assert "time_limit_signal_spec(" in _package()["ftslurm/api.py"]

# ---------------------------------------------------------------- settings
# Knobs are read once, through the registry: knobs.load/environ and params.knob_option.


# Modules that take a `knobs.Settings` (or load one once at their public boundary): no
# `knobs.get(` / `knobs.check(` in them. A module switched over is added here.
CONVERTED = (
    "paths.py", "resources.py", "commands/params.py", "commands/lighthouse.py",
    "commands/metrics.py", "replica/plan.py", "replica/launcher/preflight.py",
    "replica/launcher/failure_history.py",
    "replica/worker/fixes.py",
    "replica/worker/train.py", "replica/worker/tiny.py", "replica/worker/checksum.py",
    "replica/worker/transport.py",
    "replica/worker/early_sync.py", "replica/worker/startup.py", "replica/worker/ft_checkpoints.py",
    "replica/worker/cpu.py",
    "replica/launcher/job.py", "replica/launcher/warm_restart.py", "failure.py", "api.py",
    "submission.py",
    "commands/submit.py", "commands/demo.py", "demo.py", "doctor.py",
)  # fmt: skip

# Options whose file is not switched yet: they still read their variable by click's rules.
# Switching one (params.knob_option) makes the check below ask to remove it from here.
NOT_YET_KNOB_OPTIONS: set[tuple[str, str]] = set()

ENV_NAMES = ("env", "environ", "environment")  # what an environment mapping is called here

# Direct reads in modules not switched yet (owned elsewhere): file -> knobs read. A new read
# fails the package-wide check; an entry may outlive its read (the code moves while the
# modules it is in are reworked): remove it once the file is switched.
NOT_YET_DIRECT = {
    "commands/assets.py": {"HF_TOKEN"},
    "lighthouse/command.py": {"FTSLURM_LIGHTHOUSE_BIN"},
    "lighthouse/launcher.py": {"FTSLURM_LIGHTHOUSE_LOG", "FTSLURM_LIGHTHOUSE_BINARY",
                               "FTSLURM_LOG_FILTER", "FTSLURM_LIGHTHOUSE_SNAPSHOT_S",
                               "FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES"},
    # not reads: a claimed slot is written into the worker's environment (standby._become)
    "replica/worker/standby.py": {"FTSLURM_REPLICA_ID", "FTSLURM_SLOT_EPOCH"},
}  # fmt: skip


def _is_env(node: ast.expr) -> bool:
    """`os.environ`, a name like `env`, or an attribute `.env` (Settings.env, the raw text)."""
    if isinstance(node, ast.Attribute):
        return node.attr in ENV_NAMES
    return isinstance(node, ast.Name) and node.id in ENV_NAMES


def _knob(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in knobs.KNOBS:
        return node.value
    return None


def direct_reads(source: str) -> list[str]:
    """Each place `source` reads a registered knob past the registry: `env["K"]`,
    `env.get("K")`, `os.environ.get("K")`, `os.getenv("K")`, `"K" in env` (reads, not writes)."""
    found = []
    tree = ast.parse(source)
    # `env.pop("K")` alone on its line drops the knob from a copy: a write, not a read
    dropped = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    for node in ast.walk(tree):
        name = None
        if id(node) in dropped:
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = _knob(node.slice) if _is_env(node.value) else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if f.attr in ("get", "pop", "setdefault") and _is_env(f.value):
                name = _knob(node.args[0])
            elif f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                name = _knob(node.args[0])
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            if isinstance(node.ops[0], (ast.In, ast.NotIn)) and _is_env(node.comparators[0]):
                name = _knob(node.left)
        if name:
            found.append(f"line {node.lineno}: {name}")
    return found


def registry_calls(source: str, names: tuple[str, ...] = ("get", "check")) -> list[str]:
    """Each `knobs.get(` / `knobs.check(` call in `source`."""
    return [f"line {n.lineno}: knobs.{n.func.attr}(" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "knobs"
            and n.func.attr in names]  # fmt: skip


def test_the_checkers_find_what_they_look_for() -> None:
    bad = '''
import os
a = os.environ.get("FTSLURM_OUTPUTS")
b = env["FT_SPARES"]
c = os.getenv("STEPS")
d = "DEVICE" in environ
e = settings.env.get("FTSLURM_PYTHON")
g = env.pop("FTSLURM_SPARE", "")
f = knobs.get(env, "STEPS")
knobs.check(env)
'''
    assert [r.split(": ")[1] for r in direct_reads(bad)] == [
        "FTSLURM_OUTPUTS", "FT_SPARES", "STEPS", "DEVICE", "FTSLURM_PYTHON", "FTSLURM_SPARE"]
    assert len(registry_calls(bad)) == 2
    fine = '''
import os
a = os.environ.get("SLURM_JOB_ID")      # not a knob
env["FTSLURM_DEVICE"] = "cpu"           # a write: the child's environment
env.pop("FTSLURM_GROUP_SIZE")           # dropped from a copy
b = settings.STEPS
c = settings["FT_SPARES"]
d = settings.get("STEPS", "cpu")
'''
    assert direct_reads(fine) == [] and registry_calls(fine) == []


@pytest.mark.parametrize("module", CONVERTED)
def test_a_converted_module_reads_no_knob_past_the_registry(module: str) -> None:
    source = (PKG / module).read_text()
    assert direct_reads(source) == [], f"ftslurm/{module} reads a knob from the environment: " \
        "take a knobs.Settings (knobs.load(env) once at the public boundary, knobs.environ() " \
        "in a worker) and read settings.NAME"
    assert registry_calls(source) == [], f"ftslurm/{module} calls knobs.get/check again: " \
        "load the Settings once and pass it down"


def test_only_the_registry_reads_a_knob_from_the_environment() -> None:
    """Across the package: `os.environ.get("FTSLURM_...")`, `env["STEPS"]` and the like only
    in knobs.py (and the files not switched yet, each with the knobs it reads today)."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel != "knobs.py" and (reads := direct_reads(path.read_text())):
            found[rel] = {r.split(": ")[1] for r in reads}
    new = {f: sorted(k - NOT_YET_DIRECT.get(f, set())) for f, k in found.items()}
    assert {f: k for f, k in new.items() if k} == {}, "read these through knobs.load/environ"


def _options(command: click.Command, path: tuple[str, ...] = ()):
    """(command path, option) of every option in the CLI tree."""
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _options(sub, (*path, name))


def test_every_envvar_option_is_a_registered_knob_read_through_the_registry() -> None:
    from ftslurm.cli import cli

    plain, stale = [], []
    for path, option in _options(cli):
        if not option.envvar:
            continue
        key = (" ".join(path), option.opts[0])
        assert isinstance(option.envvar, str) and option.envvar in knobs.KNOBS, key
        if isinstance(option, KnobOption):
            stale += [key] if key in NOT_YET_KNOB_OPTIONS else []
        elif key not in NOT_YET_KNOB_OPTIONS:
            plain.append(key)
    assert plain == [], f"declare these with params.knob_option(..., knob=NAME): {plain}"
    assert stale == [], f"switched: remove them from NOT_YET_KNOB_OPTIONS: {stale}"


def test_a_knob_option_must_name_a_registered_knob() -> None:
    with pytest.raises(TypeError, match="not a knob"):
        KnobOption(["--x"], envvar="FTSLURM_NOT_A_KNOB")

# ---------------------------------------------------------------- processes
# One stop (procs.kill_pids), one wait (ftslurm.wait), one timeout exception (WaitTimeout).


# the process toolkit's modules: these wait only through ftslurm.wait
TOOLKIT = (
    "ftslurm/wait.py", "ftslurm/procs.py", "ftslurm/daemon.py", "ftslurm/runner.py",
    "ftslurm/lighthouse/lifecycle.py", "ftslurm/lighthouse/launcher.py", "ftslurm/failure.py",
    "ftslurm/commands/failure.py", "ftslurm/cluster/local.py", "ftslurm/commands/cluster.py",
    "ftslurm/replica/launcher/attempt_guard.py", "ftslurm/replica/worker/peer_watch.py",
)  # fmt: skip

SIGNAL_CALLS = {("os", "kill"), ("os", "killpg"), ("os", "pidfd_send_signal"),
                ("signal", "pidfd_send_signal")}  # fmt: skip
SIGNALLERS = {
    "ftslurm/procs.py": "the one stop: kill_pids",
    "ftslurm/runner.py": "the module that starts programs, for its own children",
    "ftslurm/lighthouse/launcher.py": "a standalone program (copied into the state dir, "
    "standard library only) that passes signals on to its own child",
}
# (file, function) -> why a loop there that sleeps and reads the clock is no wait for a condition
NOT_WAITS = {
    ("ftslurm/failure.py", "_Execution.wait"): "the planned pause of a `wait` action (a node "
    "kept DOWN for --down-for s): it never ends early and never times out, and notes the "
    "task's return meanwhile",
}
# (file, function) -> why a bare TimeoutError is right there
BARE_TIMEOUTS: dict[tuple[str, str], str] = {}


def _call_of(node: ast.AST) -> tuple[str, str] | None:
    """(module, function) of a call written `module.function(...)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if isinstance(node.func.value, ast.Name):
            return node.func.value.id, node.func.attr
    return None


def _functions(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every function, and ('<module>', tree)."""
    out: list[tuple[str, ast.AST]] = [("<module>", tree)]

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((name, child))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def signal_senders(source: str) -> list[str]:
    """Where `source` signals a process itself (`os.kill`, `os.killpg`, a pidfd signal)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _call_of(node) in SIGNAL_CALLS:
            found.append(f"line {node.lineno}: {'.'.join(_call_of(node))}")  # type: ignore[arg-type]
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "signal"):
            for alias in node.names:
                if (node.module, alias.name) in SIGNAL_CALLS:
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    return found


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of `fn`, not those of the functions defined in it (each is checked alone)."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _reads_clock(node: ast.AST) -> bool:
    return any(_call_of(n) == ("time", "monotonic") for n in ast.walk(node))


def deadline_loops(source: str) -> list[str]:
    """Functions of `source` with a polling loop against a deadline: a `while` loop that
    sleeps and compares the clock (`time.monotonic() >= deadline`), or that sleeps in a
    function that sets a deadline (`deadline = time.monotonic() + timeout`)."""
    found = []
    for name, fn in _functions(ast.parse(source)):
        nodes = _own_nodes(fn)
        sets_deadline = any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and _reads_clock(n)
            for n in nodes
        )
        for loop in (n for n in nodes if isinstance(n, ast.While)):
            inside = list(ast.walk(loop))
            sleeps = any(_call_of(n) == ("time", "sleep") for n in inside)
            compares_clock = any(isinstance(n, ast.Compare) and _reads_clock(n) for n in inside)
            if sleeps and (compares_clock or sets_deadline):
                found.append(f"{name} (line {loop.lineno})")
    return found


def _names(node: ast.expr) -> str:
    return ast.unparse(node)


def timeout_classes(source: str) -> list[str]:
    """Exception classes of `source` that are timeouts but no `WaitTimeout`: named `...Timeout`
    or derived from TimeoutError."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = [_names(b).rsplit(".", 1)[-1] for b in node.bases]
            if ("Timeout" in node.name or "TimeoutError" in bases) and "WaitTimeout" not in bases:
                found.append(f"class {node.name}({', '.join(bases)})")
    return found


def bare_timeout_raises(source: str) -> list[str]:
    """Functions of `source` that raise TimeoutError itself (not a WaitTimeout)."""
    found = []
    for name, fn in _functions(ast.parse(source)):
        for node in _own_nodes(fn):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if _names(exc).rsplit(".", 1)[-1] == "TimeoutError":
                    found.append(f"{name} (line {node.lineno})")
    return found


# ---- each rule breaks on source that breaks it


BROKEN_STOP = """
import os, signal
from os import killpg
def stop(pid):
    os.kill(pid, signal.SIGTERM)
    signal.pidfd_send_signal(3, signal.SIGKILL)
"""

BROKEN_WAITS = """
import time
def wait_gone(alive, timeout):
    deadline = time.monotonic() + timeout
    while alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
def pick(limit):
    t0 = time.monotonic()
    while True:
        if pick_now() or time.monotonic() - t0 >= limit:
            break
        time.sleep(0.5)
def ticker():
    while True:
        time.sleep(1)
        now = time.monotonic()
        record(now)
def later(x):
    time.sleep(1)
    return time.monotonic() + x
"""

BROKEN_TIMEOUTS = """
import ftslurm.wait
class ReadyTimeout(Exception): pass
class LockBusy(TimeoutError): pass
class Fine(ftslurm.wait.WaitTimeout): pass
class AlsoFine(UserError, WaitTimeout): pass
def wait_ready():
    raise TimeoutError("timed out after 3 s waiting for the daemon")
def lock():
    def inner():
        raise builtins.TimeoutError
    raise WaitTimeout("x.lock is held by another process")
"""


def test_each_rule_fails_on_source_that_breaks_it() -> None:
    assert signal_senders(BROKEN_STOP) == [
        "line 3: from os import killpg", "line 5: os.kill", "line 6: signal.pidfd_send_signal"]
    assert signal_senders("import os\nos.getpid()\nos.killpg_like = 1\n") == []
    # a deadline loop in either spelling; a clock that only measures, or no loop, is none
    assert deadline_loops(BROKEN_WAITS) == ["wait_gone (line 5)", "pick (line 12)"]
    assert timeout_classes(BROKEN_TIMEOUTS) == ["class ReadyTimeout(Exception)",
                                                "class LockBusy(TimeoutError)"]  # fmt: skip
    assert bare_timeout_raises(BROKEN_TIMEOUTS) == ["wait_ready (line 8)", "lock.inner (line 11)"]


# ---- the rules hold in the package


def test_only_procs_and_runner_signal_processes() -> None:
    """One stop: `procs.kill_pids` (after an identity check), so no module signals a pid
    that may have been reused in a way of its own."""
    found = {path: hits for path, text in _package().items()
             if path not in SIGNALLERS and (hits := signal_senders(text))}  # fmt: skip
    assert found == {}, "signal processes through procs.kill_pids"


def test_the_toolkit_waits_only_through_ftslurm_wait() -> None:
    """One wait: every poll against a deadline is `wait.wait_for`, so it times out the one way
    (WaitTimeout, the same text)."""
    found = {}
    for path in TOOLKIT:
        if path == "ftslurm/wait.py":
            continue
        loops = deadline_loops((ROOT / path).read_text())
        loops = [f for f in loops if (path, f.split(" (")[0]) not in NOT_WAITS]
        if loops:
            found[path] = loops
    assert found == {}, "wait with ftslurm.wait.wait_for"
    # ... where the one loop is, and is seen by the same reading
    own = deadline_loops((ROOT / "ftslurm/wait.py").read_text())
    assert [f.split(" (")[0] for f in own] == ["wait_for"]


def test_every_timeout_exception_is_a_wait_timeout() -> None:
    found = {path: hits for path, text in _package().items()
             if path != "ftslurm/wait.py" and (hits := timeout_classes(text))}  # fmt: skip
    assert found == {}, "derive timeouts from ftslurm.wait.WaitTimeout"


def test_no_bare_timeout_error_is_raised_for_a_wait() -> None:
    found = {}
    for path, text in _package().items():
        hits = [h for h in bare_timeout_raises(text) if (path, h.split(" (")[0]) not in
                BARE_TIMEOUTS]  # fmt: skip
        if hits:
            found[path] = hits
    assert found == {}, "raise ftslurm.wait.WaitTimeout"
