"""early_sync.py: a restarted DiLoCo replica's first quorum before its first inner step.

The patch is checked here on torchft's real DiLoCo (a stub manager: no quorum is formed); that
healing with it stays bit-identical is checked by the training tests, which heal restarted
replicas and compare parameter checksums (tests/test_replica_training.py,
test_diloco_heal_gives_identical_replicas; the demo shows the heal but compares no checksums).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ftslurm.replica.worker import early_sync


def test_first_local_step_is_one_step_before_the_sync_point():
    assert early_sync.first_local_step(3, 0) == 2  # the CPU preset: H = 6 / 2
    assert early_sync.first_local_step(10, 2) == 7  # prepares after one step, syncs 2 later
    assert early_sync.first_local_step(1, 0) == 0


@pytest.mark.timeout(120)
def test_patch_on_torchfts_diloco_only_for_restarted_attempts():
    """In a fresh interpreter (the patch is global): attempt 0 and the switch leave DiLoCo as
    upstream; attempt 1 starts its counter so that the first inner step prepares and syncs."""
    code = r"""
import torch
from torchft import local_sgd
from ftslurm.replica.worker import early_sync

class Manager:  # what DiLoCo's constructor and its first hook touch
    _use_async_quorum = False
    quorums = 0
    def register_state_dict_fn(self, *a, **k): pass
    def allow_state_dict_read(self): pass
    def disallow_state_dict_read(self): pass
    def start_quorum(self): Manager.quorums += 1
    def current_step(self): return 0

def diloco():
    parts = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    inner = torch.optim.AdamW([p for m in parts for p in m.parameters()])
    outer = [torch.optim.SGD(m.parameters(), lr=0.7) for m in parts]
    return local_sgd.DiLoCo(Manager(), parts, inner, outer, sync_every=6)

def entered(d):
    with d:
        return Manager.quorums, d._local_step

assert early_sync.install({"FTSLURM_ATTEMPT": "0"}) is None
assert diloco()._local_step == 0
assert entered(diloco()) == (0, 0)  # upstream: no quorum before the first step
assert "OFF" in early_sync.install({"FTSLURM_ATTEMPT": "1", "FTSLURM_EARLY_FIRST_SYNC": "0"})
assert diloco()._local_step == 0
assert "ON" in early_sync.install({"FTSLURM_ATTEMPT": "2"})
d = diloco()
assert (d._local_step, d._sync_every) == (2, 3), (d._local_step, d._sync_every)
synced = []
for f in d._fragments:
    f.prepare_sync = lambda: None
    f.perform_sync = lambda f=f: synced.append(f)
# entering training: the first quorum and the fragment's sync, before any inner step
assert entered(d) == (1, 0), entered
assert len(synced) == 1
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
