# Which of the flags ftslurm's plan.py passes does torchtitan 0.3.0's ConfigManager take
# (--module torchft.llama3 --config llama3_torchft_debugmodel + one flag at a time)?
import sys, io, contextlib
sys.path.insert(0, "/tmp/titan03-probe")
from torchtitan.config import ConfigManager
BASE = ["--module", "torchft.llama3", "--config", "llama3_torchft_debugmodel"]
FLAGS = [
    ["--job.config_file=/x/debug_cpu.toml"], ["--job.dump_folder=/tmp/d"], ["--dump_folder=/tmp/d"],
    ["--model.hf_assets_path=/tmp/t"], ["--hf_assets_path=/tmp/t"],
    ["--training.dataset_path=/tmp/ds"], ["--dataloader.dataset_path=/tmp/ds"],
    ["--training.dataset=c4_test"], ["--dataloader.dataset=c4_test"],
    ["--training.steps=5"], ["--training.mixed_precision_param=float32"],
    ["--parallelism.data_parallel_shard_degree=1"], ["--parallelism.data_parallel_replicate_degree=2"],
    ["--fault_tolerance.enable"], ["--fault_tolerance.no-enable"], ["--fault_tolerance.replica_id=1"],
    ["--fault_tolerance.group_size=3"], ["--fault_tolerance.process_group=gloo"],
    ["--fault_tolerance.process_group=mccl"],
    ["--fault_tolerance.semi_sync_method=None"], ["--fault_tolerance.semi_sync_method=diloco"],
    ["--fault_tolerance.sync_steps=6"], ["--fault_tolerance.num_fragments=2"],
    ["--fault_tolerance.process_group_timeout_ms=10000"], ["--metrics.enable_wandb"],
    ["--checkpoint.enable"], ["--checkpoint.no-enable"], ["--checkpoint.no_enable"], ["--checkpoint.interval=60"],
    ["--checkpoint.folder=ck"], ["--model.flavor=debugmodel_wide"], ["--model.name=llama3_ft"],
    ["--compile.enable"], ["--comm.train_timeout_seconds=60"], ["--metrics.disable_color_printing"],
    ["--profiler.enable_profiling=False"], ["--profiling.enable_profiling=False"],
]
for f in FLAGS:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            c = ConfigManager().parse_args(BASE + f)
        print(f"OK      {f[0]}")
    except SystemExit as e:
        msg = [l.strip() for l in err.getvalue().splitlines() if l.strip() and not l.startswith("╭") and not l.startswith("╰")]
        print(f"REFUSED {f[0]}  :: {' | '.join(msg)[:160]}")
    except Exception as e:
        print(f"ERROR   {f[0]}  :: {type(e).__name__}: {str(e)[:160]}")
for args in (["--module", "probe_cfg", "--config", "probe_debug_cpu"], ["--config", "x"], ["--module", "torchft.llama3", "--config", "nope"]):
    try:
        c = ConfigManager().parse_args(args); print("OK     ", args, "->", type(c).__qualname__)
    except BaseException as e:
        print("ERR    ", args, "->", type(e).__name__, str(e)[:200])
