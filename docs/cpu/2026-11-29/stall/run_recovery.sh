#!/bin/bash
set -uo pipefail
cd /work/main
out=docs/cpu/2026-11-29/stall
{ echo "# start $(date -Is)"; uptime; nproc; } > $out/recovery-kill-hang-stall.load.txt
python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang,stall --spares 0,1 --failures 5 --json \
  > $out/recovery-kill-hang-stall.json 2> $out/recovery-kill-hang-stall.err
echo "rc=$?" >> $out/recovery-kill-hang-stall.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/recovery-kill-hang-stall.load.txt
{ echo "# start $(date -Is)"; uptime; } > $out/recovery-stall-pg82.load.txt
PG_TIMEOUT_S=82 python bench/recovery.py --backend slurm --replicas 2 --mode stall --spares 0 --failures 5 --json \
  > $out/recovery-stall-pg82.json 2> $out/recovery-stall-pg82.err
echo "rc=$?" >> $out/recovery-stall-pg82.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/recovery-stall-pg82.load.txt
