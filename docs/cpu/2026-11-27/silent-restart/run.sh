#!/bin/bash
# issue 38/41: kill and hang without a spare, with the launcher's restart in place (FT_MAX_RESTARTS=3)
cd /tmp/wtB
export PYTHONPATH=/tmp/wtB FT_NODE_MAX_FAILS=0
date -u +"start %FT%TZ"; uptime; git log --oneline -1
python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang --spares 0 --restarts 3 --failures 5 --json --keep /tmp/exp/silent2/keep > /tmp/exp/silent2/recovery.json 2> /tmp/exp/silent2/recovery.stderr.txt; echo "rc=$?"
date -u +"end %FT%TZ"; uptime
