"""Pure tests of ftslurm.replica.plan: golden argv for the GPU scripts, CPU plan, knobs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftslurm import logvocab, stacks
from ftslurm.errors import UserError
from ftslurm.replica import plan as planlib

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

ROOT = Path("/srv/ftslurm")  # where the plans say the project is installed
REPO = Path(__file__).resolve().parent.parent  # this checkout: its preset TOMLs

GPU_ARRAY_ENV = {
    "SLURM_ARRAY_JOB_ID": "42",
    "SLURM_ARRAY_TASK_ID": "1",
    "SLURM_ARRAY_TASK_COUNT": "2",
    "SLURM_RESTART_COUNT": "2",
}


def test_ft_gpu_golden_argv_and_env() -> None:
    p = planlib.build_ft_plan(GPU_ARRAY_ENV, ROOT, stack=stacks.TITAN022)
    assert p.argv == [
        "torchrun",
        "--nnodes=1",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:0",
        "--rdzv_id=tft_42_1",
        "-m",
        "ftslurm.replica.worker.train",
        "--job.config_file=/srv/ftslurm/slurm/configs/llama3_8b_ft.toml",
        "--job.dump_folder=/srv/ftslurm/outputs/torchft/tft-42",
        "--model.hf_assets_path=/srv/ftslurm/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
        "--parallelism.data_parallel_shard_degree=8",
        "--fault_tolerance.enable",
        "--fault_tolerance.replica_id=1",
        "--fault_tolerance.group_size=2",
        "--fault_tolerance.process_group=nccl",
    ]
    assert p.env == {
        "TORCHFT_LIGHTHOUSE": "http://login-0:29510",  # data: no port is bound
        "TORCHFT_QUORUM_RETRIES": "3",
        "FTSLURM_DEVICE": "cuda",
        "FTSLURM_FT_MODE": "per-step",
        "FTSLURM_REPLICA_ID": "1",
        "FTSLURM_GROUP_SIZE": "2",
        "FTSLURM_ATTEMPT": "2",
        "FTSLURM_HEAL_TIMEOUT_S": "600",
    }
    assert (p.replica_id, p.group_size, p.attempt, p.preset) == (1, 2, 2, "llama3_8b_ft")
    assert planlib.requeue_target(p) == "42_1"
    assert p.torchrun_is_child


def test_classic_gpu_golden_argv() -> None:
    # what sbatch exports for the script's `#SBATCH --cpus-per-task=128`
    env = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "77", "SLURM_CPUS_PER_TASK": "128"}
    p = planlib.build_classic_plan(env, ROOT, head_node="worker-0", stack=stacks.TITAN022)
    assert p.argv == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=128",
        "--kill-on-bad-exit=1",
        "torchrun",
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=worker-0:29500",
        "--rdzv_id=classic_77",
        "-m",
        "ftslurm.replica.worker.train",
        "--job.config_file=/srv/ftslurm/slurm/configs/llama3_8b.toml",
        "--job.dump_folder=/srv/ftslurm/outputs/classic-77",
        "--model.hf_assets_path=/srv/ftslurm/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
    ]
    assert p.env == {"FTSLURM_DEVICE": "cuda"}
    assert p.kind == "classic"
    assert not p.torchrun_is_child  # srun runs it on the nodes: no launcher pid to check there


# the same plans on torchtitan 0.3 (stacks.TITAN03): the preset is ftslurm's config function
# of the same name, and the three flags 0.3 renamed; every other flag is the same
TITAN03_CONFIG = ["--module", "ftslurm.replica.worker.titan03", "--config"]


def test_ft_gpu_golden_argv_on_torchtitan_0_3() -> None:
    p = planlib.build_ft_plan(GPU_ARRAY_ENV, ROOT, stack=stacks.TITAN03)
    old = planlib.build_ft_plan(GPU_ARRAY_ENV, ROOT, stack=stacks.TITAN022)
    tt = p.argv[p.argv.index("ftslurm.replica.worker.train") + 1 :]
    assert tt == [
        *TITAN03_CONFIG, "llama3_8b_ft",
        "--dump_folder=/srv/ftslurm/outputs/torchft/tft-42",
        "--hf_assets_path=/srv/ftslurm/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
        "--parallelism.data_parallel_shard_degree=8",
        "--fault_tolerance.enable",
        "--fault_tolerance.replica_id=1",
        "--fault_tolerance.group_size=2",
        "--fault_tolerance.process_group=nccl",
    ]
    assert p.argv[: len(p.argv) - len(tt)] == old.argv[: len(p.argv) - len(tt)]
    assert p.env == old.env


def test_classic_and_cpu_plans_on_torchtitan_0_3() -> None:
    env = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "77"}
    argv = planlib.build_classic_plan(env, ROOT, head_node="worker-0", stack=stacks.TITAN03).argv
    assert argv[argv.index("ftslurm.replica.worker.train") + 1 :] == [
        *TITAN03_CONFIG, "llama3_8b",
        "--dump_folder=/srv/ftslurm/outputs/classic-77",
        "--hf_assets_path=/srv/ftslurm/assets/hf/Llama-3.1-8B",
        "--training.steps=1000",
    ]
    cpu = {"DEVICE": "cpu", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "3"}
    argv = planlib.build_ft_plan(cpu, ROOT, stack=stacks.TITAN03).argv
    assert argv[argv.index("ftslurm.replica.worker.train") + 1 :][:7] == [
        *TITAN03_CONFIG, "debug_cpu",
        "--dump_folder=/srv/ftslurm/outputs/torchft/tft-local",
        "--hf_assets_path=/srv/ftslurm/assets/local/tokenizer",
        "--dataloader.dataset_path=/srv/ftslurm/assets/local/dataset",
    ]


def test_each_preset_has_a_config_function_for_torchtitan_0_3() -> None:
    """Read as text (the module imports torchtitan 0.3): a function per TOML preset."""
    text = (REPO / "ftslurm" / "replica" / "worker" / "titan03" / "config_registry.py").read_text()
    for preset in planlib.PRESETS.values():
        if preset.toml:
            assert f"\ndef {Path(preset.toml).stem}() -> " in text, preset.toml


@pytest.mark.parametrize("value", [None, "", "0", "x"])
def test_classic_srun_asks_no_cpus_when_the_job_did_not(value: str | None) -> None:
    """srun (Slurm >= 22.05) ignores the job's SLURM_CPUS_PER_TASK, so the plan passes it on;
    without a usable value srun keeps its own default rather than a made-up count."""
    env = {"SLURM_NNODES": "2", "SLURM_JOB_ID": "77"}
    if value is not None:
        env["SLURM_CPUS_PER_TASK"] = value
    argv = planlib.build_classic_plan(env, ROOT, head_node="worker-0").argv
    srun = argv[: argv.index("torchrun")]
    assert srun[0] == "srun" and not [a for a in srun if a.startswith("--cpus-per-task")]


def test_cpu_plan_uses_debug_preset_local_assets_and_gloo() -> None:
    env = {"DEVICE": "cpu", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "3"}
    p = planlib.build_ft_plan(env, ROOT, torchrun=["/venv/bin/torchrun"],
                              python=["/venv/bin/python"], stack=stacks.TITAN022)  # fmt: skip
    assert p.preset == "debug_cpu" and p.device == "cpu" and p.ft_mode == "diloco"
    # one rank per replica: no torchrun (FTSLURM_SKIP_TORCHRUN, on by default)
    assert p.argv[:4] == ["/venv/bin/python", "-u", "-m", "ftslurm.replica.worker.train"]
    tt = p.argv[p.argv.index("ftslurm.replica.worker.train") + 1 :]
    assert tt == [
        "--job.config_file=/srv/ftslurm/slurm/configs/debug_cpu.toml",
        "--job.dump_folder=/srv/ftslurm/outputs/torchft/tft-local",
        "--model.hf_assets_path=/srv/ftslurm/assets/local/tokenizer",
        "--training.dataset_path=/srv/ftslurm/assets/local/dataset",
        "--training.steps=200",
        "--parallelism.data_parallel_shard_degree=1",
        "--fault_tolerance.enable",
        "--fault_tolerance.replica_id=0",
        "--fault_tolerance.group_size=3",
        "--fault_tolerance.process_group=gloo",
    ]
    assert p.env["OMP_NUM_THREADS"] == "1"
    assert p.env["HF_HUB_OFFLINE"] == "1" and p.env["HF_DATASETS_OFFLINE"] == "1"
    assert p.attempt == 0


def test_knobs_become_torchtitan_args() -> None:
    env = {
        "DEVICE": "cpu",
        "FTSLURM_REPLICA_ID": "1",
        "FTSLURM_GROUP_SIZE": "2",
        "FTSLURM_ATTEMPT": "4",
        "STEPS": "12",
        "FT_MODE": "per-step",
        "PG_TIMEOUT_S": "30",
        "FTSLURM_HEAL_TIMEOUT_S": " 1200 ",
        "CHECKPOINT_FOLDER": "/ckpt",
        "TORCHFT_LIGHTHOUSE": "http://127.0.0.1:1234",
        "TORCHFT_QUORUM_RETRIES": "7",
        "FTSLURM_EXTRA_ARGS": "--metrics.log_freq 5",
        "FTSLURM_RUN_ID": "t1",
    }
    p = planlib.build_ft_plan(env, ROOT)
    assert "--training.steps=12" in p.argv
    assert "--fault_tolerance.semi_sync_method=None" in p.argv  # debug_cpu is DiLoCo by default
    assert "--fault_tolerance.process_group_timeout_ms=30000" in p.argv
    assert "--checkpoint.folder=/ckpt" in p.argv
    assert p.argv[-2:] == ["--metrics.log_freq", "5"]
    assert p.env["TORCHFT_LIGHTHOUSE"] == "http://127.0.0.1:1234"
    assert p.env["TORCHFT_QUORUM_RETRIES"] == "7"
    assert p.env["FTSLURM_HEAL_TIMEOUT_S"] == "1200"
    assert p.attempt == 4 and p.ft_mode == "per-step"
    assert p.env["TORCHELASTIC_RUN_ID"] == "tft_t1_1"  # torchrun's --rdzv_id, as it sets it


def test_diloco_knobs_on_gpu() -> None:
    env = dict(GPU_ARRAY_ENV, FT_MODE="diloco", SYNC_STEPS="10", NUM_FRAGMENTS="4")
    p = planlib.build_ft_plan(env, ROOT)
    assert p.argv[-3:] == [
        "--fault_tolerance.semi_sync_method=diloco",
        "--fault_tolerance.sync_steps=10",
        "--fault_tolerance.num_fragments=4",
    ]
    p2 = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, FTSLURM_PRESET="llama3_8b_diloco"), ROOT)
    assert "--job.config_file=/srv/ftslurm/slurm/configs/llama3_8b_diloco.toml" in p2.argv
    assert not any("semi_sync_method" in a for a in p2.argv)  # the TOML says diloco


def test_wandb_only_on_replica_zero_and_key_never_shown() -> None:
    secret = "wandb-secret-1234567890"
    for task, expect in (("0", True), ("1", False)):
        env = dict(GPU_ARRAY_ENV, SLURM_ARRAY_TASK_ID=task, WANDB_API_KEY=secret, HF_TOKEN="hf_x9")
        p = planlib.build_ft_plan(env, ROOT)
        assert ("--metrics.enable_wandb" in p.argv) is expect
        text = p.describe() + " ".join(p.argv) + repr(p)
        assert secret not in text and "hf_x9" not in text
        assert "WANDB_API_KEY" not in p.env and "HF_TOKEN" not in p.env


def test_replica_and_attempt_precedence() -> None:
    env = dict(GPU_ARRAY_ENV, FTSLURM_REPLICA_ID="0", FTSLURM_GROUP_SIZE="4", FTSLURM_ATTEMPT="9")
    p = planlib.build_ft_plan(env, ROOT)
    assert (p.replica_id, p.group_size, p.attempt) == (0, 4, 9)
    bare = {"FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"}
    assert planlib.build_ft_plan(bare, ROOT).attempt == 0


@pytest.mark.parametrize(
    ("env", "fix"),
    [
        ({}, "SLURM_ARRAY_TASK_ID"),
        ({"FTSLURM_REPLICA_ID": "2", "FTSLURM_GROUP_SIZE": "2"}, "--array=0-<N-1>"),
        ({"FTSLURM_REPLICA_ID": "x", "FTSLURM_GROUP_SIZE": "2"}, "whole number"),
        ({"DEVICE": "tpu", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"}, "DEVICE=cpu"),
        (
            {"FTSLURM_PRESET": "nope", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
            "debug_cpu",
        ),
        (
            {
                "DEVICE": "cpu",
                "FTSLURM_PRESET": "llama3_8b_ft",
                "FTSLURM_REPLICA_ID": "0",
                "FTSLURM_GROUP_SIZE": "1",
            },
            "unset FTSLURM_PRESET",
        ),
        (
            {
                "FTSLURM_PRESET": "tiny",
                "GPUS_PER_NODE": "2",
                "FTSLURM_REPLICA_ID": "0",
                "FTSLURM_GROUP_SIZE": "1",
            },
            "unset GPUS_PER_NODE",
        ),
        (
            {"FT_MODE": "async", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
            "FT_MODE=diloco",
        ),
        ({"STEPS": "-5", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
         "STEPS=-5 must be at least 1"),
        ({"FT_MODE": "diloco", "SYNC_STEPS": "0", "FTSLURM_REPLICA_ID": "0",
          "FTSLURM_GROUP_SIZE": "1"}, "SYNC_STEPS=0 must be at least 1"),
        ({"PG_TIMEOUT_S": "120000", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
         "PG_TIMEOUT_S=120000 is more than a day (86400 s); it is in seconds "
         "(e.g. PG_TIMEOUT_S=120)"),
        ({"FTSLURM_HEAL_TIMEOUT_S": "600000", "FTSLURM_REPLICA_ID": "0",
          "FTSLURM_GROUP_SIZE": "1"},
         "FTSLURM_HEAL_TIMEOUT_S=600000 is more than a day (86400 s); it is in seconds "
         "(e.g. FTSLURM_HEAL_TIMEOUT_S=900)"),
        ({"FTSLURM_HEAL_TIMEOUT_S": "0", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
         "FTSLURM_HEAL_TIMEOUT_S=0 must be at least 1"),
        ({"FTSLURM_HEAL_TIMEOUT_S": "10m", "FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"},
         "FTSLURM_HEAL_TIMEOUT_S='10m' is not an integer"),
        (
            {"FTSLURM_EXTRA_ARGS": "--job.description 'no end", "FTSLURM_REPLICA_ID": "0",
             "FTSLURM_GROUP_SIZE": "1"},
            "does not parse (No closing quotation): quote it as for a shell",
        ),
    ],
)
def test_bad_knobs_name_the_fix(env: dict[str, str], fix: str) -> None:
    with pytest.raises(UserError, match=re.escape(fix)):
        planlib.build_ft_plan(env, ROOT)


@pytest.mark.parametrize(
    "env, fix",
    [
        ({"FTSLURM_PRESET": "llama3_8b_ft"}, "is for the torchft script"),
        ({"FTSLURM_PRESET": "llama3_8b_diloco"}, "is for the torchft script"),
        ({"FTSLURM_EXTRA_ARGS": "--x \\"}, "does not parse"),
        ({"RDZV_PORT": "70000"}, "RDZV_PORT=70000 is not a port \\(1 to 65535\\)"),
        ({"RDZV_PORT": "0"}, "RDZV_PORT=0 must be at least 1"),
    ],
)
def test_bad_classic_knobs_name_the_fix(env: dict[str, str], fix: str) -> None:
    """An FT preset would run the classic job with fault tolerance enabled in its TOML."""
    with pytest.raises(UserError, match=fix):
        planlib.build_classic_plan({"SLURM_NNODES": "2", "SLURM_JOB_ID": "7", **env}, ROOT,
                                   head_node="worker-0")  # fmt: skip


def test_requeue_decision() -> None:
    p = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, FT_MAX_REQUEUES="3"), ROOT)  # attempt 2
    assert planlib.should_requeue(p, -9, cancelled=False) == (True, "training exited with code 137")
    assert planlib.should_requeue(p, 0, cancelled=False)[0] is False
    assert planlib.should_requeue(p, 1, cancelled=True)[0] is False
    p3 = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, SLURM_RESTART_COUNT="3"), ROOT)
    assert planlib.should_requeue(p3, 1, cancelled=False)[0] is True  # default cap 5
    capped = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, FT_MAX_REQUEUES="2"), ROOT)
    ok, why = planlib.should_requeue(capped, 1, cancelled=False)
    assert not ok and "FT_MAX_REQUEUES" in why
    assert planlib.requeue_target(p) == "42_1"
    local = planlib.build_ft_plan({"FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "1"}, ROOT)
    assert planlib.requeue_target(local) is None


def test_banner_matches_the_guide_format() -> None:
    p = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, SLURM_RESTART_COUNT="1"), ROOT)
    line = logvocab.banner("2025-07-16 13:51:42", p, "worker-0")
    assert line == "[2025-07-16 13:51:42]  launching replica 1 (attempt 1) on worker-0"


def test_presets_point_at_existing_tomls() -> None:
    for preset in planlib.PRESETS.values():
        if preset.worker != "torchtitan":  # tiny: no TOML
            continue
        assert (REPO / planlib.CONFIG_DIR / preset.toml).is_file(), preset.toml


def test_every_preset_saves_async_model_checkpoints_as_the_note_says() -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the cpu extra installs tomli
        import tomli as tomllib

    for preset in [p for p in planlib.PRESETS.values() if p.worker == "torchtitan"]:
        with open(REPO / planlib.CONFIG_DIR / preset.toml, "rb") as f:
            ckpt = tomllib.load(f)["checkpoint"]
        # on by default, asynchronous, every N steps, the newest 2 kept
        assert ckpt["enable"] is True, preset.toml
        assert ckpt["async_mode"] == "async" and ckpt["keep_latest_k"] == 2, preset.toml
        assert ckpt["interval"] >= 1, preset.toml


@pytest.mark.parametrize(
    ("extra", "note"),
    [
        ("", False),
        ("--training.steps=50", False),
        ("--checkpoint.no-enable", True),
        ("--checkpoint.enable --checkpoint.interval=100", False),
        ("--checkpoint.enable --checkpoint.no-enable", True),
        ("--checkpoint.no_enable --checkpoint.enable", False),
    ],
)
def test_ft_plan_says_when_model_checkpoints_are_off(extra: str, note: bool) -> None:
    p = planlib.build_ft_plan(dict(GPU_ARRAY_ENV, FTSLURM_EXTRA_ARGS=extra), ROOT)
    assert (planlib.NO_MODEL_CHECKPOINTS_NOTE in p.notes) is note
    assert ("# " + planlib.NO_MODEL_CHECKPOINTS_NOTE in p.describe()) is note


@pytest.mark.process
def test_launcher_modules_do_not_import_torch() -> None:
    code = (
        "import sys, ftslurm.replica.plan, ftslurm.replica.launcher.job, ftslurm.commands.assets;"
        "bad = [m for m in ('torch', 'torchtitan', 'torchft') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


ONE_RANK = {"FTSLURM_REPLICA_ID": "0", "FTSLURM_GROUP_SIZE": "2", "FTSLURM_RUN_ID": "r"}


def test_one_rank_per_node_runs_the_module_with_torchruns_environment() -> None:
    """FTSLURM_SKIP_TORCHRUN: the env torchrun gives its single worker (recorded from a real
    `torchrun --nnodes=1 --nproc_per_node=1 --rdzv_endpoint=localhost:0`), MASTER_PORT and
    the error file left to the worker, which hosts the store."""
    p = planlib.build_ft_plan({**ONE_RANK, "GPUS_PER_NODE": "1"}, ROOT, ["torchrun"],
                              python=["/env/bin/python3"])  # fmt: skip
    assert p.argv[:4] == ["/env/bin/python3", "-u", "-m", "ftslurm.replica.worker.train"]
    assert p.argv[4:] == planlib.build_ft_plan(
        {**ONE_RANK, "GPUS_PER_NODE": "1", "FTSLURM_SKIP_TORCHRUN": "0"}, ROOT
    ).argv[8:]  # the same torchtitan arguments as after torchrun's 8
    torchrun_env = {
        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "localhost", "RANK": "0", "ROLE_NAME": "default", "ROLE_RANK": "0",
        "ROLE_WORLD_SIZE": "1", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "tft_r_0",
        "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "WORLD_SIZE": "1",
    }  # fmt: skip
    assert {k: p.env[k] for k in torchrun_env} == torchrun_env
    assert p.env[planlib.WORKER_STORE_ENV] == "1" and "MASTER_PORT" not in p.env
    assert p.torchrun_is_child  # the worker checks the launcher is its ancestor


@pytest.mark.parametrize("env", [{"GPUS_PER_NODE": "1", "FTSLURM_SKIP_TORCHRUN": "off"},
                                 {"GPUS_PER_NODE": "2"}])  # fmt: skip
def test_torchrun_stays_when_switched_off_or_for_several_ranks(env: dict) -> None:
    p = planlib.build_ft_plan({**ONE_RANK, **env}, ROOT, ["torchrun"], python=["python3"])
    assert p.argv[0] == "torchrun" and "--rdzv_id=tft_r_0" in p.argv
    assert not {"RANK", "MASTER_ADDR", planlib.WORKER_STORE_ENV} & set(p.env)


def test_python_defaults_to_ftslurm_python() -> None:
    env = {**ONE_RANK, "DEVICE": "cpu", "FTSLURM_PYTHON": "/opt/py/bin/python"}
    assert planlib.build_ft_plan(env, ROOT).argv[0] == "/opt/py/bin/python"
    assert planlib.build_ft_plan({**ONE_RANK, "DEVICE": "cpu"}, ROOT).argv[0] == "python3"


def test_skip_torchrun_refuses_a_bad_value_in_one_line() -> None:
    with pytest.raises(UserError, match=r"FTSLURM_SKIP_TORCHRUN='maybe' is not a boolean"):
        planlib.build_ft_plan({**ONE_RANK, "DEVICE": "cpu", "FTSLURM_SKIP_TORCHRUN": "maybe"},
                              ROOT)  # fmt: skip
