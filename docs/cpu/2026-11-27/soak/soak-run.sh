#!/bin/bash
cd /work/main
export FT_NODE_MAX_FAILS=0
date -u +"start %FT%TZ"; uptime; git log --oneline -1
python bench/soak.py --backend slurm --spares 0,1 --control --repeats 3 --every 30 --count 10 --modes node-down,kill,requeue,hang,freeze-node --down-for 5 --heartbeat-timeout-ms 2000 --json --keep /tmp/exp/soak/keep > /tmp/exp/soak/soak.json 2> /tmp/exp/soak/soak.stderr.txt; echo "soak rc=$?"
date -u +"end %FT%TZ"; uptime
