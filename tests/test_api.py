"""The Python API (ftslurm.api, on submitit): pure parts without Slurm, then a real 2-replica FT
array and the classic job on the local Slurm cluster through `ftslurm.submit_ft_array` /
`ftslurm.submit_classic`."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

import ftslurm
from ftslurm import api, lighthouse
from ftslurm.errors import UserError
from ftslurm.slurm import args, client
from ftslurm.wait import free_port, wait_for
from tests import fakeslurm
from tests.fakeslurm import FakeSlurm
from tests.ftjob import (
    ANSI_RE,
    KNOB_ENV_RE,
    failure_excerpt,
    resume_all_nodes,
    start_lighthouse,
)

pytestmark = pytest.mark.unit

submitit = pytest.importorskip("submitit")


# ------------------------------------------------------------------ pure parts, no Slurm


def test_package_exports_the_api_lazily():
    assert ftslurm.submit_ft_array is api.submit_ft_array
    assert ftslurm.FTArray is api.FTArray and ftslurm.ReplicaHandle is api.ReplicaHandle
    assert ftslurm.submit_classic is api.submit_classic


@pytest.mark.parametrize(
    "recorded, partition, minutes",
    [("infinite", None, 0), ("infinite", "main", 0), ("2days", None, 2 * 1440 + 3 * 60 + 5)],
)
def test_partition_time_limit_from_sinfo(recorded, partition, minutes, monkeypatch):
    """`sinfo -h -o '%P %l'` recorded on the local cluster (MaxTime UNLIMITED, and
    2-03:04:05, which Slurm shows rounded up to 2-03:05:00): the --time every replica gets,
    the default partition's (marked *) when none is named."""
    fake = FakeSlurm().install(monkeypatch)
    fake.on(args.sinfo_limits_cmd(), fakeslurm.recorded(f"sinfo_partition_limits_{recorded}.txt"))
    assert api.partition_time_limit(partition) == minutes
    assert fake.calls == [["sinfo", "-h", "-o", "%P %l"]]
    with pytest.raises(UserError, match=r"partition 'h100' not found \(sinfo lists main\)"):
        api.partition_time_limit("h100")


def _sbatch_text(params: dict, folder: Path, replicas: int = 2) -> str:
    """The sbatch file submitit writes for an array of `replicas` with these parameters."""
    from submitit.slurm import slurm

    eq = submitit.SlurmExecutor._equivalence_dict()
    ex_params = {eq.get(k, k): v for k, v in params.items()}
    if "mem" in ex_params:
        ex_params["mem"] = slurm._convert_mem(ex_params["mem"])
    return slurm._make_sbatch_string(command="CMD", folder=folder, map_count=replicas, **ex_params)


def test_cpu_parameters_make_the_sbatch_lines_of_ftslurm_submit(tmp_path):
    params = api.executor_parameters("cpu", 1, time=0, job_name="tft_replica")
    text = _sbatch_text(params, tmp_path)
    lines = {ln for ln in text.splitlines() if ln.startswith("#SBATCH")}
    for want in ("--array=0-1%2", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1",
                 "--gpus-per-node=0", "--requeue", "--open-mode=append", "--job-name=tft_replica",
                 "--time=0"):  # fmt: skip
        assert f"#SBATCH {want}" in lines, (want, text)
    assert "--exclusive" not in text
    assert "srun" not in text  # the launcher runs in the batch step, as in the sbatch script


def test_gpu_parameters_ask_for_the_scripts_resources_and_user_options_win(tmp_path):
    params = api.executor_parameters(
        "cuda", 8, partition="h100", timeout_min=600, mem_gb=1500,
        slurm_additional_parameters={"reservation": "r1"},
    )  # fmt: skip
    text = _sbatch_text(params, tmp_path, replicas=4)
    for want in ("--gpus-per-node=8", "--cpus-per-task=128", "--exclusive", "--requeue",
                 "--partition=h100", "--time=600", "--mem=1500GB", "--reservation=r1",
                 "--array=0-3%4"):  # fmt: skip
        assert f"#SBATCH {want}" in text, (want, text)


