"""The package's layering, read from the source with `ast` (nothing is imported).

Why: an import cycle makes import order matter and hides which module owns what; the CLI
layer (`ftslurm.commands`) must stay a thin shell over the library, so that the library and
its Python API work without click; and every external process goes through `ftslurm.runner`
(one place for timeouts, logging and the fake runner the tests use).

Every import counts, module-level or inside a function (a lazy import is still a dependency).
`from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`; a
parent package run as a side effect of importing its submodule is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ftslurm"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


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
