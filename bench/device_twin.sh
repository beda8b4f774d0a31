#!/bin/bash
# A CPU stand-in for the GPU machine's Python environment, to rehearse the GPU benchmarks
# before spending device minutes: Python 3.12, the image's CUDA torch 2.11.0 (it imports and
# runs on CPU when its nvidia-* wheels are installed), triton 3.6.0, numpy 2.5.2,
# huggingface-hub 1.33.0, tokenizers 0.23.2 (versions from the device's pip list), and
# wheels/ installed exactly as on the device: --no-deps --target, then PYTHONPATH.
#
#   bash bench/gpu_wheels.sh && bash bench/device_twin.sh      # ~5 GB, a few minutes
#   export PATH=/tmp/device-twin/bin:$PATH PYTHONPATH=/tmp/device-twin-site
#   python3 bench/gpu_heal.py --device cpu --smoke --scenario fixes-on
#
# PYTHON312 picks the interpreter [python3.12]; TWIN and TWIN_SITE the two folders.
set -euo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON312:-python3.12}"
twin="${TWIN:-/tmp/device-twin}"
site="${TWIN_SITE:-/tmp/device-twin-site}"

"$python" -m venv "$twin"
"$twin/bin/python" -m pip install --quiet \
  torch==2.11.0 triton==3.6.0 numpy==2.5.2 huggingface-hub==1.33.0 tokenizers==0.23.2 \
  safetensors==0.8.0 pyarrow pandas fsspec xxhash psutil requests pyyaml tqdm filelock \
  click einops tensorboard pillow matplotlib protobuf
rm -rf "$site"
"$twin/bin/python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
  --target "$site" wheels/*.whl
PYTHONPATH="$site" "$twin/bin/python" -c 'import torch, torchtitan, torchft, ftslurm; print("twin ready: torch", torch.__version__)'
echo "export PATH=$twin/bin:\$PATH PYTHONPATH=$site"