def test_gpu_parameters_ask_for_all_node_memory_unless_the_caller_sizes_it(tmp_path):
    # --exclusive alone gives only the memory asked for (sbatch(1)); the scripts say --mem=0
    text = _sbatch_text(api.executor_parameters("cuda", 8), tmp_path)
    assert "#SBATCH --mem=0GB" in text.splitlines(), text
    assert "--mem=0" not in _sbatch_text(api.executor_parameters("cpu", 1), tmp_path)
    for option in ({"mem_gb": 64}, {"slurm_mem_per_cpu": "4G"},
                   {"slurm_additional_parameters": {"mem-per-gpu": "80G"}}):  # fmt: skip
        text = _sbatch_text(api.executor_parameters("cuda", 8, **option), tmp_path)
        assert "--mem=0" not in text, (option, text)


def test_secrets_in_config_are_refused_before_anything_is_pickled():
    with pytest.raises(UserError, match="WANDB_API_KEY must not be in config"):
        api._knobs({"DEVICE": "cpu", "WANDB_API_KEY": "x"})
    assert api._knobs("llama3_8b_diloco") == {"FTSLURM_PRESET": "llama3_8b_diloco"}


def test_bad_knobs_and_addresses_are_user_errors_before_submission(tmp_path):
    with pytest.raises(UserError, match="DEVICE='tpu' is not supported"):
        api.submit_ft_array(2, {"DEVICE": "tpu"}, "http://login-0:1", outputs=tmp_path)
    with pytest.raises(UserError, match="give the address replicas use"):
        api.submit_ft_array(2, {"DEVICE": "cpu"}, "login-0:29510", outputs=tmp_path)
    with pytest.raises(UserError, match="replicas=0"):
        api.submit_ft_array(0, {"DEVICE": "cpu"})
    with pytest.raises(UserError, match=r"replicas='2': need a whole number"):
        api.submit_ft_array("2", {"DEVICE": "cpu"})
    with pytest.raises(UserError, match="nodes=True: need a whole number"):
        api.submit_classic(True, {"DEVICE": "cpu"})
    import numpy as np

    api._count("replicas", np.int64(2))  # numpy integers are whole numbers too


# Golden sbatch files of the API path: what submitit hands to `sbatch` for a fixed call.
# FTSLURM_UPDATE_GOLDEN=1 rewrites them (then read the diff before committing it); read at
# import, since the tests clear the FTSLURM_ knobs.
GOLDEN_DIR = Path(__file__).parent / "fixtures" / "api"
UPDATE_GOLDEN = os.environ.get("FTSLURM_UPDATE_GOLDEN") == "1"
SLURM_FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


@pytest.fixture
def fake_slurm_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins on PATH: `sbatch` keeps the file it is given (once) and answers job 4242;
    `sinfo` prints a recorded partition list (main*, 2-03:05:00); `srun` must not run. The
    submitting shell's knobs are cleared: the golden file must not depend on them.
    Returns where the sbatch file lands."""
    bin_dir, captured = tmp_path / "bin", tmp_path / "submitted.sbatch"
    bin_dir.mkdir()
    stubs = {
        # the file is the last argument: the submit service gives sbatch its options first
        "sbatch": f'[ ! -e "{captured}" ] || {{ echo "sbatch called twice" >&2; exit 1; }}\n'
                  'for a; do file=$a; done\n'
                  f'cp "$file" "{captured}" && echo 4242\n'
                  f'echo "$* margin=${{FTSLURM_TIME_LIMIT_SIGNAL_S:-}}" > "{captured}.argv"\n',
        "sinfo": f'cat "{SLURM_FIXTURES / "sinfo_partition_limits_2days.txt"}"\n',
        "srun": 'echo "srun must not run at submission" >&2; exit 99\n',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    for var in [k for k in os.environ if KNOB_ENV_RE.match(k)]:
        monkeypatch.delenv(var)
    (tmp_path / "slurm.conf").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    return captured


def _check_golden(name: str, text: str) -> None:
    golden = GOLDEN_DIR / name
    if UPDATE_GOLDEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{name} changed; FTSLURM_UPDATE_GOLDEN=1 rewrites it"


def _portable(sbatch: str, tmp_path: Path) -> str:
    """The sbatch text without this machine's paths."""
    return sbatch.replace(sys.executable, "<python>").replace(str(tmp_path), "<tmp>")


