import sys, traceback, importlib
mods = ["torch", "torchft", "torchtitan", "torchtitan.trainer", "torchtitan.train",
        "torchtitan.experiments.torchft", "torchtitan.experiments.torchft.trainer",
        "torchtitan.experiments.torchft.checkpoint", "torchtitan.experiments.torchft.optimizer",
        "torchtitan.experiments.torchft.llama3.config_registry", "torchtitan.models.llama3.config_registry"]
import torch; print("torch", torch.__version__)
for m in mods:
    try:
        importlib.import_module(m); print("OK  ", m)
    except Exception as e:
        print("FAIL", m, type(e).__name__, str(e)[:300])
try:
    from torchtitan.experiments.torchft.llama3.config_registry import llama3_torchft_debugmodel
    c = llama3_torchft_debugmodel(); print("OK   llama3_torchft_debugmodel() ->", type(c).__qualname__)
except Exception as e:
    print("FAIL config fn", type(e).__name__, str(e)[:300])
