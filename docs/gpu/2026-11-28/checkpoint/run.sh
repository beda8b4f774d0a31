#!/bin/bash
# The commands as run on the device machine (one NVIDIA H200, its image's torch 2.11.0+cu130,
# Python 3.12; torchtitan 0.2.2 and torchft-nightly 2026.10.26 from bench/gpu_wheels.sh), in
# this order, 2026-11-28 01:18-01:32 UTC. Each command began with:
#   sed -i 's/^torch==2.13.0$/torch==2.11.0/' requirements.txt   (the device copy only: the
#     launcher's version check pins torch 2.13.0, which cannot be carried there)
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site wheels/*.whl
#   export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
# async-i30 (stopped by the per-run timeout of 120 s in the final save of its first run; the
# bench then also failed to read GPU logs' coloured step lines, fixed before the next runs):
timeout 450 python3 bench/checkpoint_cost.py --device cuda --layers 1 --interval 30 --steps 95 --warmup 5 --repeats 3 --timeout 120 --folder /dev/shm/ckpt --logs /tmp/cclogs --json
# pinned-i20 (ended in its 5th run: the watchdog ended a worker whose heartbeat was lost at start-up):
timeout 430 python3 bench/checkpoint_cost.py --device cuda --layers 1 --interval 20 --steps 45 --warmup 5 --repeats 3 --timeout 140 --folder /dev/shm/ckpt --async-mode async_with_pinned_mem --logs /tmp/cclogs --json
# async-i20 (the preset's mode; cut by `timeout 285` during its 5th run, the device time's end):
timeout 285 python3 bench/checkpoint_cost.py --device cuda --layers 1 --interval 20 --steps 45 --warmup 5 --repeats 3 --timeout 120 --folder /dev/shm/ckpt2 --async-mode async --logs /tmp/cclogs2 --json
