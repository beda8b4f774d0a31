# Tiny CPU check: the same debug model with attn_backend="varlen" (the only other LM backend).
import os, time
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
torch.set_num_threads(1)
from torchtitan.experiments.torchft.llama3 import model_registry
ms = model_registry("debugmodel", attn_backend="varlen")
mc = ms.model
print("inner attention:", type(mc.layers[0].attention.inner_attention).__qualname__, flush=True)
with torch.device("meta"):
    model = mc.build()
model.to_empty(device="cpu")
with torch.no_grad():
    model.init_states(buffer_device=None)
model.train()
L = 128
tokens = torch.randint(0, 2048, (1, L)); positions = torch.arange(L).unsqueeze(0)
t1 = time.time()
try:
    masks = model.get_attention_masks(positions)
    out = model(tokens, positions=positions, attention_masks=masks)
    print("forward s:", round(time.time() - t1, 1), tuple(out.shape), flush=True)
    out.float().mean().backward()
    print("backward ok s:", round(time.time() - t1, 1))
except Exception as e:
    import traceback; traceback.print_exc()
    print("FAILED:", type(e).__name__, str(e)[:500])