@pytest.mark.process
def test_ft_array_sbatch_is_the_golden_file(tmp_path, fake_slurm_commands):
    out = tmp_path / "outputs"
    run = api.submit_ft_array(
        2, {"DEVICE": "cuda", "STEPS": "100"}, "http://login-0:29510", outputs=out,
        partition="main", account="ml-team",
    )  # fmt: skip
    _check_golden("submit_ft_array.sbatch",
                  _portable(fake_slurm_commands.read_text(), tmp_path))  # fmt: skip
    assert (run.job_id, [r.job_id for r in run.replicas]) == (4242, ["4242_0", "4242_1"])
    # the time-limit signal of the FT script: USR1 to the batch shell, which execs submitit's
    # runner (the launcher), and the margin in the job's environment for the launcher to say
    sbatch = fake_slurm_commands.read_text()
    assert "#SBATCH --signal=B:USR1@300" in sbatch.splitlines() and "USR2" not in sbatch
    assert sbatch.rstrip().splitlines()[-1].startswith("exec ")
    sent = Path(f"{fake_slurm_commands}.argv").read_text().split()
    assert sent[0] == "--parsable" and sent[-1] == "margin=300", sent
    # what each array task unpickles and runs: the launcher with these knobs, its index
    knobs = {"DEVICE": "cuda", "STEPS": "100", "TORCHFT_LIGHTHOUSE": "http://login-0:29510",
             "FTSLURM_OUTPUTS": str(out)}  # fmt: skip
    for i, replica in enumerate(run.replicas):
        sub = replica.submitit_job.submission()
        assert (sub.function, sub.args) == (api.ReplicaTask("job", knobs, str(out)), (i,))


@pytest.mark.process
def test_classic_sbatch_is_the_golden_file(tmp_path, fake_slurm_commands):
    out = tmp_path / "outputs"
    job = api.submit_classic(2, {"DEVICE": "cuda"}, outputs=out, partition="main",
                             account="ml-team")  # fmt: skip
    _check_golden("submit_classic.sbatch", _portable(fake_slurm_commands.read_text(), tmp_path))
    assert (job.job_id, job.kind) == ("4242", "classic")
    # no time-limit checkpoint in the classic job: no margin said to it
    assert Path(f"{fake_slurm_commands}.argv").read_text().split()[-1] == "margin="
    sub = job.submitit_job.submission()
    knobs = {"DEVICE": "cuda", "FTSLURM_OUTPUTS": str(out)}
    assert (sub.function, sub.args) == (api.ReplicaTask("classic", knobs, str(out)), ())


def _array_with_states(tmp_path, *sequence: dict[int, str]) -> api.FTArray:
    """An FTArray whose squeue answers are `sequence`, one per poll (the last one repeats)."""
    run = api.FTArray(job_id=7, replicas=[], log_dir=tmp_path, lighthouse="",
                      submitit_folder=tmp_path)  # fmt: skip
    answers = list(sequence)
    run._snapshot = lambda: (answers.pop(0) if len(answers) > 1 else answers[0], set())  # type: ignore[method-assign]
    return run


