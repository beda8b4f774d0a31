"""The parameter checksum: bit-exact, order-independent, and its log line round-trips."""

from __future__ import annotations

import pytest

from ftslurm.replica.worker import checksum

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


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


def test_lr_line_round_trips_bit_exact_inside_a_log_prefix() -> None:
    """Every param group's rate comes back as the very float logged (repr round-trips), one
    ulp apart still differs, and a checksum line is not taken for a rate line."""
    import math

    lr = 0.0007935871743486974
    ulp = math.nextafter(lr, 1.0)
    line = checksum.format_lr_line(1, 0, 12, 11, [lr, ulp, 1e-05, 0.0])
    assert line == ("ftslurm-lr replica=1 rank=0 step=12 manager_step=11 "
                    "lr=0.0007935871743486974,0.0007935871743486975,1e-05,0.0")  # fmt: skip
    text = (f"[titan] 2026-11-23 09:47:00,263 - root - INFO - {line}\n"
            + checksum.format_line(1, 0, 12, 11, "model", 28, "ab" * 32) + "\n")  # fmt: skip
    (rec,) = checksum.parse_lrs(text.splitlines())
    assert rec == checksum.LrRecord(1, 0, 12, 11, (lr, ulp, 1e-05, 0.0))
    assert [x.hex() for x in rec.lrs][:2] == [lr.hex(), ulp.hex()]


@pytest.mark.parametrize(
    "bad", ["lr=", "lr=0.1,", "lr=0.1 ,0.2", "lr=0.1;0.2", "lr=abc", "lr=1e5", "step=x"]
)
def test_malformed_lr_lines_are_not_read(bad: str) -> None:
    line = checksum.format_lr_line(0, 0, 3, 3, [0.1])
    broken = line.replace("lr=0.1", bad) if bad.startswith("lr") else line.replace("step=3", bad)
    assert list(checksum.parse_lrs([broken])) == []


def test_compare_lrs_is_by_rank_and_step_and_bit_exact() -> None:
    def rec(rank: int, step: int, *lrs: float) -> checksum.LrRecord:
        return checksum.LrRecord(0, rank, step, step, lrs)

    a = [rec(0, 4, 0.5), rec(1, 4, 0.5), rec(0, 5, 0.25), rec(0, 6, 0.0)]
    b = [rec(1, 4, 0.5), rec(0, 4, 0.5), rec(0, 5, 0.125), rec(0, 6, -0.0), rec(0, 7, 1.0)]
    assert checksum.compare_lrs(a, b) == ([(0, 4), (0, 5), (0, 6), (1, 4)], [(0, 5), (0, 6)])


def test_lr_watch_records_the_rate_each_step_used() -> None:
    """The rate the optimizer stepped with, not the one its scheduler moves on to afterwards;
    nothing when an optimizer did not step."""
    import torch

    parts = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)]
    opts = [torch.optim.AdamW([{"params": [p.weight]}, {"params": [p.bias], "lr": 0.5}], lr=0.1)
            for p in parts]  # fmt: skip
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (e + 1)) for o in opts]
    watch = checksum.LrWatch(opts)
    assert watch.take() is None
    for step in range(3):
        for part in parts:
            part(torch.ones(2)).sum().backward()
        for o, s in zip(opts, scheds, strict=True):
            o.step()
            s.step()
        assert watch.take() == [0.1 / (step + 1), 0.5 / (step + 1)] * 2
    opts[0].step()
    assert watch.take() is None  # the second optimizer did not step
    assert checksum.inner_optimizers(type("C", (), {"optimizers": opts})()) == opts
    assert checksum.inner_optimizers(opts[0]) == [opts[0]]
    assert checksum.inner_optimizers(None) == [] and checksum.LrWatch([]).take() == []


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


