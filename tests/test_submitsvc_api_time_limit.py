"""Slurm's REAL time limit reaches an FT array submitted through the Python API: the array
goes through the submit service, so it gets the FT script's `--signal=B:USR1@<s>` and its
batch shell `exec`s the launcher, which takes the final checkpoint and requeues the task.
(A `--signal=USR2@90` without `B:` signalled no process of the batch step: the job was
killed by the limit with no checkpoint.)

A 2-minute limit and a 30 s margin, as tests/test_ckpt_time_limit_slurm.py explains: USR1
comes 60-90 s after the start. Run under the heavy lock:
`flock /tmp/ftslurm-heavy.lock pytest tests/test_submitsvc_api_time_limit.py`.
"""

from __future__ import annotations

import pytest

from ftslurm import knobs, lighthouse, logvocab
from ftslurm.replica import ft_checkpoints
from ftslurm.wait import free_port, wait_for
from tests.ftjob import ANSI_RE, cancel

pytestmark = [pytest.mark.slurm, pytest.mark.training]

MARGIN_S = 30


@pytest.mark.timeout(300)
def test_an_api_array_takes_its_time_limit_checkpoint_and_requeues(slurm_cluster, tmp_path):
    import ftslurm

    outputs = tmp_path / "outputs"
    lh_dir = outputs / "lighthouse"
    lh = lighthouse.start(bind=f"0.0.0.0:{free_port()}", advertise="login-0",
                          state_dir=lh_dir, min_replicas=2)  # fmt: skip
    run = None
    try:
        config = {"DEVICE": "cpu", "FT_MODE": "per-step", "STEPS": "1000",
                  knobs.TIME_LIMIT_SIGNAL: str(MARGIN_S)}  # fmt: skip
        run = ftslurm.submit_ft_array(2, config, lh, outputs=outputs, timeout_min=2)
        submitted = (outputs / "submitit" / f"{run.job_id}_submission.sh").read_text()
        assert f"#SBATCH --signal=B:USR1@{MARGIN_S}" in submitted.splitlines(), submitted

        def text(r) -> str:
            return ANSI_RE.sub("", r.text())

        def all_took_it() -> bool:
            return all(logvocab.TIME_LIMIT in text(r) for r in run.replicas)

        wait_for(all_took_it, 240, interval=2, what="each replica's time-limit checkpoint")
        for r in run.replicas:
            got = text(r)
            # the launcher was told the margin, and ended its attempt at the signal
            assert ft_checkpoints.signal_margin_line({knobs.TIME_LIMIT_SIGNAL: str(MARGIN_S)}) \
                in got, got[-3000:]  # fmt: skip
            assert "DUE TO TIME LIMIT" not in got, got[-3000:]
    finally:
        if run is not None:
            cancel(run.job_id)
        lighthouse.stop(lh_dir)

