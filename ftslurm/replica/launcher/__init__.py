"""The launcher: the process Slurm starts for one array task (`python -m ftslurm.replica job`),
before torch is needed; it starts the training worker (`../worker/`) and judges how it ended.

- `job`: the attempt loop (banner, pre-flight, torchrun, signals).
- `lifecycle`: what it does when a run ends (`decide`), its signals and a run's note files.
- `preflight`: node health, taking a node out. `failure_history`: each task's failures, the
  bad-node rule.
- `watchdog`: a hung or stalled worker. `warm_restart`: the warm next run.
- `attempt_guard`: removes an attempt's temporary folder when the launcher is gone.

No module here imports torch, torchft or torchtitan, nor any module of `worker/`: what the
two processes share is in `replica/handoff.py`.
"""
