#!/bin/bash
set -uo pipefail
cd /work/main
out=docs/cpu/2026-11-29/false-actions
{ echo "# start $(date -Is) at $(git rev-parse --short HEAD)"; uptime; nproc; } > $out/soak.load.txt
python bench/false_actions.py --json --keep /tmp/fa_soak > $out/soak.json 2> $out/soak.err
echo "rc=$?" >> $out/soak.load.txt
{ echo "# end $(date -Is)"; uptime; } >> $out/soak.load.txt
