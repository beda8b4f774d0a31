"""The tests' tier on the second stack (ftslurm/stacks.py: torchtitan 0.3 + torch 2.15): the
tests marked `both_stacks` (heals, resumes, the time limit, restart in place, the demo, the
patch records, the upstream bugs' witnesses) run again in an environment of that stack.

`python -m tests.second_stack [pytest args]`: makes the venv FTSLURM_SECOND_STACK_VENV
[~/.cache/ftslurm/venv-titan03] when it lacks the stack (`pip install -e '.[test-titan03]'`:
torch 2.15's wheel is its CUDA build, ~3 GB to download, 2.5-7 min here), points its ftslurm
at this checkout when it has the stack already (`pip install --no-deps -e .`, seconds: a
clone's CI run on a machine that ran it before), then runs `pytest -m both_stacks` with that
venv's Python. Outside the checkout: a fresh clone does not download the stack again.
README command 2 runs it after the suite on the pinned stack; the first run's local Slurm
cluster is stopped by then, and this run starts its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ftslurm import stacks

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("FTSLURM_SECOND_STACK_VENV")
            or Path.home() / ".cache" / "ftslurm" / "venv-titan03")  # fmt: skip
STACK = stacks.TITAN03


def _state(python: Path) -> str:
    """"ready": `python` has the second stack's pins and ftslurm from this checkout;
    "elsewhere": the pins, ftslurm from another checkout (or none); "missing": not the pins."""
    probe = ("import importlib.metadata as m, ftslurm, sys; "
             "print(*(m.version(d) for d in sys.argv[1:]), ftslurm.__file__)")  # fmt: skip
    names = [d for d, _ in STACK.pins]
    try:
        out = subprocess.run([str(python), "-c", probe, *names], capture_output=True,
                             text=True, timeout=120, cwd="/")  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    if out.returncode != 0:
        return "elsewhere" if "No module named 'ftslurm'" in out.stderr else "missing"
    *have, where = out.stdout.split()
    if [v.split("+", 1)[0] for v in have] != [v for _, v in STACK.pins]:
        return "missing"
    return "ready" if Path(where).parent.parent == ROOT else "elsewhere"


def ensure_venv() -> Path:
    """The second stack's Python, installed first when missing (with progress on stderr)."""
    python = VENV / "bin" / "python"
    state = _state(python) if python.exists() else "missing"
    if state == "ready":
        return python
    if state == "elsewhere":  # the stack is there: only ftslurm points at this checkout now
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", "."],
                       check=True, cwd=ROOT, timeout=600)  # fmt: skip
        if _state(python) == "ready":
            return python
    started = time.monotonic()
    print(f"[second stack] installing {STACK.describe()} into {VENV} "
          f"(pip install -e '.[test-{STACK.extra}]'; ~3 GB, minutes)", file=sys.stderr,
          flush=True)  # fmt: skip
    VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e",
                    f".[test-{STACK.extra}]"], check=True, cwd=ROOT, timeout=1800)  # fmt: skip
    if _state(python) != "ready":
        sys.exit(f"[second stack] {VENV} still lacks {STACK.describe()} after the install")
    print(f"[second stack] installed in {time.monotonic() - started:.0f} s", file=sys.stderr,
          flush=True)  # fmt: skip
    return python


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):
        print("[second stack] torchtitan 0.3 needs Python >= 3.11; this is "
              f"{sys.version.split()[0]}", file=sys.stderr)  # fmt: skip
        return 2
    python = ensure_venv()
    cmd = [str(python), "-m", "pytest", "-m", "both_stacks", *argv]
    print(f"[second stack] {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