@pytest.mark.timeout(30)
def test_wait_until_stops_when_a_replica_has_ended(tmp_path):
    """A FAILED replica will never be RUNNING: said at once (after the requeue grace), not
    after the whole timeout; a final state seen only briefly (a requeue) is waited through."""
    run = _array_with_states(tmp_path, {0: "FAILED", 1: "RUNNING"})
    t0 = time.monotonic()
    with pytest.raises(ftslurm.ReplicaEnded, match="replica 0 of job 7 is FAILED"):
        run.wait_until("RUNNING", timeout=20, interval=0.02, ended_grace=0.2)
    assert time.monotonic() - t0 < 5
    requeued = _array_with_states(
        tmp_path, {0: "NODE_FAIL", 1: "RUNNING"}, {0: "PENDING", 1: "RUNNING"},
        {0: "RUNNING", 1: "RUNNING"},
    )  # fmt: skip
    assert requeued.wait_until("running", timeout=5, interval=0.01, ended_grace=1) == {
        0: "RUNNING", 1: "RUNNING"}  # fmt: skip
    done = _array_with_states(tmp_path, {0: "COMPLETED", 1: "COMPLETED"})
    assert done.wait_until("completed", timeout=5, interval=0.01)[1] == "COMPLETED"
    with pytest.raises(UserError, match="'RUNING' is not a Slurm job state"):
        done.wait_until("RUNING")
    with pytest.raises(UserError, match="None is not a Slurm job state"):
        done.wait_until(None)  # type: ignore[arg-type]
    forgotten = _array_with_states(tmp_path, {0: "UNKNOWN", 1: "RUNNING"})
    with pytest.raises(ftslurm.ReplicaEnded, match="replica 0 of job 7 is UNKNOWN"):
        forgotten.wait_until("RUNNING", timeout=20, interval=0.02, ended_grace=0.2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("recorded", ["squeue_requeue_hold.json", "squeue_requeue_hold.txt"])
def test_wait_until_stops_on_a_held_replica(tmp_path, monkeypatch, recorded):
    """Recorded on Slurm 22.05 after `scontrol requeuehold 4_0`: PENDING with a hold reason
    (JobHeldUser in --json, "job requeued in held state" in text, from a Slurm without
    `squeue --json`); it never runs by itself, so wait_until says so instead of waiting out
    its timeout."""
    squeue = args.squeue_json_cmd() if recorded.endswith(".json") else ["squeue", "-r"]
    fake = FakeSlurm().on(squeue, fakeslurm.recorded(recorded)).install(monkeypatch)
    handles = [api.ReplicaHandle(f"4_{i}", i, tmp_path / "x") for i in range(3)]
    run = api.FTArray(4, handles, tmp_path, "", tmp_path)
    assert run.states()[0] == "PENDING"
    with pytest.raises(ftslurm.ReplicaEnded, match=r"replica 0 of job 4 is held \(PENDING\): "
                       r"it will not be RUNNING until released \(scontrol release 4_0\)"):
        run.wait_until("RUNNING", timeout=20, interval=0.02, ended_grace=0.2)
    assert {tuple(c[:2]) for c in fake.calls} <= {("squeue", "--json"), ("squeue", "-r"),
                                                  ("scontrol", "show")}  # fmt: skip


def test_cancel_is_one_scancel_of_the_array(tmp_path, monkeypatch):
    fake = FakeSlurm().on(["scancel"], "").install(monkeypatch)
    api.FTArray(4, [api.ReplicaHandle("4_1", 1, tmp_path / "x")], tmp_path, "", tmp_path).cancel()
    api.ReplicaHandle("4_1", 1, tmp_path / "x").cancel()
    assert fake.calls == [["scancel", "4"], ["scancel", "4_1"]]


def test_replica_task_env_lets_slurm_name_the_replica_and_pickles(tmp_path):
    task = api.ReplicaTask("job", {"DEVICE": "cpu", "STEPS": "5"}, str(tmp_path))
    node_env = {"SLURM_ARRAY_JOB_ID": "41", "SLURM_ARRAY_TASK_ID": "1", "FTSLURM_REPLICA_ID": "7",
                "DEVICE": "cuda", "WANDB_API_KEY": "k"}  # fmt: skip
    env = task.env(node_env)
    assert "FTSLURM_REPLICA_ID" not in env  # a stale export must not rename the replica
    assert env["DEVICE"] == "cpu" and env["WANDB_API_KEY"] == "k"  # knobs win; secrets from env
    assert task.log_path(env) == tmp_path / "torchft" / "tft-41" / "tft-41_1.out"
    # one replica is submitted as a plain job: task 0 of a group of 1, run named by the job
    single = task.env({"SLURM_JOB_ID": "50"})
    assert (single["FTSLURM_REPLICA_ID"], single["FTSLURM_GROUP_SIZE"]) == ("0", "1")
    assert task.log_path(single) == tmp_path / "torchft" / "tft-50" / "tft-50_0.out"
    assert pickle.loads(pickle.dumps(task)) == task
    classic = api.ReplicaTask("classic", {}, str(tmp_path))
    assert classic.log_path({"SLURM_JOB_ID": "9"}) == tmp_path / "classic-9.out"


@pytest.mark.timeout(60)
def test_replica_task_runs_the_launcher_into_the_scripts_log(tmp_path, monkeypatch):
    """The callable submitit runs, here in-process with a dry run: the launcher's banner goes
    to tft-<job>/tft-<job>_<task>.out (appended), where `ftslurm report` looks."""
    for k, v in {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "1",
                 "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_RESTART_COUNT": "3"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    old_usr2 = signal.getsignal(signal.SIGUSR2)
    try:
        task = api.ReplicaTask("job", {"DEVICE": "cpu", "FTSLURM_DRY_RUN": "1"}, str(tmp_path))
        log = tmp_path / "torchft" / "tft-77" / "tft-77_1.out"
        log.parent.mkdir(parents=True)
        log.write_text("earlier attempt\n")
        assert task(1) == 0
        text = log.read_text()
        assert text.startswith("earlier attempt\n")
        assert "launching replica 1 (attempt 3) on " in text
        assert "--fault_tolerance.replica_id=1" in text
        assert "--fault_tolerance.group_size=2" in text
        assert "dry run (FTSLURM_DRY_RUN=1)" in text
        with pytest.raises(RuntimeError, match="replica 0 != array task 1"):
            task(0)
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN  # submitit's USR2 is ignored
    finally:
        signal.signal(signal.SIGUSR2, old_usr2)


# ------------------------------------------------------------------ on the local Slurm cluster


def _gone(job: int) -> bool:
    jobs = client.current().jobs(job)
    return all(j.state not in ("PENDING", "RUNNING", "COMPLETING") for j in jobs)


@pytest.mark.slurm
@pytest.mark.training
@pytest.mark.timeout(360)
def test_api_ft_array_two_replicas_join_one_quorum(slurm_cluster, tmp_path):
    outputs = tmp_path / "outputs"
    lh_dir = outputs / "lighthouse"
    lh = start_lighthouse(lh_dir)
    run = None
    try:
        run = ftslurm.submit_ft_array(
            replicas=2, config={"DEVICE": "cpu", "STEPS": "1000"}, lighthouse=lh, outputs=outputs
        )
        assert [r.replica_id for r in run.replicas] == [0, 1]
        assert [r.job_id for r in run.replicas] == [f"{run.job_id}_0", f"{run.job_id}_1"]
        assert run.log_dir == outputs / "torchft" / f"tft-{run.job_id}"
        assert [r.log_path for r in run.replicas] == [
            run.log_dir / f"tft-{run.job_id}_{i}.out" for i in (0, 1)
        ]
        assert run.lighthouse == lh.address
        submission = (outputs / "submitit" / f"{run.job_id}_submission.sh").read_text()
        assert "#SBATCH --requeue" in submission and "#SBATCH --array=0-1%2" in submission

        def both_in_quorum() -> bool:
            text = Path(lh.log_path).read_text(errors="replace")
            return any("Quorum!" in ln and "torchtitan_ft_0:" in ln and "torchtitan_ft_1:" in ln
                       for ln in text.splitlines())  # fmt: skip

        wait_for(both_in_quorum, 240, interval=1, what="a Quorum! with both replicas")
        assert run.wait_until("RUNNING", timeout=10) == {0: "RUNNING", 1: "RUNNING"}
        assert run.replicas[1].state == "RUNNING"
        nodes = set()
        for r in run.replicas:
            text = ANSI_RE.sub("", r.text())
            assert f"launching replica {r.replica_id} (attempt 0) on worker-" in text
            nodes.add(text.split(" on ", 1)[1].split()[0])
        assert len(nodes) == 2  # one node per replica
        # submitit's own logs stay out of the run folder
        assert sorted(p.name for p in run.log_dir.glob("*.out")) == [
            f"tft-{run.job_id}_0.out",
            f"tft-{run.job_id}_1.out",
        ]
        # and `ftslurm report` understands the run
        from ftslurm.report import build_report

        rep = build_report(run.log_dir, lighthouse=[lh.log_path]).to_json()
        launched = {int(a["replica"]) for a in rep["attempts"] if a["source"] == "launch"}
        assert launched == {0, 1}
        assert any(sorted(map(int, q["participants"])) == [0, 1] for q in rep["quorums"])
    finally:
        if run is not None:
            run.cancel()
            wait_for(lambda: _gone(run.job_id), 60, what="the array to end")
        lighthouse.stop(lh_dir)


@pytest.mark.slurm
@pytest.mark.training
@pytest.mark.timeout(200)
def test_api_replica_whose_node_goes_down_is_requeued_into_the_same_log(slurm_cluster, tmp_path):
    """--requeue kept: node DOWN -> Slurm requeues the task, submitit's pickle is unpickled
    again, and the launcher's `attempt 1` banner lands in the same tft-<job>_<i>.out."""
    run = None
    try:
        # no Lighthouse needed: only the launcher's banner lines are looked at
        run = ftslurm.submit_ft_array(2, {"DEVICE": "cpu"}, "http://login-0:1", outputs=tmp_path)
        replica = run.replicas[1]
        wait_for(lambda: "(attempt 0)" in replica.text(), 90, what="replica 1 launched")
        node = {j.array_task_id: j.node for j in client.current().jobs(run.job_id)}[1]
        client.current().update_node(node, "DOWN", "ftslurm api test")
        try:
            wait_for(lambda: replica.state == "PENDING", 30, what="replica 1 requeued")
            assert run.states()[0] == "RUNNING"
        finally:
            client.current().update_node(node, "RESUME")
        wait_for(lambda: "(attempt 1)" in replica.text(), 90, what="attempt 1 in the same log")
        assert replica.text().count("launching replica 1 (attempt") == 2
        assert {j.array_task_id: j.restarts for j in client.current().jobs(run.job_id)}[1] == 1
    finally:
        if run is not None:
            run.cancel()
            wait_for(lambda: _gone(run.job_id), 60, what="the array to end")
        resume_all_nodes()


@pytest.mark.slurm
@pytest.mark.training
@pytest.mark.timeout(300)
def test_api_classic_job_runs_on_two_nodes_to_completion(slurm_cluster, tmp_path):
    job = None
    try:
        job = ftslurm.submit_classic(
            nodes=2, config={"DEVICE": "cpu", "STEPS": "2", "RDZV_PORT": str(free_port())},
            outputs=tmp_path,
        )  # fmt: skip
        assert job.kind == "classic" and job.log_path == tmp_path / f"classic-{job.job_id}.out"
        assert (
            "--requeue" not in (tmp_path / "submitit" / f"{job.job_id}_submission.sh").read_text()
        )
        final = job.wait(timeout=240)
        log = job.text()
        assert final == "COMPLETED", failure_excerpt(log)
        assert log.count("launching classic job") == 1
        assert "Training completed" in log
        assert log.count("dp_replicate=2") == 2  # one rank on each of the two nodes
    finally:
        if job is not None:
            job.cancel()


def test_doc_example_is_valid_python():
    """The module docstring's example (what docs/api.md shows) parses, and calls what exists
    with arguments it takes."""
    import ast
    import inspect

    doc = api.__doc__.split("\n\n", 2)[1]
    tree = ast.parse("\n".join(ln[4:] for ln in doc.splitlines()), "<doc>")
    calls = {ast.unparse(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert sorted(calls) == ["ftslurm.submit_ft_array", "lighthouse.start", "run.cancel",
                             "run.states"]  # fmt: skip
    submit = calls["ftslurm.submit_ft_array"]
    assert [k.arg for k in submit.keywords] == ["replicas", "config", "lighthouse", "partition"]
    start = calls["lighthouse.start"]
    inspect.signature(lighthouse.start).bind(*start.args, **{k.arg: 0 for k in start.keywords})
    assert callable(api.FTArray.states) and callable(api.FTArray.cancel)
    assert "run.replicas[1].log_path" in {ast.unparse(n) for n in ast.walk(tree)}
    assert "log_path" in {f.name for f in fields(api.ReplicaHandle)}


def test_ranks_per_node_with_and_without_torchrun(tmp_path):
    """A CPU replica runs its one rank without torchrun (FTSLURM_SKIP_TORCHRUN): no
    --nproc_per_node in its argv, and the job still asks Slurm for one rank per node."""
    from ftslurm.replica import plan as planlib

    env = {"TORCHFT_LIGHTHOUSE": "http://login-0:29510", "SLURM_ARRAY_TASK_ID": "0"}
    cpu = planlib.preflight_ft({**env, "DEVICE": "cpu"}, tmp_path)
    assert not planlib.flag_values(cpu.argv, "--nproc_per_node") and api._nproc(cpu) == 1
    gpu = planlib.preflight_ft({**env, "DEVICE": "cuda"}, tmp_path)
    assert api._nproc(gpu) == 8
    via_torchrun = planlib.preflight_ft({**env, "DEVICE": "cpu", "FTSLURM_SKIP_TORCHRUN": "0"},
                                        tmp_path)  # fmt: skip
    assert planlib.flag_values(via_torchrun.argv, "--nproc_per_node") == ["1"]
