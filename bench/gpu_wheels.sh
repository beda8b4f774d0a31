#!/bin/bash
# Download, on a machine WITH network, the wheels the GPU machine needs to run
# bench/gpu_overhead.py and bench/gpu_heal.py without network (Python 3.12, x86-64).
#
#   bash bench/gpu_wheels.sh            # -> wheels/*.whl (git-ignored), prints the total size
#
# Why a list and not `pip download torchtitan torchft-nightly`: resolving dependencies would
# pull torch (a CUDA torch is ~1 GB of wheels), and the GPU image already has its own CUDA
# torch, numpy, pandas, pyarrow, tokenizers, huggingface-hub, einops, fsspec, pillow,
# tensorboard, click, protobuf, requests... (its pip list). So only what the
# image lacks is fetched, with --no-deps, pinned to the versions the CPU tests here run with.
# On the GPU machine (see docs/benchmarks.md):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/*.whl
#   export PYTHONPATH=/tmp/site
set -euo pipefail

cd "$(dirname "$0")/.."
dest="${WHEELS_DIR:-wheels}"
python="${PYTHON:-python3}"
mkdir -p "$dest"

# torchtitan 0.2.2 and torchft-nightly and what they need that the GPU image does not have.
pkgs=(
  torchtitan==0.2.2
  torchft-nightly==2026.10.26
  torchdata==0.11.0
  tyro==1.0.17
  docstring-parser==0.18.0
  typeguard==4.6.0
  tomli==2.5.0
  datasets==5.2.0
  dill==0.4.1
  multiprocess==0.70.19
  opentelemetry-api==1.45.2
  opentelemetry-sdk==1.45.2
  opentelemetry-semantic-conventions==0.66b2
  opentelemetry-exporter-otlp-proto-http==1.45.2
  opentelemetry-exporter-otlp-proto-common==1.45.2
  opentelemetry-exporter-http-transport==0.66b2
  opentelemetry-exporter-otlp-common==0.66b2
  opentelemetry-proto==1.45.2
  googleapis-common-protos==1.76.0
)

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done

"$python" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$dest" "${pkgs[@]}"

# this project (pure Python); running from the checkout works too, the wheel makes the
# environment complete for `python -m ftslurm.replica` outside the checkout
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$dest" .

total=$(du -cb "$dest"/*.whl | tail -n 1 | cut -f 1)
echo "wheels in $dest:"
find "$dest" -maxdepth 1 -name '*.whl' -printf '%s %f\n' | sort -k 2 |
  awk '{printf "  %8.1f KiB  %s\n", $1 / 1024, $2}'
awk -v b="$total" 'BEGIN { printf "total %.1f MiB (the device tool carries at most 64 MiB of ignored paths)\n", b / 1048576 }'
