"""bench/heal_speed.py on a tiny state: the JSON it prints has the promised keys and figures
that add up, every transport option delivered the survivor's values (the bench exits 1
otherwise), and `--device cuda` without a GPU is one `Error:` line (exit 2).

Runs the real script (two processes, real sockets, torchft's transports), one run each."""

from __future__ import annotations

import json
import os
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
    done = _bench("--size-gb", "0.004", "--runs", "1", "--chunks", "2", "--settle-s", "0",
                  "--quiet-wait-s", "0", "--extra-rounds", "0", "--json")  # fmt: skip
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
        cpu = run["cpu"]  # where the CPU went in that run: a slow run says why
        assert cpu["ours_s"] == pytest.approx(
            cpu["survivor_cpu_s"] + cpu["joiner_cpu_s"], abs=0.011
        )
        assert cpu["others_s"] >= 0 and cpu["steal_s"] >= 0 and cpu["waited_for_quiet_s"] == 0
        assert isinstance(cpu["busiest_others"], list)
    pg = next(r for r in out["results"] if r["transport"] == "pg")
    assert out["cpus"] == "any" and out["pinned_cpus"] is None  # the scheduler's choice
    assert len(out["loopback_runs_cpu"]) == 1
    for r in out["results"]:  # one run, counted whether or not other load disturbed it
        assert r["counted_runs"] == 1 and r["all_runs_gbps"] == r["end_to_end_gbps"]
        assert r["disturbed_runs"] == int(r["runs"][0]["cpu"]["disturbed"])
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


def test_the_machines_cpu_counters_move_with_work() -> None:
    """/proc/stat's busy seconds grow by the CPU a busy loop burns; the loop's own process is in
    process_cpu() with its time."""
    import os
    import time

    before, procs = heal_speed.machine_cpu(), heal_speed.process_cpu()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = heal_speed.machine_cpu()
    assert after["busy_s"] - before["busy_s"] >= 0.2
    assert heal_speed.process_cpu()[os.getpid()][1] - procs[os.getpid()][1] >= 0.2
    assert max(cpu for _, cpu in heal_speed._busiest_others(procs, set())) >= 0.2  # this one
    names = [name for name, _ in heal_speed._others_since({}, set())]
    assert any(n.startswith("[") for n in names)  # kernel threads are told apart
    record = heal_speed._others_record(procs, set())
    assert record["other_processes_s"] >= 0.2  # this process, not a kernel thread


def test_wait_quiet_gives_up_at_its_limit_under_load() -> None:
    """Limit 0: no wait. Under load (a process spinning a whole CPU) the wait ends at its limit
    with None, and the run goes ahead."""
    assert heal_speed.wait_quiet(0) == 0.0
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    spinner = ctx.Process(target=_spin, args=(3.0,), daemon=True)
    spinner.start()
    try:
        assert heal_speed.wait_quiet(1.0) is None
    finally:
        spinner.kill()
        spinner.join(timeout=10)


def _spin(seconds: float) -> None:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_cpu_placements() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert heal_speed.cpus_for("one") == (cpus[0], cpus[0])
    assert heal_speed.cpus_for("two") == ((cpus[0], cpus[1]) if len(cpus) >= 2 else None)
    assert heal_speed.cpus_for("any") is None


def _cpu(others: float = 0.0, steal: float = 0.0, waited: float | None = 0.0) -> dict:
    return {"other_processes_s": others, "steal_s": steal, "waited_for_quiet_s": waited}


def test_a_run_is_disturbed_by_other_load_not_by_its_speed() -> None:
    assert not heal_speed.disturbed(_cpu(others=0.14), 0.5)  # limit 0.1 + 0.05
    assert heal_speed.disturbed(_cpu(others=0.16), 0.5)
    assert not heal_speed.disturbed(_cpu(others=0.35), 3.0)  # limit 0.4 for a 3 s run
    assert heal_speed.disturbed(_cpu(steal=0.5), 3.0)
    assert heal_speed.disturbed(_cpu(waited=None), 0.5)  # never got a quiet start


def test_headline_counts_the_undisturbed_runs_when_there_are_enough() -> None:
    calm = [{"cpu": {"disturbed": False}, "x": i} for i in range(3)]
    hit = [{"cpu": {"disturbed": True}, "x": 9}]
    assert heal_speed._counted(calm + hit, 3) == calm
    assert heal_speed._counted(calm[:2] + hit, 3) == calm[:2] + hit  # too few: all of them
    assert heal_speed._enough([calm, calm + hit], 3)
    assert not heal_speed._enough([calm, calm[:2] + hit], 3)
