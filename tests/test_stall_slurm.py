"""The stall on the real local Slurm with the real FT script (DEVICE=cpu, the real Lighthouse
and torchtitan): replica 1's training thread stops (`simulate-failure --mode stall`: ptrace of
its main thread) while torchft's heartbeat threads run on, so the Lighthouse keeps it. Its
launcher's watchdog ends it by its progress (a compute step overdue: 3 median steps, at least
FTSLURM_STALL_TIMEOUT_S), the survivor commits without it and never crashes, and the
replica restarts in place and heals: the same parameters at the same steps after.
Run under the heavy lock: `flock /tmp/ftslurm-heavy.lock pytest <this file>`."""

from __future__ import annotations

import json
import time

import pytest

from ftslurm.run.progress import steps_in
from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.clirun import ftslurm
from tests.ftjob import ROOT, failure_excerpt, ft_job, wait_healed_and_equal

pytestmark = [pytest.mark.slurm, pytest.mark.training]


@pytest.mark.timeout(480)
def test_a_stalled_replica_is_restarted_by_its_progress_and_the_survivor_trains_on(
        slurm_cluster, tmp_path) -> None:  # fmt: skip
    # the cross-replica timeout long, as on the 8B preset (82 s): it must not bound the stall
    with ft_job(tmp_path, steps=100000, PG_TIMEOUT_S=82) as (t, job, logs):

        def text(i: int) -> str:
            return logs[i].read_text(errors="replace") if logs[i].exists() else ""

        wait_for(lambda: min(text(0).count(" loss: "), text(1).count(" loss: ")) >= 8, 300, 1,
                 "both replicas training (8 steps: the stall rule needs timed steps)")  # fmt: skip
        t0 = time.time()
        r = ftslurm("simulate-failure", "--job", str(job), "--replica", "1", "--mode", "stall",
                    "--down-for", "90", "--json", env=t.env, inherit=False, cwd=ROOT,
                    timeout=200)  # fmt: skip
        took = time.time() - t0
        assert r.returncode == 0, r.stdout + r.stderr + failure_excerpt(text(1))
        assert json.loads(r.stdout)["mode"] == "stall"
        assert took < 60, f"the stall lasted {took:.1f} s: the watchdog did not end it"
        assert "watchdog: ending the training worker: no progress in its training step" \
            in text(1)
        wait_for(lambda: "restarting in place on " in text(1), 60, 0.5,
                 "the launcher restarting the replica in place")  # fmt: skip

        # the survivor committed without the stalled replica, well inside PG_TIMEOUT_S
        def commits_after(i: int, t: float) -> list[float]:
            return [s.time for s in steps_in(text(i)) if s.time is not None and s.time > t]

        first = wait_for(lambda: (commits_after(0, t0 + 1) or [None])[0], 60, 0.5,
                         "the survivor's next commit")  # fmt: skip
        assert first - t0 < 20, f"the survivor's next commit came {first - t0:.1f} s after"
        # ... and never crashed: its task is the same attempt, never restarted
        log0 = text(0)
        assert "exited with code" not in log0 and "watchdog" not in log0, failure_excerpt(log0)
        tasks = client.current().array_tasks(job)
        assert tasks[0].restarts == 0 and tasks[0].state == "RUNNING"

        # the stalled replica healed from the survivor: the same parameters at the same steps
        after = lambda: text(1).split("(attempt 0, restart 1)", 1)[1]  # noqa: E731
        wait_healed_and_equal(after, lambda: text(0))
