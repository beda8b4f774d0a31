# Minimal CPU construction of the torchft classes ftslurm's patches touch, on loopback only:
# a Lighthouse (min 1 replica), a TCPStore, torchft.ProcessGroupGloo, torchft.Manager, one quorum
# (which reconfigures the PG), an allreduce, should_commit; then torchtitan 0.3.0's
# TorchFTManager built from its FaultTolerance config (through Config.build), and a native
# gloo PG made with enable_reconfigure=True handed to a Manager.
import os, sys, time, inspect, traceback
from datetime import timedelta
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch, torch.distributed as dist
import torchft
from torchft.coordination import LighthouseServer
from torch.distributed import TCPStore

def step(name, fn):
    t = time.time()
    try:
        r = fn()
        print(f"OK   {name} ({time.time()-t:.2f} s){'' if r is None else ': ' + str(r)[:300]}", flush=True)
        return r
    except Exception as e:
        print(f"FAIL {name}: {type(e).__name__}: {str(e)[:400]}", flush=True)
        traceback.print_exc(limit=3)

lh = step("LighthouseServer(bind=127.0.0.1:0, min_replicas=1)", lambda: LighthouseServer(bind="127.0.0.1:0", min_replicas=1))
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), RANK="0", WORLD_SIZE="1",
                  TORCHFT_LIGHTHOUSE=lh.address(), TORCHFT_MANAGER_PORT="0")
print("lighthouse", lh.address(), "store port", store.port)
print("Manager.__init__ params:", list(inspect.signature(torchft.Manager.__init__).parameters)[1:])
print("Manager._reconfigure_pg:", inspect.signature(torchft.Manager._reconfigure_pg))
print("ProcessGroup has configure():", hasattr(torchft.process_group.ProcessGroup, "configure"),
      "get_reconfigure_handle():", hasattr(torchft.process_group.ProcessGroup, "get_reconfigure_handle"),
      "reconfigure():", hasattr(torchft.process_group.ProcessGroup, "reconfigure"))
pg = step("torchft.ProcessGroupGloo(timeout=10s)", lambda: torchft.ProcessGroupGloo(timeout=timedelta(seconds=10)))
print("pg.supports_reconfigure:", getattr(pg, "supports_reconfigure", None))
state = {"w": torch.zeros(4)}
m = step("torchft.Manager(pg, min_replica_size=1, use_async_quorum=False)", lambda: torchft.Manager(
    pg=pg, min_replica_size=1, load_state_dict=lambda sd: state.update(sd), state_dict=lambda: state,
    use_async_quorum=False, replica_id="probe_0", timeout=timedelta(seconds=20),
    quorum_timeout=timedelta(seconds=20)))
if m is not None:
    print("manager._client type:", type(getattr(m, "_client", None)).__name__,
          "has _quorum:", hasattr(getattr(m, "_client", None), "_quorum"))
    step("Manager.start_quorum()", lambda: m.start_quorum())
    step("num_participants / participating_rank", lambda: (m.num_participants(), m.participating_rank()))
    t = torch.ones(3)
    step("Manager.allreduce(ones(3)).wait()", lambda: (m.allreduce(t).wait(), t.tolist())[1])
    step("Manager.should_commit()", lambda: m.should_commit())
    step("current_step", lambda: m.current_step())
    step("Manager.shutdown()", lambda: m.shutdown(wait=False))

# torchtitan 0.3.0's wrapper, built the way the trainer does it: config.fault_tolerance.build()
from torchtitan.experiments.torchft.config.job_config import FaultTolerance
from torchtitan.experiments.torchft.manager import TorchFTManager
print("FaultTolerance._owner:", getattr(FaultTolerance, "_owner", None))
print("TorchFTManager.__init__ signature:", inspect.signature(TorchFTManager.__init__))
cfg = FaultTolerance(enable=True, process_group="gloo", replica_id=0, group_size=1, semi_sync_method="diloco")
ftm = step("FaultTolerance(enable=True, gloo, diloco).build()", lambda: cfg.build())
if ftm is not None:
    print("built config is a copy (dataclasses.replace):", "n/a (TorchFTManager keeps no config)" if not hasattr(ftm, "config") else ftm.config is cfg)
    print("ftm.use_async_quorum:", ftm.use_async_quorum, "replica_id:", ftm.replica_id, "manager:", type(ftm.manager).__name__)
    step("TorchFTManager.manager.shutdown()", lambda: ftm.manager.shutdown(wait=False))
# what build() hands to __init__: spy on it
seen = {}
orig = TorchFTManager.__init__
def spy(self, *a, **kw):
    seen["args"], seen["kwargs"] = a, kw
    seen["same_object"] = kw.get("config") is cfg2
    return orig(self, *a, **kw)
TorchFTManager.__init__ = spy
cfg2 = FaultTolerance(enable=False)
cfg2.build()
TorchFTManager.__init__ = orig
print("build() calls TorchFTManager.__init__ with args", seen["args"], "kwargs keys", list(seen["kwargs"]),
      "config is the same object:", seen["same_object"])

# native gloo PG with enable_reconfigure=True (torch >= 2.14)
def native():
    s2 = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    dist.init_process_group("gloo", store=s2, rank=0, world_size=1, enable_reconfigure=True)
    g = dist.group.WORLD
    return g, getattr(g, "supports_reconfigure", None)
r = step("init_process_group('gloo', enable_reconfigure=True)", native)
if r is not None:
    g, sup = r
    print("native PG supports_reconfigure:", sup)
    m2 = step("torchft.Manager(native gloo PG)", lambda: torchft.Manager(
        pg=g, min_replica_size=1, load_state_dict=None, state_dict=None, use_async_quorum=False,
        replica_id="probe_native", timeout=timedelta(seconds=20), quorum_timeout=timedelta(seconds=20)))
    if m2 is not None:
        step("native: start_quorum()", lambda: m2.start_quorum())
        t2 = torch.ones(2)
        step("native: allreduce", lambda: (m2.allreduce(t2).wait(), t2.tolist())[1])
        step("native: should_commit()", lambda: m2.should_commit())
        step("native: shutdown", lambda: m2.shutdown(wait=False))
lh.shutdown()
print("done")
os._exit(0)
