"""Click commands, one module each, imported lazily by ftslurm.cli."""
