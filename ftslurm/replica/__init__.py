"""One training replica: the launcher the sbatch scripts call (`python -m ftslurm.replica job`)
and the training worker it starts (torchrun's `python -m ftslurm.replica.train`).

Two processes share this folder; which one a module runs in is listed below (the tables are
data: tests/test_architecture.py checks that every module is in one of them, that the
launcher's side loads no torch, and that the worker's side imports nothing of the launcher's
but the notes they pass each other).

- the launcher's side (the process Slurm starts, one per array task): `job` (the attempt loop:
  banner, pre-flight, torchrun, signals), `lifecycle` (what it does when a run ends:
  `decide`, its signals and a run's note files), `preflight` (node health, taking a node out),
  `failure_history` (each task's failures, the bad-node rule), `watchdog` (a hung worker),
  `warm_restart` (the warm next run), `attempt_guard` (an attempt's temporary folder).
- the worker's side (torchrun's ranks, where torch, torchft and torchtitan are imported):
  `train` (the entry: shims, fixes, torchtitan's FT trainer), `tiny` (the tiny model's
  worker), `fixes` and the other patches (`peer_watch`, `standby`, `checksum`,
  `ft_checkpoints`, `transport`, `early_sync`, `cpu`, `startup`).
- both: `plan` (pure: knobs -> the exact command and its environment, dry-runnable),
  `patches` (the patch records), `exits` (the exit codes), `config_error` (the worker's note
  that torchtitan refused its options), `slots` (the spares' claim files), `assets`
  (tokenizer and local CPU assets).
"""

LAUNCHER_SIDE = ("__main__", "job", "lifecycle", "preflight", "failure_history", "watchdog",
                 "warm_restart", "attempt_guard")  # fmt: skip
WORKER_SIDE = ("train", "tiny", "fixes", "peer_watch", "standby", "checksum", "ft_checkpoints",
               "transport", "early_sync", "cpu", "startup")  # fmt: skip
BOTH_SIDES = ("plan", "patches", "exits", "config_error", "slots", "assets")
