"""Settings are read once, through the registry: the boundaries of ftslurm/knobs.py' `Settings`.

Why: a knob read straight from the environment skips the registry's parser (a boolean read as
`== "1"` takes `on` as off, a blank export counts as set) and its one-line error, and a module
that calls `knobs.get(env, ...)` again and again parses the same text each time. These checks
read the source, so a new direct read fails here before it ships.
"""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from ftslurm import knobs
from ftslurm.cli import cli
from ftslurm.commands.params import KnobOption

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ftslurm"

# Modules that take a `knobs.Settings` (or load one once at their public boundary): no
# `knobs.get(` / `knobs.check(` in them. A module switched over is added here.
CONVERTED = (
    "paths.py", "resources.py", "commands/params.py", "commands/lighthouse.py",
    "commands/metrics.py", "replica/plan.py", "replica/preflight.py", "replica/fixes.py",
    "replica/train.py", "replica/tiny.py", "replica/checksum.py", "replica/transport.py",
    "replica/early_sync.py", "replica/startup.py", "replica/ft_checkpoints.py", "replica/cpu.py",
    "replica/job.py", "replica/warm_restart.py", "failure.py", "api.py", "submission.py",
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
                               "FTSLURM_LIGHTHOUSE_LOG_MAX_BYTES"},
    # not reads: a claimed slot is written into the worker's environment (standby._become)
    "replica/standby.py": {"FTSLURM_REPLICA_ID", "FTSLURM_SLOT_EPOCH"},
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
