"""`python -m ftslurm` is the same as the `ftslurm` console script (used by the sbatch scripts)."""

from ftslurm.cli import main

if __name__ == "__main__":
    main()
