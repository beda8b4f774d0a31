"""On the real local Slurm (3 nodes, 2 replicas): a node that keeps failing, or fails the
pre-flight check, is drained with a reason naming ftslurm and the evidence, the replica runs on
the spare node (its first failure there restarted in place: the node was still fine), and the
undo command `ftslurm doctor` prints brings the node back.

The real launcher (`python -m ftslurm.replica job`, FTSLURM_PRESET=tiny) runs in each task, with
a light worker (tests/fixtures/failure/fakepkg: `python3 -u -m torchtitan.train`, a step line
every 0.4 s, the command line simulate-failure's kill mode looks for) in place of tiny.py.
Run under the heavy lock: `flock /tmp/ftslurm-heavy.lock pytest tests/test_bad_nodes_slurm.py`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.clirun import executable, ftslurm

pytestmark = [pytest.mark.slurm]

ROOT = Path(__file__).resolve().parent.parent
FAKEPKG = Path(__file__).parent / "fixtures" / "failure" / "fakepkg"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**client.current().environment(), "FTSLURM_OUTPUTS": str(tmp / "outputs"),
            "FTSLURM_EVENTS": str(tmp / "events.jsonl"), **extra}  # fmt: skip


def _submit(tmp: Path, **extra: str) -> int:
    """A 2-task FT array whose tasks run the real launcher with the light worker."""
    # FTSLURM_PYTHON: the tiny worker's interpreter
    worker = executable(tmp / "worker.sh", f"#!/bin/bash\nPYTHONPATH={shlex.quote(str(FAKEPKG))} "
                        "exec python3 -u -m torchtitan.train\n")  # fmt: skip
    script = executable(tmp / "ft.sh", (
        "#!/bin/bash\n"
        'dir="$FTSLURM_OUTPUTS/torchft/tft-$SLURM_ARRAY_JOB_ID"; mkdir -p "$dir"\n'
        'exec >>"$dir/tft-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.out" 2>&1\n'
        f"cd {shlex.quote(str(ROOT))}\n"
        f"exec {shlex.quote(sys.executable)} -m ftslurm.replica job\n"
    ))
    (tmp / "outputs" / "torchft").mkdir(parents=True, exist_ok=True)
    env = _env(tmp, FTSLURM_PRESET="tiny", DEVICE="cpu", FTSLURM_PYTHON=str(worker),
               TORCHFT_LIGHTHOUSE="http://localhost:9", FTSLURM_HANG_TIMEOUT_S="0",
               FTSLURM_ATTEMPT_GUARD="0", STEPS="100000", **extra)  # fmt: skip
    out = subprocess.run(
        ["sbatch", "--parsable", "--array=0-1", "--job-name=tft_replica", "--requeue",
         "--open-mode=append", f"--output={tmp}/outputs/torchft/slurm-%A_%a.out", str(script)],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return int(out.stdout.strip().split(";")[0])


def _log(tmp: Path, job: int, task: int) -> str:
    p = tmp / "outputs" / "torchft" / f"tft-{job}" / f"tft-{job}_{task}.out"
    return p.read_text(errors="replace") if p.exists() else ""


def _running(job: int, task: int, restarts: int = 0, not_on: str = ""):
    def ok():
        t = client.current().array_tasks(job).get(task)
        good = t and t.state == "RUNNING" and t.restarts >= restarts and t.node != not_on
        return t if good else None

    return wait_for(ok, 60, what=f"task {job}_{task} RUNNING (restarts >= {restarts})")


def _reasons() -> dict[str, tuple[str, str]]:
    return {r.name: (r.state, r.reason) for r in client.current().node_reasons()}


def _undo_from_doctor(tmp: Path, node: str) -> list[str]:
    """The command `ftslurm doctor --json` gives to bring `node` back."""
    r = ftslurm("doctor", "--json", "--device", "cpu", env=_env(tmp), inherit=False, cwd=ROOT,
                timeout=120)  # fmt: skip
    check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "drained nodes")
    assert node in check["detail"], check
    commands = check["fix"].split(": ", 1)[1]  # "once fixed, bring each back: sudo ..."
    line = next(x for x in commands.split("; ") if f"NodeName={node} " in x)
    argv = shlex.split(line)
    return argv[1:] if argv[0] == "sudo" else argv  # the tests run as root


def _cleanup(job: int) -> None:
    env = client.current().environment()
    subprocess.run(["scancel", str(job)], env=env, timeout=30, check=False)
    live = ("RUNNING", "COMPLETING", "PENDING")
    wait_for(lambda: all(j.state not in live for j in client.current().jobs(job)), 30,
             what=f"job {job} gone")  # fmt: skip
    for node, state in client.current().nodes().items():
        if "down" in state or "drain" in state:
            client.current().update_node(node, "RESUME")


@pytest.mark.timeout(240)
def test_a_node_that_keeps_failing_is_drained_and_the_replica_moves(slurm_cluster, tmp_path):
    job = _submit(tmp_path)
    try:
        first = {i: _running(job, i) for i in (0, 1)}
        task = next((i for i, t in first.items() if t.node == "worker-1"), 1)
        bad = first[task].node
        for n in (1, 2):  # two crashes on the node: FT_NODE_MAX_FAILS=2
            t = _running(job, task)
            assert t.node == bad and t.restarts == 0, (t.node, t.restarts)
            wait_for(lambda: " loss: " in _log(tmp_path, job, task).rsplit("launching", 1)[-1],
                     30, what="a step of this attempt")  # fmt: skip
            r = ftslurm("simulate-failure", "--job", str(job), "--replica", str(task),
                        "--mode", "kill", "--count-as-bad", env=_env(tmp_path), inherit=False,
                        cwd=ROOT, timeout=120)  # fmt: skip
            assert r.returncode == 0, r.stderr
            if n == 1:  # one failure: the node is still fine, the launcher restarts in place
                wait_for(lambda: "(attempt 0, restart 1)" in _log(tmp_path, job, task), 30,
                         what="the restart in place")  # fmt: skip
        moved = _running(job, task, restarts=1, not_on=bad)
        state, reason = _reasons()[bad]
        assert "drain" in state, (state, reason)
        assert reason.startswith("ftslurm: 2 failures of this array's replicas within 30 min")
        text = _log(tmp_path, job, task)
        assert "counted against the node" in text and f"drained {bad}: ftslurm: " in text
        assert moved.node not in (bad, first[1 - task].node)
        # the other replica was never touched
        assert client.current().array_tasks(job)[1 - task].restarts == 0
        status = ftslurm("status", "--job", str(job), env=_env(tmp_path), inherit=False,
                         cwd=ROOT, timeout=120)  # fmt: skip
        assert f"{bad}" in status.stdout and "drain" in status.stdout, status.stdout
        undo = _undo_from_doctor(tmp_path, bad)
        assert undo == ["scontrol", "update", f"NodeName={bad}", "State=RESUME"]
        subprocess.run(undo, env=client.current().environment(), check=True, timeout=30)
        wait_for(lambda: "drain" not in _reasons()[bad][0], 20, what=f"{bad} back")
    finally:
        _cleanup(job)


@pytest.mark.timeout(240)
def test_a_failed_preflight_check_drains_the_node_at_once(slurm_cluster, tmp_path):
    job = _submit(tmp_path, FTSLURM_PREFLIGHT_FAIL="cpu@worker-0")

    def placed() -> bool:
        # The failing task drains its node and only then exits: until Slurm requeues it, the
        # task still shows RUNNING on the node it drained, so wait for both to run elsewhere.
        tasks = client.current().array_tasks(job).values()
        nodes = [t.node for t in tasks if t.state == "RUNNING"]
        return len(nodes) == 2 and "worker-0" not in nodes and "drain" in _reasons()["worker-0"][0]

    try:
        wait_for(placed, 90, what="both tasks RUNNING off worker-0, and worker-0 drained")
        state, reason = _reasons()["worker-0"]
        assert reason.startswith("ftslurm: pre-flight check cpu failed: check 'cpu' failed on "
                                 "purpose"), reason  # fmt: skip
        logs = "".join(_log(tmp_path, job, i) for i in (0, 1))
        assert "pre-flight: pre-flight check cpu failed" in logs and "exit code 76" in logs
        assert "pre-flight: cpu passed on worker-" in logs
        undo = _undo_from_doctor(tmp_path, "worker-0")
        subprocess.run(undo, env=client.current().environment(), check=True, timeout=30)
        wait_for(lambda: "drain" not in _reasons()["worker-0"][0], 20, what="worker-0 back")
    finally:
        _cleanup(job)
