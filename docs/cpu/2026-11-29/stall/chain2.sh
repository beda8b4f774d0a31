#!/bin/bash
while pgrep -f "run_killhang.sh" >/dev/null; do sleep 3; done
cd /work/main
out=docs/cpu/2026-11-29/stall
{ echo "# start $(date -Is) at $(git rev-parse --short HEAD)"; uptime; } > $out/recovery-stall3.load.txt
flock /tmp/ftslurm-heavy.lock python bench/recovery.py --backend slurm --replicas 2 --mode stall --spares 0,1 --failures 5 --json --keep /tmp/stall3 \
  > $out/recovery-stall3.json 2> $out/recovery-stall3.err
echo "rc=$?" >> $out/recovery-stall3.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/recovery-stall3.load.txt
flock /tmp/ftslurm-heavy.lock /tmp/run_soak.sh > /tmp/soak_run.log 2>&1
