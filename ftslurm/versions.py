"""The training stack's versions: requirement pins read from requirements.txt (or the installed
ftslurm's `cpu` extra), installed versions read from package metadata (nothing imported: torch
takes seconds), and the one-line verdict on an unsupported build.

Why a module of its own: the launcher checks the stack before every attempt
(`check_stack`) and `ftslurm doctor` checks it on the login node; the launcher
must not import the doctor (which imports Slurm's client, the Lighthouse and the submit path).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ftslurm import paths, stacks
from ftslurm.errors import UserError


@dataclass(frozen=True)
class Requirement:
    name: str
    spec: str  # "==2.13.0", ">=0.20", "" (any)


def parse_requirements(text: str) -> list[Requirement]:
    """The pins of a requirements file; `-e .`, options, URLs and comments are skipped."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-") or "://" in line:
            continue
        line = line.split(";", 1)[0].strip()  # markers: this tool's Python is what counts
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(.*)$", line)
        if m:
            out.append(Requirement(m.group(1), m.group(2).replace(" ", "")))
    return out


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _release(v: str) -> tuple[int, ...]:
    v = v.split("+", 1)[0]
    nums = []
    for part in v.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
        if m.group() != part:
            break
    return tuple(nums)


def satisfies(version: str, spec: str) -> bool:
    """PEP 440 where `packaging` is importable, else release-number comparison; local labels
    (`2.13.0+cpu`) match their public version either way."""
    if not spec:
        return True
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except Exception:  # noqa: BLE001 - no packaging, or an odd version string: numbers
        return satisfies_simple(version, spec)


def satisfies_simple(version: str, spec: str) -> bool:
    have = _release(version)
    for clause in spec.split(","):
        m = re.match(r"^(==|>=|<=|!=|~=|>|<)(.+)$", clause.strip())
        if not m:
            continue
        op, want_s = m.groups()
        want = _release(want_s.rstrip(".*"))
        n = max(len(have), len(want))
        a, b = have + (0,) * (n - len(have)), want + (0,) * (n - len(want))
        if op == "==" and want_s.endswith(".*"):
            ok = have[: len(want)] == want
        elif op == "==":
            ok = a == b
        elif op == "!=":
            ok = a != b
        elif op == ">=":
            ok = a >= b
        elif op == "<=":
            ok = a <= b
        elif op == ">":
            ok = a > b
        elif op == "<":
            ok = a < b
        else:  # ~=
            ok = a >= b and have[: len(want) - 1] == want[: len(want) - 1]
        if not ok:
            return False
    return True


# The builds the scripts are verified with (stacks.py: one set of pins per supported stack); a
# different one fails deep in training (a moved module, a missing config, a torchft wire change
# between the Lighthouse and the replicas).
CORE_PACKAGES = ("torch", "torchtitan", "torchft-nightly")


def supported_pins(requirements: Path | None = None) -> dict[str, str]:
    """The core packages' pins: requirements.txt (default: the checkout's), else the
    installed ftslurm's `cpu` extra (the same pins, for an installed package on a node)."""
    path = requirements or paths.project_root() / "requirements.txt"
    try:
        reqs = parse_requirements(path.read_text())
    except (OSError, UnicodeDecodeError):
        reqs = []
        try:
            for line in importlib.metadata.requires("ftslurm") or []:
                if 'extra == "cpu"' in line:
                    reqs += parse_requirements(line.split(";", 1)[0])
        except importlib.metadata.PackageNotFoundError:
            pass
    core = {normalize(c) for c in CORE_PACKAGES}
    return {normalize(r.name): r.spec for r in reqs if normalize(r.name) in core and r.spec}


def installed_versions(names: Sequence[str] = CORE_PACKAGES) -> dict[str, str | None]:
    """name -> the installed version (None: not installed), read from the package metadata
    (nothing is imported: torch takes seconds)."""
    return installed([Requirement(n, "") for n in names])


def version_problem(installed: Mapping[str, str | None], pins: Mapping[str, str],
                    lighthouse_torchft: str | None = None,
                    stack: stacks.Stack = stacks.DEFAULT) -> str | None:  # fmt: skip
    """One line naming the unsupported torchtitan, torch or torchft build (or a Lighthouse
    whose torchft differs from the replicas'), with the supported pins; None when all fit.
    A package that is not installed is `check_packages`'s to report, not this."""
    wanted = ", ".join(f"{n}{spec}" for n, spec in pins.items())
    fix = f"supported with {stack.name}: {wanted} ({_install_hint(stack)})"
    for name, spec in pins.items():
        have = installed.get(name)
        if have is None or satisfies(have, spec):
            continue
        return f"{name} {have} is not supported; {fix}"
    mine = installed.get("torchft-nightly")
    if lighthouse_torchft and mine and lighthouse_torchft != mine:
        return (f"the Lighthouse runs torchft {lighthouse_torchft} but this environment has "
                f"{mine}: a Lighthouse and replicas of different torchft builds may not agree "
                f"on a quorum; restart the Lighthouse from this environment (ftslurm lighthouse "
                f"restart) or install the same build; {fix}")  # fmt: skip
    return None


def installed(reqs: Sequence[Requirement]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for r in reqs:
        try:
            out[normalize(r.name)] = importlib.metadata.version(r.name)
        except importlib.metadata.PackageNotFoundError:
            out[normalize(r.name)] = None
    return out


def _pins(stack: stacks.Stack, names: Sequence[str] = CORE_PACKAGES) -> dict[str, str]:
    return {d: f"=={v}" for d, v in stack.pins if d in names}


def _install_hint(stack: stacks.Stack) -> str:
    return f"pip install -r {stack.requirements}, or pip install 'ftslurm[{stack.extra}]'"


def stack_problem(installed: Mapping[str, str | None], lighthouse_torchft: str | None = None,
                  worker: str = "torchtitan") -> str | None:  # fmt: skip
    """One line naming what does not fit a supported stack (stacks.STACKS), or None.
    The installed torchtitan chooses the stack; the other core packages must be that stack's
    pins (torchtitan 0.3 on torch 2.13 trains one step, then fails in `set_timeout`). A
    torchtitan no stack is for names every stack. The tiny worker needs no torchtitan: the
    pinned stack's torch or the other stack's both serve it."""
    titan = installed.get("torchtitan")
    if worker == "tiny":
        names = [n for n in CORE_PACKAGES if n != "torchtitan"]
        fits = [s for s in stacks.STACKS
                if version_problem(installed, _pins(s, names)) is None]  # fmt: skip
        stack = fits[0] if fits else stacks.for_torchtitan(titan) or stacks.DEFAULT
        pins = _pins(stack, names)
    else:
        stack = stacks.for_torchtitan(titan) if titan is not None else stacks.DEFAULT
        if stack is None:
            every = "; or ".join(
                ", ".join(f"{n}{spec}" for n, spec in _pins(s).items())
                + f" ({_install_hint(s)})" for s in stacks.STACKS)  # fmt: skip
            return f"torchtitan {titan} is not supported; supported: {every}"
        pins = _pins(stack)
    return version_problem(installed, pins, lighthouse_torchft, stack)


def check_stack(worker: str = "torchtitan") -> None:
    """The launcher's start-up check of the training stack, before anything starts: a torch,
    torchtitan or torchft build that is not one of the supported stacks is one line naming
    the pins (UserError: exit code 2, and no requeue: every attempt would fail the same way,
    deep in training). Read from the package metadata, nothing imported. The tiny worker
    (`worker="tiny"`) needs no torchtitan."""
    problem = stack_problem(installed_versions(), worker=worker)
    if problem:
        raise UserError(problem)
