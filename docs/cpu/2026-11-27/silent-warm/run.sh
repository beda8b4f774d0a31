#!/bin/bash
set -u
cd /work/main
rev=$(git rev-parse HEAD)
rm -rf /tmp/wtB; git worktree prune; git worktree add -f --detach /tmp/wtB "$rev" -q
cp -r /work/main/assets/local /tmp/wtB/assets/
cp /work/main/tests/test_multirank_spare_slurm.py /work/main/tests/test_restart_in_place_slurm.py /tmp/wtB/tests/
cd /tmp/wtB
export PYTHONPATH=/tmp/wtB
date -u +"tests start %FT%TZ"; git log --oneline -1
timeout 900 python -m pytest -q -p no:cacheprovider --basetemp=/tmp/mytest-b2 "tests/test_replica_training.py::test_replicas_reconnect_after_a_lighthouse_restart_that_reuses_quorum_ids" tests/test_ckpt_time_limit_slurm.py tests/test_restart_in_place_slurm.py > /tmp/exp/warm1/tests2.txt 2>&1; echo "tests rc=$?"
export FT_NODE_MAX_FAILS=0
out=/tmp/exp/warm1
date -u +"bench start %FT%TZ"; uptime
python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang --failures 5 --spares 0 --restarts 3 --warm 0,1 --json --keep $out/keep > $out/recovery.json 2> $out/recovery.stderr.txt; echo "bench rc=$?"
date -u +"end %FT%TZ"; uptime
