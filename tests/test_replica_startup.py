"""The cheaper start's cuts (replica/worker/startup.py): each must leave what trains the same.

The import checks run in a fresh interpreter: whether dynamo / inductor are imported is a
property of a process, and this one may have imported them already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm.replica.worker import startup

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def test_lazy_compiled_compiles_once_on_first_call_with_the_same_arguments() -> None:
    calls: list[tuple] = []

    def fake_compile(fn, **kwargs):
        calls.append((fn, kwargs))
        return lambda *a, **k: ("compiled", fn(*a, **k))

    stand_in = startup.lazy_compile(fake_compile)
    lazy = stand_in(abs, mode="max-autotune-no-cudagraphs")
    assert calls == []  # nothing at "import time"
    assert lazy(-3) == ("compiled", 3) and lazy(-4) == ("compiled", 4)
    assert calls == [(abs, {"mode": "max-autotune-no-cudagraphs"})]
    decorated = stand_in(dynamic=False)(len)  # the decorator form: torch.compile(**kw)(fn)
    assert decorated("abc") == ("compiled", 3)
    assert calls[-1] == (len, {"dynamic": False})


def test_switches_are_on_by_default_and_lines_name_them() -> None:
    assert startup.enabled("lazy_compile", {}) and startup.enabled("skip_torchrun", {})
    assert not startup.enabled("lazy_compile", {"FTSLURM_LAZY_COMPILE": "off"})
    assert startup.line("lazy_compile", False, "x") == (
        "[ftslurm] startup lazy_compile: OFF (FTSLURM_LAZY_COMPILE=0)"
    )
    assert startup.line("skip_torchrun", True, "why").endswith(
        "ON (why; FTSLURM_SKIP_TORCHRUN=0 turns it off)"
    )


PROBE = r"""
import json, sys
import torch
from ftslurm.replica.worker import startup
with startup.deferred_compile(sys.argv[1] == "1"):
    import torchtitan.models.attention as att
    inside = type(att.FlexAttentionWrapper._compiled_flex_attn).__name__
heavy = [m for m in ("torch._inductor.compile_fx", "torch._inductor.lowering")
         if m in sys.modules]
restored = torch.compile.__module__
import torch._dynamo
op = torch.ops.aten._flash_attention_forward_no_dropout_inplace
disallowed = id(op) in torch._dynamo.trace_rules._disallowed_callable_ids
# a deferred compile still compiles, and computes what the function does
f = startup.lazy_compile(torch.compile)(lambda x: x * 2 + 1, backend="eager")
ok = bool((f(torch.arange(3.0)) == torch.tensor([1.0, 3.0, 5.0])).all())
print(json.dumps({"inside": inside, "heavy": heavy, "restored": restored,
                  "disallowed": disallowed, "ok": ok}))
"""


def _probe(on: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if on else "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=100)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_deferred_compile_skips_inductors_compiler_and_changes_nothing_else() -> None:
    """torchtitan's attention module imported with the cut on: inductor's compiler is not
    loaded; torch.compile is upstream's again after; what torch.nn.attention.varlen tells
    dynamo at import (disallow an op) holds as without the cut; a deferred compile works."""
    on, off = _probe(True), _probe(False)
    assert on == {"inside": "LazyCompiled", "heavy": [], "restored": "torch",
                  "disallowed": True, "ok": True}  # fmt: skip
    assert off["inside"] == "function" and off["disallowed"] and off["ok"]
    assert set(off["heavy"]) == {"torch._inductor.compile_fx", "torch._inductor.lowering"}


def test_worker_hosts_a_store_that_clients_reach_on_master_port() -> None:
    """Cut 1: the store torchrun's agent hosted, now in the worker, port picked by the OS."""
    from torch.distributed import TCPStore

    environ = {"MASTER_ADDR": "localhost"}
    port = startup.host_store(environ)
    assert environ["MASTER_PORT"] == str(port) and 0 < port < 65536
    client = TCPStore("localhost", port, world_size=1, is_master=False)
    client.set("k", "v")
    assert startup._STORE.get("k") == b"v"  # type: ignore[attr-defined]
