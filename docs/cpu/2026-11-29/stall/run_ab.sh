#!/bin/bash
set -u
out=/work/main/docs/cpu/2026-11-29/stall/ab
mkdir -p $out
for arm in old new; do
  if [ $arm = old ]; then tree=/tmp/wtOld; else tree=/work/main; fi
  cd $tree
  { echo "# $arm: start $(date -Is) at $(git rev-parse --short HEAD) ($tree)"; uptime; } >> $out/load.txt
  PYTHONPATH=$tree python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang --spares 0 --failures 5 --json --keep /tmp/ab-$arm \
    > $out/recovery-$arm.json 2> $out/recovery-$arm.err
  echo "rc=$?" >> $out/load.txt
  { echo "# $arm: end $(date -Is)"; uptime; } >> $out/load.txt
done
