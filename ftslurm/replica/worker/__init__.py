"""The training worker: what torchrun runs on every rank (`python -m
ftslurm.replica.worker.train`), where torch, torchft and torchtitan are imported.

- `train`: the entry (shims, fixes, torchtitan's FT trainer). `tiny`: the tiny model's worker.
- `fixes` and the other patches of upstream code, each a record in `replica/patches.py`:
  `peer_watch` (a lost peer, a process that stood still), `standby` (warm spares),
  `checksum`, `ft_checkpoints`, `transport` (heal transports), `early_sync`, `cpu`,
  `startup` (a cheaper start).

No module here imports a module of `launcher/`: a worker never decides a requeue; what the
two processes share is in `replica/handoff.py`.
"""
