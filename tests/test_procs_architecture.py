"""The process toolkit's boundaries, read from the source: one stop (only `procs` signals a
process by pid, and `runner` its own children), one wait (only `ftslurm.wait` polls against a
deadline in the toolkit's modules) and one timeout exception (`WaitTimeout`, a TimeoutError;
no bare TimeoutError raised for a wait). Each rule is also run on a small piece of source that
breaks it, so a rule that could never fail is caught too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ftslurm"

# the process toolkit's modules: these wait only through ftslurm.wait
TOOLKIT = (
    "ftslurm/wait.py", "ftslurm/procs.py", "ftslurm/daemon.py", "ftslurm/runner.py",
    "ftslurm/lighthouse/lifecycle.py", "ftslurm/lighthouse/launcher.py", "ftslurm/failure.py",
    "ftslurm/commands/failure.py", "ftslurm/cluster/local.py", "ftslurm/commands/cluster.py",
    "ftslurm/replica/attempt_guard.py", "ftslurm/replica/peer_watch.py",
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
BARE_TIMEOUTS = {
    ("ftslurm/lighthouse/status_page.py", "http_get"): "an HTTP read that ran past its "
    "deadline: an I/O error with errno ETIMEDOUT, as the socket module raises, not a wait",
}


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


def _package() -> dict[str, str]:
    return {p.relative_to(REPO).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


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
        loops = deadline_loops((REPO / path).read_text())
        loops = [f for f in loops if (path, f.split(" (")[0]) not in NOT_WAITS]
        if loops:
            found[path] = loops
    assert found == {}, "wait with ftslurm.wait.wait_for"
    # ... where the one loop is, and is seen by the same reading
    own = deadline_loops((REPO / "ftslurm/wait.py").read_text())
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
