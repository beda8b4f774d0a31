"""The peak memory of an `ftslurm` command, for the tests of its bounds (`logs -n`, the metrics
exporter): the command runs in its own process under a small wrapper that waits for it and
reads RUSAGE_CHILDREN, so the figure is the command's alone, not pytest's; the tests hold it
to a cap of 200 MB."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ftslurm import runner
from tests.clirun import REPO

RSS_CAP_KB = 200 * 1024
# runs argv[2:] with stdout to the file argv[1]; prints its exit status and peak RSS in KiB
MEASURE = (
    "import resource, subprocess, sys\n"
    "with open(sys.argv[1], 'wb') as out:\n"
    "    rc = subprocess.call(sys.argv[2:], stdout=out)\n"
    "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def measured(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 90) -> tuple[int, int, Path, str]:  # fmt: skip
    """(exit status, peak RSS in KiB, stdout file, stderr) of `ftslurm ARGS`."""
    out = tmp_path / "stdout"
    done = runner.run([sys.executable, "-c", MEASURE, str(out), sys.executable, "-m", "ftslurm",
                       *args], timeout=timeout, check=False,
                      env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})  # fmt: skip
    rc, rss = map(int, done.stdout.split())
    return rc, rss, out, done.stderr
