"""bench/heal_speed.py on a tiny state: the JSON it prints has the promised keys and figures
that add up, every transport option delivered the survivor's values (the bench exits 1
otherwise), and `--device cuda` without a GPU is one `Error:` line (exit 2).

Runs the real script (two processes, real sockets, torchft's transports), one run each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchft")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import heal_speed  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "heal_speed.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=170,
    )


def test_the_state_is_llama_layers_up_to_the_size() -> None:
    shapes = heal_speed.state_shapes(int(2e9))
    assert shapes[0] == ("layers.0.attention.wq.weight", (4096, 4096))
    assert shapes[6] == ("layers.0.feed_forward.w3.weight", (14336, 4096))
    total = sum(4 * heal_speed._numel(s) for _, s in shapes)
    assert 1.8e9 < total <= 2e9 and shapes[-1][0].startswith("layers.2.")
    tiny = heal_speed.state_shapes(int(4e6))  # dims shrink until two layers fit
    assert len(tiny) >= 18 and tiny[0][1] == (4096 // 32, 4096 // 32)
    assert sum(4 * heal_speed._numel(s) for _, s in tiny) <= 4e6


def test_json_has_every_figure_and_they_add_up() -> None:
    done = _bench("--size-gb", "0.004", "--runs", "1", "--chunks", "2", "--settle-s", "0", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert {"size_bytes", "results", "loopback_gbps", "best_ratio_to_loopback"} <= set(out)
    assert 2e6 < out["size_bytes"] <= 4e6
    assert [r["transport"] for r in out["results"]] == ["http", "http-chunked:2", "pg"]
    for r in out["results"]:
        keys = {"transport", "end_to_end_gbps", "staging_s", "transfer_s", "load_s", "spread"}
        assert keys <= set(r), r
        assert r["end_to_end_gbps"] > 0 and r["spread"] == 0.0  # one run: no spread
        (run,) = r["runs"]
        parts = run["staging_s"] + run["transfer_s"] + run["load_s"]
        assert min(run["staging_s"], run["transfer_s"], run["load_s"]) >= 0, run
        assert parts == pytest.approx(run["end_to_end_s"], abs=2e-3), run
        assert run["end_to_end_gbps"] == pytest.approx(
            out["size_bytes"] / run["end_to_end_s"] / 1e9, rel=1e-2
        )
    pg = next(r for r in out["results"] if r["transport"] == "pg")
    assert pg["staging_s"] == 0.0  # nothing staged: its send is the transfer
    assert out["loopback_gbps"] > 0
    labels = ["loopback", "http", "http-chunked:2", "pg"]
    assert [w["transport"] for w in out["warmup"]] == labels  # one round, not counted
    best = max(r["end_to_end_gbps"] for r in out["results"])
    assert out["best_ratio_to_loopback"] == pytest.approx(best / out["loopback_gbps"], abs=2e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: --device cuda would run")
def test_cuda_without_a_gpu_is_one_error_line() -> None:
    done = _bench("--device", "cuda", "--size-gb", "0.004")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("Error: --device cuda: no CUDA device here")
    assert done.stderr.count("\n") == 1


def test_a_wrong_option_is_one_error_line() -> None:
    done = _bench("--transports", "http,ftp", "--size-gb", "0.004")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "Error: --transports: 'ftp' is not one of http, http-chunked, pg\n"


def test_a_stale_or_wrong_tensor_is_caught() -> None:
    """Each transfer fills values of its own: a joiner left with the previous transfer's
    tensors (a transport that wrote nothing) fails the check."""
    state = {f"t{i}": torch.zeros(3) for i in range(4)}
    heal_speed.fill(state, 7)
    assert heal_speed.wrong_tensors(state, 7) == []
    assert heal_speed.wrong_tensors(state, 8) == ["t0", "t1", "t2", "t3"]
    state["t2"][1] = 0.5
    assert heal_speed.wrong_tensors(state, 7) == ["t2"]
