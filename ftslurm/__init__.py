"""ftslurm: fault-tolerant LLM pre-training (torchtitan + torchft) on Slurm clusters.

Importing this package must stay cheap: `ftslurm --help` imports it, and it must not pull in
torch (tests/test_cli.py checks `sys.modules`). Heavy modules are imported where they are used.
"""

__version__ = "0.1.0"
