#!/bin/bash
while pgrep -f "mode stall --spares 0,1" >/dev/null; do sleep 3; done
cd /work/main; echo "rc(stall3) done" >> docs/cpu/2026-11-29/stall/recovery-stall3.load.txt
{ echo "# end $(date -Is)"; uptime; } >> docs/cpu/2026-11-29/stall/recovery-stall3.load.txt
flock /tmp/ftslurm-heavy.lock /tmp/run_ab.sh > /tmp/ab_run.log 2>&1
flock /tmp/ftslurm-heavy.lock /tmp/run_soak.sh > /tmp/soak_run.log 2>&1
