#!/bin/bash
set -uo pipefail
cd /work/main
out=docs/cpu/2026-11-29/stall
{ echo "# start $(date -Is) at $(git rev-parse --short HEAD)"; uptime; } > $out/recovery-kill-hang.load.txt
python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang --spares 0 --failures 5 --json --keep /tmp/killhang \
  > $out/recovery-kill-hang.json 2> $out/recovery-kill-hang.err
echo "rc=$?" >> $out/recovery-kill-hang.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/recovery-kill-hang.load.txt
