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


def test_digest_is_sha256_of_names_shapes_and_raw_bytes() -> None:
    """The definition, spelled out: logs from different ftslurm versions stay comparable."""
    import hashlib

    import torch

    w = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()  # not contiguous
    h = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    expected = hashlib.sha256()
    for name, t in (("a.h", h), ("b.w", w)):
        flat = t.contiguous().reshape(-1)
        expected.update(f"{name}|{flat.dtype}|{tuple(flat.shape)}|".encode())
        expected.update(bytes(flat.view(torch.uint8).tolist()))
    assert checksum.digest([("b.w", w), ("a.h", h)]) == (expected.hexdigest(), 2)


def test_line_round_trips_inside_a_log_prefix() -> None:
    line = checksum.format_line(1, 0, 12, 11, "fragment0", 28, "ab" * 32)
    text = f"[titan] 2026-11-23 09:47:00,263 - root - INFO - {line}\nstep: 12 loss: 1\n"
    (rec,) = checksum.parse(text.splitlines())
    assert rec == checksum.Record(1, 0, 12, 11, "fragment0", 28, "ab" * 32)


@pytest.mark.parametrize("background", [False, True])
def test_checksummer_hashes_the_tensors_as_they_were_when_asked(background: bool) -> None:
    """Training changes the parameters in place right after the call: the background path must
    hash the copy it took, and emit the lines in the order they were asked for."""
    import torch

    w = torch.zeros(1 << 20)
    expected, lines = [], []
    sums = checksum.Checksummer(lines.append, background=background)
    for step in range(5):
        expected.append(f"{step} {checksum.digest([('w', w)])[0]}")
        sums.log([("w", w)], lambda hexd, count, step=step: f"{step} {hexd}")
        w.add_(1.0)  # the next optimizer step, on the training thread
    sums.flush()
    assert lines == expected
    assert len(set(lines)) == 5


def test_checksummer_says_when_a_background_hash_failed() -> None:
    import torch

    def broken_line(hexd: str, count: int) -> str:
        raise ValueError("no line today")

    lines: list[str] = []
    sums = checksum.Checksummer(lines.append, background=True)
    sums.log([("w", torch.ones(3))], broken_line)
    sums.flush()
    assert lines == ["ftslurm-checksum failed: ValueError: no line today"]


def test_background_is_the_default_on_cuda_only() -> None:
    assert checksum._background({"FTSLURM_DEVICE": "cuda"})
    assert not checksum._background({"FTSLURM_DEVICE": "cpu"})
    assert checksum._background({"FTSLURM_DEVICE": "cpu", "FTSLURM_CHECKSUM_ASYNC": "1"})
    assert not checksum._background({"FTSLURM_DEVICE": "cuda", "FTSLURM_CHECKSUM_ASYNC": "0"})
