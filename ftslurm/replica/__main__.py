"""`python -m ftslurm.replica job|classic`: what the sbatch scripts exec (see job.py)."""

from __future__ import annotations

import sys

from ftslurm.errors import UserError
from ftslurm.replica.launcher.job import main
from ftslurm.runner import CommandError


def _cli() -> int:
    try:
        return main(sys.argv[1:])
    except UserError as e:
        print(f"Error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except CommandError as e:
        print(f"Error: {e.one_line()}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(_cli())
