#!/bin/bash
set -uo pipefail
cd /work/main
out=docs/cpu/2026-11-29/stall
{ echo "# start $(date -Is)"; uptime; } > $out/recovery-stall.load.txt
python bench/recovery.py --backend slurm --replicas 2 --mode stall --spares 0,1 --failures 5 --json \
  > $out/recovery-stall.json 2> $out/recovery-stall.err
echo "rc=$?" >> $out/recovery-stall.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/recovery-stall.load.txt
