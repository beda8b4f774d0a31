"""The tests' tier on the second stack (ftslurm/stacks.py: torchtitan 0.3 + torch 2.15): the
tests marked `both_stacks` (heals, resumes, the time limit, restart in place, the demo, the
patch records, the upstream bugs' witnesses) run again in an environment of that stack.

`python -m tests.second_stack [pytest args]`: makes `.venv-titan03` in the checkout when it
lacks the stack (`pip install -e '.[test-titan03]'`: torch 2.15's wheel is its CUDA build,
~3 GB to download, ~2.5 min here), then runs `pytest -m both_stacks` with that venv's Python.
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
VENV = ROOT / ".venv-titan03"
STACK = stacks.TITAN03


def _has_stack(python: Path) -> bool:
    """Whether `python` has the second stack's pins and ftslurm from this checkout."""
    probe = ("import importlib.metadata as m, ftslurm, sys; "
             "print(*(m.version(d) for d in sys.argv[1:]), ftslurm.__file__)")  # fmt: skip
    names = [d for d, _ in STACK.pins]
    try:
        out = subprocess.run([str(python), "-c", probe, *names], capture_output=True,
                             text=True, timeout=120, cwd="/")  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    if out.returncode != 0:
        return False
    *have, where = out.stdout.split()
    versions = [v.split("+", 1)[0] for v in have]
    return versions == [v for _, v in STACK.pins] and Path(where).parent.parent == ROOT


def ensure_venv() -> Path:
    """The second stack's Python, installed first when missing (with progress on stderr)."""
    python = VENV / "bin" / "python"
    if python.exists() and _has_stack(python):
        return python
    started = time.monotonic()
    print(f"[second stack] installing {STACK.describe()} into {VENV} "
          f"(pip install -e '.[test-{STACK.extra}]'; ~3 GB, minutes)", file=sys.stderr,
          flush=True)  # fmt: skip
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e",
                    f".[test-{STACK.extra}]"], check=True, cwd=ROOT, timeout=1800)  # fmt: skip
    if not _has_stack(python):
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
