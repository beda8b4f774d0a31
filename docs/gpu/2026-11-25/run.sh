#!/bin/bash
# Device-only driver for issue 9 (not committed). $1 = a | b. DEV overrides the device args.
set -uo pipefail
step=$1; dev=${DEV:---device cuda}; deadline=${DEADLINE:-565}; OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT" /tmp/b
exec > >(tee -a "$OUT/out-$step.txt") 2>&1
if [ -z "${NO_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
grep -q "$(hostname)" /etc/hosts || echo "127.0.0.1 $(hostname)" >> /etc/hosts
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
python3 -c 'import sys,torch,torchtitan,torchft,importlib.metadata as m; print("python",sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda,"titan",m.version("torchtitan"),"ft",m.version("torchft-nightly"), torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")' || exit 1
run() {
  local t=$((deadline - SECONDS))
  if [ "$t" -lt 40 ]; then echo "== SKIP $*: ${t}s left"; return; fi
  echo "== $(date +%T) t=${SECONDS}s: $* (limit ${t}s)"
  timeout -k 5 "$t" python3 "$@"; echo "== rc=$? at t=${SECONDS}s"
}
# shellcheck disable=SC2086
case $step in
  a) python3 bench/gpu_overhead.py $dev --dry-run | head -30
     run bench/gpu_overhead.py $dev --out /tmp/b/ov --json "$OUT/overhead.json"
     run bench/gpu_heal.py $dev --scenario fixes-on --out /tmp/b/heal --json "$OUT/heal-fixes-on.json" ;;
  b) run bench/gpu_heal.py $dev --scenario optimizer-state-off --out /tmp/b/heal --json "$OUT/heal-optimizer-state-off.json"
     run bench/gpu_heal.py $dev --scenario async-quorum-off --heals 2 --out /tmp/b/heal --json "$OUT/heal-async-quorum-off.json" ;;
  c) run bench/checksum_speed.py --device cuda --mib 4096 --tensors 32 --runs 3
     run bench/gpu_overhead.py $dev --out /tmp/b/ov-hostcopy --json "$OUT/overhead-hostcopy.json"
     run bench/gpu_overhead.py $dev --checksum-every 0 --out /tmp/b/ov-nosum --json "$OUT/overhead-nosum.json"
     run bench/gpu_heal.py $dev --scenario fixes-on --out /tmp/b/heal2 --json "$OUT/heal-fixes-on-2.json" ;;
  d) run bench/checksum_speed.py --device cuda --mib 4096 --tensors 32 --runs 3
     run bench/gpu_overhead.py $dev --out /tmp/b/ov-prepare --json "$OUT/overhead-prepare.json"
     run bench/gpu_heal.py $dev --scenario fixes-on --out /tmp/b/heal3 --json "$OUT/heal-fixes-on-3.json" ;;
  e) run bench/gpu_overhead.py $dev --steps 60 --out /tmp/b/ov-60 --json "$OUT/overhead-60.json" ;;
  *) echo "step a|b|c|d|e"; exit 2 ;;
esac
[ -n "${DEV:-}" ] || pkill -f "torchrun|ftslurm.replica|torchft_lighthouse" || true
nvidia-smi --query-gpu=memory.used --format=csv 2>/dev/null | tail -1
tar czf "$OUT/logs-$step.tar.gz" -C /tmp/b . ; ls -la "$OUT"
