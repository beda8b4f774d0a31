"""cpu.py's model flavors for CPU benchmarks (the shims themselves are exercised by every CPU
training test)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_wide_flavor_is_in_the_table_llama3_ft_reads():
    """FTSLURM_EXTRA_ARGS='--model.flavor=debugmodel_wide' finds it: llama3_ft's train spec
    shares torchtitan's llama3 table, where add_flavors puts it (a fresh interpreter: the
    table is global)."""
    code = r"""
from ftslurm.replica.worker import cpu
cpu.add_flavors()
from torchtitan.protocols.train_spec import get_train_spec
args = get_train_spec("llama3_ft").model_args["debugmodel_wide"]
print(args.dim, args.n_layers, args.n_heads, args.vocab_size)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=110)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1024", "8", "16", "2048"]
