# Tiny CPU check: torchtitan 0.3.0 torchft debug model (flex attention) forward+backward on CPU.
import os, time, sys
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
torch.set_num_threads(1)
t0 = time.time()
from torchtitan.experiments.torchft.llama3.config_registry import llama3_torchft_debugmodel
cfg = llama3_torchft_debugmodel()
mc = cfg.model_spec.model
print("inner attention:", type(mc.layers[0].attention.inner_attention).__qualname__, flush=True)
print("import+config s:", round(time.time() - t0, 1), flush=True)
for backend in ("sdpa", "varlen"):
    try:
        from torchtitan.experiments.torchft.llama3 import model_registry
        ms = model_registry("debugmodel", attn_backend=backend)
        print(f"attn_backend={backend}: built config, inner =", type(ms.model.layers[0].attention.inner_attention).__qualname__)
    except Exception as e:
        print(f"attn_backend={backend}: {type(e).__name__}: {e}")
with torch.device("meta"):
    model = mc.build()
model.to_empty(device="cpu")
with torch.no_grad():
    model.init_states(buffer_device=None)
model.train()
n = sum(p.numel() for p in model.parameters())
print("params:", n, flush=True)
B, L = 1, int(sys.argv[1]) if len(sys.argv) > 1 else 128
tokens = torch.randint(0, 2048, (B, L))
positions = torch.arange(L).unsqueeze(0)
t1 = time.time()
try:
    masks = model.get_attention_masks(positions)
    print("mask built s:", round(time.time() - t1, 1), flush=True)
    out = model(tokens, positions=positions, attention_masks=masks)
    print("forward s:", round(time.time() - t1, 1), "out", tuple(out.shape), flush=True)
    out.float().mean().backward()
    print("backward s:", round(time.time() - t1, 1), "grad ok:", model.tok_embeddings.weight.grad is not None, flush=True)
    t2 = time.time()
    out = model(tokens, positions=positions, attention_masks=masks); out.float().mean().backward()
    print("2nd fwd+bwd s:", round(time.time() - t2, 2), flush=True)
except Exception as e:
    import traceback; traceback.print_exc()
    print("FAILED:", type(e).__name__, str(e)[:500])
