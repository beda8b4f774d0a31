"""Test-only (tests/test_replica_heal_timeout.py): a deliberately slow checkpoint transport.

On PYTHONPATH with SLOW_HEAL_MBPS set, every Python process of the test's replicas imports
this first; when torchft's HTTP transport module is loaded, its `_streaming_save` (what the
server writes a checkpoint with) gets a writer that moves at most SLOW_HEAL_MBPS MB/s, for
heals to a step above 0 (the start-up sync stays fast). The survivor logs what it served:
  [slow-heal] served step 12: 74069500 bytes in 18.5 s
Nothing is imported until torchft's module is (the launcher itself never imports torch).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from typing import Any

RATE = float(os.environ.get("SLOW_HEAL_MBPS", "0")) * 1e6
TARGET = "torchft.checkpointing.http_transport"
PIECE = 1 << 20


class _Throttled:
    """Writes through to `f` in 1 MiB pieces, sleeping to stay under RATE."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.sent = 0
        self.t0 = time.monotonic()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for i in range(0, len(view), PIECE):
            piece = view[i : i + PIECE]
            self._f.write(piece)
            self.sent += len(piece)
            ahead = self.t0 + self.sent / RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        return len(view)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _slow_down(module: Any) -> None:
    upstream = module._streaming_save

    def _streaming_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        step = obj.get("torchft", {}).get("step", 0) if isinstance(obj, dict) else 0
        if not step:
            return upstream(obj, f, *args, **kwargs)
        out = _Throttled(f)
        upstream(obj, out, *args, **kwargs)
        took = time.monotonic() - out.t0
        print(f"[slow-heal] served step {step}: {out.sent} bytes in {took:.1f} s", flush=True)

    module._streaming_save = _streaming_save


class _Finder(importlib.abc.MetaPathFinder):
    """Finds torchft's HTTP transport module the normal way, and slows it once loaded."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _slow_down(module)

        spec.loader.exec_module = exec_module
        return spec


if RATE > 0:
    sys.meta_path.insert(0, _Finder())
