"""The parameter checksum: bit-exact, order-independent, and its log line round-trips."""

from __future__ import annotations

import pytest

from ftslurm.replica import checksum

pytestmark = pytest.mark.timeout(60)


def test_digest_is_bit_exact_and_name_ordered() -> None:
    import torch

    a = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}
    d1, n1 = checksum.digest(a.items())
    d2, _ = checksum.digest(reversed(list(a.items())))
    assert d1 == d2 and n1 == 2
    bumped = dict(a, b=torch.nextafter(a["b"], torch.tensor(2.0)))  # one ulp
    assert checksum.digest(bumped.items())[0] != d1
    renamed = {"w2": a["w"], "b": a["b"]}
    assert checksum.digest(renamed.items())[0] != d1
    assert checksum.digest({"x": torch.ones(2, dtype=torch.bfloat16)}.items())[1] == 1


def test_line_round_trips_inside_a_log_prefix() -> None:
    line = checksum.format_line(1, 0, 12, 11, "fragment0", 28, "ab" * 32)
    text = f"[titan] 2026-11-23 09:47:00,263 - root - INFO - {line}\nstep: 12 loss: 1\n"
    (rec,) = checksum.parse(text.splitlines())
    assert rec == checksum.Record(1, 0, 12, 11, "fragment0", 28, "ab" * 32)