def test_host_copy_holds_every_dtype_and_shape_in_one_reused_buffer() -> None:
    """The background mode's host copy: bit-exact for mixed dtypes, 0-d, empty and
    non-contiguous tensors, each view aligned in one buffer that the next take() reuses."""
    import torch

    named = [
        ("w", torch.randn(5, 7).t()),  # not contiguous
        ("h", torch.randn(3, dtype=torch.bfloat16)),
        ("i", torch.arange(5, dtype=torch.int64)),
        ("mask", torch.tensor([True, False, True])),
        ("scale", torch.tensor(2.5)),
        ("empty", torch.empty(0, 4)),
    ]
    copier = checksum.HostCopy()
    copies, ready = copier.take(named)
    assert ready is None  # CPU tensors: nothing to wait for
    assert checksum.digest(copies) == checksum.digest(named)
    for (_, t), (_, c) in zip(named, copies, strict=True):
        assert c.dtype == t.dtype and c.shape == t.shape and torch.equal(c, t)
        assert c.data_ptr() % 64 == 0 or c.numel() == 0
    first = copies[0][1].data_ptr()
    for _, t in named:
        if t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.add_(1)
    assert checksum.digest(copies) != checksum.digest(named)  # a copy, not a view
    again, _ = copier.take(named)
    assert again[0][1].data_ptr() == first  # the same buffer, no new allocation
    assert checksum.digest(again) == checksum.digest(named)


def test_host_copy_grows_its_buffer_for_a_larger_shard() -> None:
    import torch

    copier = checksum.HostCopy()
    copier.take([("w", torch.ones(10))])
    big = [("w", torch.ones(10)), ("v", torch.full((1000,), 3.0))]
    copies, _ = copier.take(big)
    assert checksum.digest(copies) == checksum.digest(big)


def test_prepare_reserves_the_host_copy_before_the_first_checksum() -> None:
    """The first checksum must not page-lock the buffer in the middle of the run (9.1 s for
    11.2 GB on an H100 machine): prepare() reserves it at the first step, log() uses it."""
    import torch

    named = [("w", torch.ones(1000)), ("b", torch.zeros(10))]
    lines: list[str] = []
    sums = checksum.Checksummer(lines.append, background=True)
    sums.prepare(named)
    sums.flush()
    reserved = sums._host._buffer
    assert reserved is not None and reserved.numel() >= 4040
    sums.log(named, lambda hexd, count: hexd)
    sums.flush()
    assert sums._host._buffer is reserved
    assert lines == [checksum.digest(named)[0]]
    inline = checksum.Checksummer(lines.append, background=False)
    inline.prepare(named)
    assert inline._host._buffer is None  # no host copy without a background hash


def test_a_failed_reservation_is_said_and_the_checksum_still_comes(monkeypatch) -> None:
    import torch

    real_reserve = checksum.HostCopy.reserve
    calls: list[int] = []

    def reserve_once_failing(self: checksum.HostCopy, total: int, pinned: bool) -> None:
        calls.append(total)
        if len(calls) == 1:
            raise RuntimeError("cudaHostAlloc: out of memory")
        real_reserve(self, total, pinned)

    monkeypatch.setattr(checksum.HostCopy, "reserve", reserve_once_failing)
    named = [("w", torch.ones(8))]
    lines: list[str] = []
    sums = checksum.Checksummer(lines.append, background=True)
    sums.prepare(named)
    sums.log(named, lambda hexd, count: hexd)
    sums.flush()
    assert lines == [
        "ftslurm-checksum: reserving the host copy failed: RuntimeError: cudaHostAlloc: out of "
        "memory",
        checksum.digest(named)[0],
    ]


@pytest.mark.process
def test_checksum_speed_bench_runs_and_checks_its_copies() -> None:
    """bench/checksum_speed.py (its GPU figures are in docs/benchmarks.md), small, on CPU."""
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench" / "checksum_speed.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--mib", "8", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert out.returncode == 0, out.stderr
    assert "HostCopy.take reused: returned" in out.stdout
    assert "hashes as before it: yes" in out.stdout
