"""How often the knob registry is parsed: by one launcher attempt and by one `ftslurm submit`.

Each `knobs.load(environment)` that parses parses every registered knob set in it; the
launcher passes one environment to a dozen functions that each read a knob or two. This counts
the parses (and the `load` calls) of:

- `launch`: one real attempt of the launcher (`python -m ftslurm.replica job`, run in this
  process), the tiny worker of 2 steps, one replica, against a real Lighthouse on a free port;
- `submit`: `ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh` (DEVICE=cpu) with
  a stand-in `sbatch` on PATH that prints `Submitted batch job 42`.

Each in a fresh child process (the counts are per process). Nothing is left behind.

    python bench/knob_parses.py
    python bench/knob_parses.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COUNTER = """
import json, sys, traceback
from ftslurm import knobs
FIRST = next(iter(knobs.KNOBS))
counts = {"parses": 0, "load_calls": 0}
is_set, load = knobs.is_set, knobs.load
def counting_is_set(env, name):
    if name == FIRST and traceback.extract_stack(limit=2)[-2].name == "load":
        counts["parses"] += 1
    return is_set(env, name)
def counting_load(env=None, device=None):
    counts["load_calls"] += env is not None and not isinstance(env, knobs.Settings)
    return load(env, device)
knobs.is_set, knobs.load = counting_is_set, counting_load
"""

LAUNCH = COUNTER + """
import os
from ftslurm import lighthouse
from ftslurm.lighthouse.config import LighthouseConfig
from ftslurm.replica.launcher import job
state = sys.argv[1]
info = lighthouse.start(LighthouseConfig(bind="127.0.0.1:0", state_dir=state))
try:
    before = dict(counts)  # the Lighthouse's own start is not the launcher's
    env = {"FTSLURM_PRESET": "tiny", "STEPS": "2", "FTSLURM_REPLICA_ID": "0",
           "FTSLURM_GROUP_SIZE": "1", "FTSLURM_SINGLE_NODE": "1", "PATH": os.environ["PATH"],
           "TORCHFT_LIGHTHOUSE": info.address, "FTSLURM_PROJECT": sys.argv[2]}
    rc = job.main(["job"], env)
finally:
    lighthouse.stop(state)
print(json.dumps({"rc": rc, **{k: counts[k] - before[k] for k in counts}}))
"""

SUBMIT = COUNTER + """
from ftslurm.cli import cli
try:
    cli(["submit", "--array=0-1", sys.argv[1]], standalone_mode=False)
finally:
    print(json.dumps(counts))
"""


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def measure() -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="knob-parses-") as tmp:
        t = Path(tmp)
        (t / "bin").mkdir()
        sbatch = t / "bin" / "sbatch"
        sbatch.write_text('#!/bin/sh\necho "Submitted batch job 42"\n')
        sbatch.chmod(0o755)
        (t / "project").mkdir()
        script = t / "project" / "llama3.1-8b-pretraining-torchft.sh"
        script.write_text((ROOT / script.name).read_text())
        env = {**os.environ, "PATH": f"{t / 'bin'}:{os.environ['PATH']}", "DEVICE": "cpu"}
        env.pop("FTSLURM_OUTPUTS", None)
        sub = subprocess.run([sys.executable, "-c", SUBMIT, str(script)], cwd=t / "project",
                             env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        launch = subprocess.run(
            [sys.executable, "-c", LAUNCH, str(t / "lighthouse"), str(t / "project")],
            cwd=t / "project", env=os.environ, capture_output=True, text=True, timeout=300,
        )
        for name, done in (("submit", sub), ("launch", launch)):
            if done.returncode != 0:
                sys.exit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return {"launch": _last_json(launch.stdout), "submit": _last_json(sub.stdout)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    got = measure()
    if args.json:
        print(json.dumps(got))
        return
    for name, c in got.items():
        extra = f" (launcher exit code {c['rc']})" if "rc" in c else ""
        print(f"{name}: {c['parses']} registry parses, {c['load_calls']} load calls "
              f"with an environment{extra}")  # fmt: skip


if __name__ == "__main__":
    main()
