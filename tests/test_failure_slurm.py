"""`ftslurm simulate-failure` on the real local Slurm cluster, against a light job array that
mimics the FT script (tests/fixtures/failure/mimic_ft.sh: same log layout, a python worker,
self-requeue on a crash). Each test gets a fresh array; every test cancels it and RESUMEs
every node in `finally`.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ftslurm.slurm import client
from ftslurm.wait import wait_for
from tests.clirun import ftslurm, ftslurm_popen

pytestmark = [pytest.mark.slurm]

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "failure"


@dataclass
class Mimic:
    job: int
    outputs: Path
    events: Path

    def tasks(self):
        return client.current().array_tasks(self.job)

    def log(self, task: int) -> Path:
        return self.outputs / "torchft" / f"tft-{self.job}" / f"tft-{self.job}_{task}.out"

    def text(self, task: int) -> str:
        p = self.log(task)
        return p.read_text(errors="replace") if p.exists() else ""

    def steps(self, task: int) -> int:
        return self.text(task).count(" loss: ")

    def env(self) -> dict[str, str]:
        return {
            **client.current().environment(),
            "FTSLURM_OUTPUTS": str(self.outputs),
            "FTSLURM_EVENTS": str(self.events),
        }

    def cli(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return ftslurm(*args, env={**self.env(), **(env or {})}, inherit=False, cwd=ROOT,
                       timeout=timeout)  # fmt: skip

    def popen(self, *args: str) -> subprocess.Popen:
        """The command as from a terminal: SIGHUP at its default even under `nohup pytest`."""
        return ftslurm_popen(*args, env=self.env(), inherit=False, cwd=ROOT,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))

    def signal_when(self, proc: subprocess.Popen, ready, what: str,
                    sig: signal.Signals | None = None, at_ready=None) -> tuple[str, str, object]:
        """Wait until `ready()`, note `at_ready()` then, send `sig` (None: the command ends by
        itself), and return its stdout, stderr and the note; killed if anything fails."""
        try:
            wait_for(ready, 20, 0.1, what)
            noted = at_ready() if at_ready else None
            if sig is not None:
                proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return out, err, noted

    def events_list(self) -> list[dict]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line]

    def all_running(self, timeout: float = 40) -> dict:
        def ok():
            t = self.tasks()
            return t if len(t) == 2 and all(x.state == "RUNNING" for x in t.values()) else None

        running = wait_for(ok, timeout, what="both tasks RUNNING")
        wait_for(lambda: all(self.steps(i) >= 1 for i in (0, 1)), 30, what="steps in both logs")
        return running


def submit_mimic(outputs: Path, tasks: str = "0-1") -> int:
    (outputs / "torchft").mkdir(parents=True, exist_ok=True)
    env = {**client.current().environment(), "FTSLURM_OUTPUTS": str(outputs),
           "MIMIC_PKG": str(FIX / "fakepkg")}  # fmt: skip
    out = subprocess.run(
        ["sbatch", "--parsable", f"--array={tasks}", "--job-name=tft_replica", "--requeue",
         "--open-mode=append", f"--output={outputs}/torchft/slurm-%A_%a.out",
         str(FIX / "mimic_ft.sh")],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return int(out.stdout.strip().split(";")[0])


def resume_all() -> None:
    for node, state in client.current().nodes().items():
        if "down" in state or "drain" in state:
            client.current().update_node(node, "RESUME")


def nodes_up() -> bool:
    return not any("down" in s or "drain" in s for s in client.current().nodes().values())


@pytest.fixture
def mimic(slurm_cluster, tmp_path):
    outputs = tmp_path / "outputs"
    job = submit_mimic(outputs)
    m = Mimic(job, outputs, tmp_path / "events.jsonl")
    try:
        m.all_running()
        yield m
    finally:
        subprocess.run(["scancel", str(job)], env=client.current().environment(), timeout=30,
                       check=False)  # fmt: skip
        resume_all()
        wait_for(lambda: not client.current().jobs(job) or all(
            j.state not in ("RUNNING", "COMPLETING", "PENDING") for j in client.current().jobs(job)
        ), 30, what=f"job {job} gone")  # fmt: skip


@pytest.mark.timeout(90)
def test_node_down_wait_recovered(mimic: Mimic):
    before = mimic.tasks()
    node = before[1].node
    proc = mimic.popen(
        "simulate-failure", "--job", str(mimic.job), "--replica", "1",
        "--down-for", "5", "--wait-recovered", "--timeout", "60",
    )  # fmt: skip
    try:
        seen = wait_for(
            lambda: (t := mimic.tasks()[1]).state == "PENDING" and t, 20, 0.1, "task 1 PENDING"
        )
        assert seen.restarts == 1
        assert client.current().nodes()[node].startswith("down")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    after = mimic.tasks()
    assert after[1].state == "RUNNING" and after[1].restarts == 1
    assert after[0].state == "RUNNING" and after[0].restarts == 0  # the other one untouched
    assert not client.current().nodes()[node].startswith("down")  # RESUMEd
    assert f"scontrol update NodeName={node} State=DOWN" in out
    assert "RUNNING again" in out and "restart count 1" in out
    timeline = out.split("timeline", 1)[1].splitlines()[1:]
    assert timeline[0].endswith(f"DOWN {node}")
    assert f"task {mimic.job}_1 left RUNNING (PENDING" in timeline[1]  # reason: timing
    assert timeline[2].endswith(f"RESUME {node}")
    took = float(re.search(r"took\s+([\d.]+) s", timeline[2])[1])
    assert 5.0 <= took < 15.0, timeline[2]  # --down-for 5, plus one scontrol call
    assert f"task {mimic.job}_1 RUNNING again on worker-" in timeline[3]
    assert "`launching replica` (or `launching spare`) line" in timeline[4]
    assert "(attempt 1) on worker-" in mimic.text(1)
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["node-down", "resume"]
    assert all(e["replica"] == 1 and e["node"] == node and e["job"] == str(mimic.job) for e in evs)


@pytest.mark.timeout(60)
def test_dry_run_touches_nothing(mimic: Mimic):
    before = mimic.tasks()
    node = before[1].node
    r = mimic.cli("simulate-failure", "--replica", "1", "--down-for", "5", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert f"scontrol update NodeName={node} State=DOWN 'Reason=ftslurm simulate-failure" in (
        r.stdout
    )
    assert "sleep 5" in lines and f"scontrol update NodeName={node} State=RESUME" in lines
    assert nodes_up()
    assert {i: (t.state, t.restarts) for i, t in mimic.tasks().items()} == {
        0: ("RUNNING", 0), 1: ("RUNNING", 0)
    }  # fmt: skip
    assert not mimic.events.exists()
    kill = mimic.cli("simulate-failure", "--replica", "0", "--mode", "kill", "--dry-run")
    assert kill.returncode == 0 and "kill -KILL " in kill.stdout, kill.stdout + kill.stderr
    assert "torchtitan.train" in kill.stdout
    rq = mimic.cli("simulate-failure", "--replica", "0", "--mode", "requeue", "--dry-run")
    assert f"scontrol requeue {mimic.job}_0" in rq.stdout
    assert all(t.restarts == 0 for t in mimic.tasks().values())


@pytest.mark.timeout(60)
def test_refusals_are_one_line_errors(mimic: Mimic):
    busy = {t.node for t in mimic.tasks().values()}
    spare = next(n for n in client.current().nodes() if n not in busy)
    cases = {
        "worker-99": "is not in the cluster",
        "login-0": "login node",
        spare: "runs no task of job",
    }
    for node, message in cases.items():
        r = mimic.cli("simulate-failure", "--node", node, "--job", str(mimic.job))
        assert r.returncode == 2, (node, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = mimic.cli("simulate-failure", "--replica", "7", "--job", str(mimic.job))
    assert r.returncode == 2 and "no array task 7" in r.stderr
    assert nodes_up() and not mimic.events.exists()
    # --force takes the spare node anyway (dry run only here)
    r = mimic.cli("simulate-failure", "--node", spare, "--job", str(mimic.job), "--force",
                  "--dry-run")  # fmt: skip
    assert r.returncode == 0 and f"NodeName={spare} State=DOWN" in r.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_in_the_middle_resumes_the_node(mimic: Mimic, sig: signal.Signals):
    """Ctrl-C, kill, and a closed terminal or dropped ssh (SIGHUP) while the node is DOWN."""
    node = mimic.tasks()[0].node
    proc = mimic.popen("simulate-failure", "--replica", "0", "--down-for", "120")
    out, err, _ = mimic.signal_when(
        proc, lambda: client.current().nodes()[node].startswith("down"), f"{node} DOWN", sig)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err
    assert f"Interrupted ({sig.name}): every node this run took down was RESUMEd." in err
    assert not client.current().nodes()[node].startswith("down")
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["node-down", "resume"]
    assert "guard" in evs[-1]["detail"]
    # and the replica comes back on its own
    wait_for(lambda: (t := mimic.tasks()[0]).state == "RUNNING" and t.restarts == 1, 40)


@pytest.mark.timeout(90)
def test_a_failed_resume_is_tried_again_through_the_real_scontrol(mimic: Mimic, monkeypatch):
    """The first `scontrol update ... State=RESUME` fails (a fault put around the real client in
    this process, as a controller that does not answer in time); the second try goes through
    the real scontrol, and sinfo shows the node back."""
    from ftslurm import failure, failure_plan
    from ftslurm.runner import CommandError
    from ftslurm.slurm import args
    from ftslurm.slurm.parse import parse_node_state

    class FirstResumeFails(client.SlurmClient):
        resumes = 0

        def update_node(self, node: str, state: str, reason: str | None = None) -> None:
            if state == "RESUME":
                self.resumes += 1
                if self.resumes == 1:
                    raise CommandError(args.node_update_cmd(node, state), 1,
                                       "slurm_update error: Socket timed out on send/recv "
                                       "operation")  # fmt: skip
            super().update_node(node, state, reason)

    flaky = FirstResumeFails()
    monkeypatch.setattr(client, "override", flaky)
    target = failure_plan.resolve_target(flaky.jobs(), flaky.nodes(), replica=0, node=None,
                                         job=mimic.job, here=failure.hostname())  # fmt: skip
    node = target.node
    plan = failure_plan.make_plan("node-down", target, down_for=2, reason="ftslurm test")
    lines: list[str] = []
    failure.execute(plan, say=lines.append, events_path=mimic.events)
    assert flaky.resumes == 2
    resume = f"`scontrol update NodeName={node} State=RESUME` failed (exit code 1)"
    assert lines[1].startswith(f"RESUME {node} failed ({resume}: slurm_update error: Socket")
    assert lines[2] == f"RESUMEd {node}"
    state = client.current().nodes()[node]
    assert parse_node_state(state).base in ("idle", "allocated", "mixed"), state  # RESUMEd
    # `idle*` for a moment, until its slurmd registers again (0.2 s here)
    wait_for(lambda: parse_node_state(client.current().nodes()[node]).usable, 20, 0.2,
             f"{node} usable")  # fmt: skip
    assert [e["action"] for e in mimic.events_list()] == ["node-down", "resume"]


@pytest.mark.timeout(120)
def test_kill_mode_the_job_requeues_its_own_task(mimic: Mimic):
    node = mimic.tasks()[0].node
    r = mimic.cli(
        "simulate-failure", "--replica", "0", "--mode", "kill", "--wait-recovered",
        "--timeout", "60", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["recovered"] is True and result["restarts"] == 1
    text = mimic.text(0)
    assert "worker exited with code 137" in text  # SIGKILL, as an OOM kill
    assert f"requeueing {mimic.job}_0" in text and "(attempt 1)" in text
    assert mimic.tasks()[1].restarts == 0  # the other replica untouched
    assert nodes_up() and node in client.current().nodes()
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["kill"] and "SIGKILL" in evs[0]["detail"]
    mimic.all_running()

    # requeue mode on the other replica: scontrol requeue <job>_1, back with restart count 1
    rq = mimic.cli("simulate-failure", "--replica", "1", "--mode", "requeue",
                   "--wait-recovered", "--timeout", "60", "--json")  # fmt: skip
    assert rq.returncode == 0, rq.stdout + rq.stderr
    assert f"requeued {mimic.job}_1" in rq.stderr  # --json: the text goes to stderr
    assert json.loads(rq.stdout)["restarts"] == 1
    assert "(attempt 1)" in mimic.text(1) and "worker exited" not in mimic.text(1)
    assert [e["action"] for e in mimic.events_list()] == ["kill", "requeue"]


@pytest.mark.timeout(120)
def test_kill_through_srun_the_real_cluster_path(mimic: Mimic):
    """The command a real cluster gets (`srun --jobid --overlap ... pkill` on the node), run on
    the local Slurm: only the node's worker dies (the other replica, on another node of the
    same machine, keeps its worker), and the job requeues its own task."""
    other_before = mimic.text(1).count("launching replica")
    r = mimic.cli(
        "simulate-failure", "--replica", "0", "--mode", "kill", "--wait-recovered",
        "--timeout", "60", "--json", env={"FTSLURM_KILL_VIA": "srun"},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "through srun" in r.stderr + r.stdout
    assert json.loads(r.stdout)["restarts"] == 1
    assert "worker exited with code 137" in mimic.text(0)  # SIGKILL from pkill
    assert "(attempt 1)" in mimic.text(0)
    t = mimic.tasks()
    assert t[1].state == "RUNNING" and t[1].restarts == 0
    assert mimic.text(1).count("launching replica") == other_before
    assert "worker exited" not in mimic.text(1)
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["kill"] and "--overlap" in evs[0]["detail"]


@pytest.mark.timeout(120)
def test_chaos_three_events_training_goes_on(mimic: Mimic):
    steps_before = [mimic.steps(i) for i in (0, 1)]
    r = mimic.cli(
        "simulate-failure", "--chaos", "--every", "7", "--count", "3", "--seed", "3",
        "--down-for", "2", "--job", str(mimic.job), timeout=100,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [x for x in r.stdout.splitlines() if " event " in x]
    assert len(lines) == 3, r.stdout
    assert all("node-down replica" in x for x in lines), r.stdout
    assert "chaos: 3 events (node-down x3), 0 skipped" in r.stdout
    assert nodes_up()
    evs = mimic.events_list()
    assert [e["action"] for e in evs] == ["node-down", "resume"] * 3
    # training went on: both replicas run again and log new steps
    mimic.all_running(60)
    wait_for(
        lambda: all(mimic.steps(i) > steps_before[i] + 2 for i in (0, 1)), 30, what="new steps"
    )


@pytest.mark.timeout(60)
def test_status_and_logs_on_the_cluster(mimic: Mimic):
    r = mimic.cli("status", "--job", str(mimic.job), "--json", "--no-lighthouse")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [t["replica"] for t in data["tasks"]] == [0, 1]
    for t in data["tasks"]:
        assert t["state"] == "RUNNING" and t["node"].startswith("worker-")
        assert t["restarts"] == 0 and t["attempt"] == 0 and t["last_step"] >= 1
        assert t["idle_s"] is not None and t["idle_s"] < 10
    table = mimic.cli("status")  # newest FT array of this user: this one
    assert table.returncode == 0 and f"job {mimic.job}: 2 array task(s)" in table.stdout
    logs = mimic.cli("logs", "-n", "3")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert len(lines) == 6 and {x[:4] for x in lines} == {"[r0]", "[r1]"}
    # follow: new lines keep coming, prefixed
    proc = mimic.popen("logs", "-f", "-n", "0", "--replica", "1")
    try:
        first = proc.stdout.readline()
        assert first.startswith("[r1] [titan] ") and "step" in first
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave it behind, then fail
            proc.wait()
            raise
    err = proc.stderr.read()
    assert proc.returncode == 0 and "Traceback" not in err, err  # Ctrl-C ends `logs -f` quietly
