#!/bin/bash
# 2 replicas x 2 ranks, one rank killed per failure. A: no spare, Slurm's requeue
# (FT_MAX_RESTARTS=0) against the restart in place (3), each with and without the warm next run
# (FT_WARM_RESTART 0/1), alternated in one run. B: one warm spare, requeue against restart in place.
set -u
cd /work/main
rev=$(git rev-parse HEAD)
rm -rf /tmp/wtA; git worktree prune; git worktree add -f --detach /tmp/wtA "$rev" -q
cp -r /work/main/assets/local /tmp/wtA/assets/
cd /tmp/wtA
export PYTHONPATH=/tmp/wtA FT_NODE_MAX_FAILS=0
out=/tmp/exp/warm
date -u +"start %FT%TZ"; uptime; git log --oneline -1
python bench/recovery.py --backend slurm --replicas 2 --ranks 2 --mode kill --failures 5 --spares 0 --restarts 0,3 --warm 0,1 --json --keep $out/keepA > $out/recovery-spares0.json 2> $out/recovery-spares0.stderr.txt; echo "A rc=$?"
date -u +"A end %FT%TZ"; uptime
python bench/recovery.py --backend slurm --replicas 2 --ranks 2 --mode kill --failures 5 --spares 1 --restarts 0,3 --json --keep $out/keepB > $out/recovery-spares1.json 2> $out/recovery-spares1.stderr.txt; echo "B rc=$?"
date -u +"end %FT%TZ"; uptime
