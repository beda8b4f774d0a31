#!/usr/bin/env bash
set -uo pipefail
out=/tmp/rec-stacks
cd /work/main
uptime > "$out/load-before.txt"
git rev-parse HEAD > "$out/commit.txt"
python bench/recovery.py --backend slurm --replicas 2 --mode kill,hang --failures 3 --spares 0 \
  --python /root/.pyenv/versions/3.11.7/bin/python3.11,/root/.cache/ftslurm/venv-titan03/bin/python \
  --repeats 3 --json > "$out/recovery.json" 2> "$out/recovery.err"
echo "rc=$?" >> "$out/recovery.err"
uptime > "$out/load-after.txt"
