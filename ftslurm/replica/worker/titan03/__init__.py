"""torchtitan 0.3's configs for ftslurm's presets (`--module ftslurm.replica.worker.titan03
--config <preset>`: torchtitan imports this package's config_registry). The second stack's
counterpart of slurm/configs/*.toml; imported by torchtitan 0.3 in the worker only."""
