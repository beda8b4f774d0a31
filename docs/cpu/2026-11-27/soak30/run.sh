#!/bin/bash
# issue 38: a continuous 30-minute soak, 2 replicas + 1 warm spare, all five modes, against a failure-free control
cd /tmp/wtS
export PYTHONPATH=/tmp/wtS FT_NODE_MAX_FAILS=0
date -u +"start %FT%TZ"; uptime; git log --oneline -1
python bench/soak.py --backend slurm --spares 1 --control --control-s 420 --repeats 1 --every 30 --count 60 --modes node-down,kill,requeue,hang,freeze-node --down-for 5 --heartbeat-timeout-ms 2000 --json --keep /tmp/exp/soak30/keep > /tmp/exp/soak30/soak.json 2> /tmp/exp/soak30/soak.stderr.txt; echo "soak rc=$?"
date -u +"end %FT%TZ"; uptime
