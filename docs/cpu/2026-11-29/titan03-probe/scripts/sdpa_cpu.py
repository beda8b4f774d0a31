# Tiny CPU check: torchft debug model with each layer's inner_attention swapped to
# ScaledDotProductAttention.Config() (what graph_trainer's tests do), forward+backward on CPU.
import os, time
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
torch.set_num_threads(1)
from torchtitan.experiments.torchft.llama3.config_registry import llama3_torchft_debugmodel
from torchtitan.models.common.attention import ScaledDotProductAttention
cfg = llama3_torchft_debugmodel()
mc = cfg.model_spec.model
for layer in mc.layers:
    layer.attention.inner_attention = ScaledDotProductAttention.Config()
with torch.device("meta"):
    model = mc.build()
model.to_empty(device="cpu")
with torch.no_grad():
    model.init_states(buffer_device=None)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=8e-4)
L = 256
for i in range(3):
    t = time.time()
    tokens = torch.randint(0, 2048, (8, L)); positions = torch.arange(L).expand(8, L)
    out = model(tokens, positions=positions, attention_masks=None)
    loss = torch.nn.functional.cross_entropy(out.flatten(0, 1).float(), tokens.flatten())
    loss.backward(); opt.step(); opt.zero_grad()
    print(f"step {i+1}: loss {loss.item():.3f}  {time.time()-t:.2f} s (batch 8 x seq {L}, 1 thread)", flush=True)
