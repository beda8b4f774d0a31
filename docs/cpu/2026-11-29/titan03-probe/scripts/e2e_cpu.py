# One FT replica of torchtitan 0.3.0's FaultTolerantTrainer on CPU (torch 2.15), loopback only:
# an in-process Lighthouse (min 1 replica), the CPU shims ftslurm's cpu.py makes, then
# torchtitan.train.main() with --module probe_cfg --config probe_debug_cpu + CLI overrides.
import os, sys, resource, socket
from types import SimpleNamespace
os.environ.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                  RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
s = socket.socket(); s.bind(("127.0.0.1", 0)); os.environ["MASTER_PORT"] = str(s.getsockname()[1]); s.close()
sys.path.insert(0, "/tmp/titan03-probe")
import torch
torch.set_num_threads(1)
from torchft.coordination import LighthouseServer
lh = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
os.environ["TORCHFT_LIGHTHOUSE"] = lh.address()
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
shims = dict(get_device_name=lambda _d=None: "cpu",
             get_device_properties=lambda _d=None: SimpleNamespace(total_memory=os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), name="cpu"),
             memory_stats=lambda _d=None: {"active_bytes.all.peak": peak(), "reserved_bytes.all.peak": peak()},
             current_device=lambda: 0, reset_peak_memory_stats=lambda _d=None: None, empty_cache=lambda: None)
for k, v in shims.items():
    print(f"torch.cpu.{k}: upstream has it: {hasattr(torch.cpu, k)}", flush=True)
    setattr(torch.cpu, k, v)
import torch._utils as tu
orig = tu._get_available_device_type
tu._get_available_device_type = lambda: "cpu"
import torchtitan.tools.utils as tt_utils
tu._get_available_device_type = orig
print("torchtitan device_type:", tt_utils.device_type, flush=True)
sys.argv = ["train", "--module", "probe_cfg", "--config", "probe_debug_cpu",
            "--fault_tolerance.replica_id", "0", "--fault_tolerance.group_size", "1",
            "--training.steps", "4"]
from torchtitan.train import main
try:
    main()
    print("E2E: main() returned", flush=True)
except BaseException:
    import traceback; traceback.print_exc(); print("E2E: main() raised", flush=True)
finally:
    lh.shutdown()
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)
