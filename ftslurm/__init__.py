"""ftslurm: fault-tolerant LLM pre-training (torchtitan + torchft) on Slurm clusters.

Importing this package must stay cheap: `ftslurm --help` imports it, and it must not pull in
torch (tests/test_cli.py checks `sys.modules`). Heavy modules are imported where they are used.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """The Python API (`ftslurm.submit_ft_array`, ...) is imported on first use only."""
    if name in ("submit_ft_array", "submit_classic", "FTArray", "ReplicaHandle", "ReplicaEnded"):
        from ftslurm import api

        return getattr(api, name)
    raise AttributeError(f"module 'ftslurm' has no attribute {name!r}")
