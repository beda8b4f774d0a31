"""A real Slurm cluster on one machine: slurmctld + N slurmd nodes, each in its own namespace."""
