#!/bin/bash
# issue 41: 2 replicas x 2 ranks, one rank killed per failure; Slurm's requeue (FT_MAX_RESTARTS=0)
# against the launcher's restart in place (3), without and with a warm spare, alternated
set -u
cd /work/main
rev=$(git rev-parse HEAD)
rm -rf /tmp/wtA; git worktree prune; git worktree add -f --detach /tmp/wtA "$rev" -q
cp -r /work/main/assets/local /tmp/wtA/assets/
cd /tmp/wtA
export PYTHONPATH=/tmp/wtA FT_NODE_MAX_FAILS=0
date -u +"start %FT%TZ"; uptime; git log --oneline -1
python bench/recovery.py --backend slurm --replicas 2 --ranks 2 --mode kill --failures 5 --spares 0,1 --restarts 0,3 --json --keep /tmp/exp/ranks2/keep > /tmp/exp/ranks2/recovery.json 2> /tmp/exp/ranks2/recovery.stderr.txt; echo "rc=$?"
date -u +"end %FT%TZ"; uptime
