#!/usr/bin/env bash
# bench/bad_node.py as committed beside this folder's figures: the bench's own output, every
# run's logs (replica logs, Lighthouse log, event log, the launchers' failure histories and
# node actions) and the machine's load at the start and the end. Root, under the heavy lock:
#   flock /tmp/ftslurm-heavy.lock docs/cpu/2026-11-27/bad-node/run.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../../.." || exit 2
keep="${BADNODE_KEEP:-/tmp/badnode-bench-runs}"
rm -rf "$keep" && mkdir -p "$keep"
{
  echo "start $(date -u +%FT%TZ)  commit $(git rev-parse --short HEAD)  (tracked files changed" \
       "in the working tree: $(git status --short --untracked-files=no | wc -l))"
  git status --short --untracked-files=no | sed 's/^/  changed: /'
  echo "uptime: $(uptime)"
  echo "cores: $(nproc)"
} > "$here/bad-node-run.log"
rc=0
python bench/bad_node.py --repeats "${REPEATS:-3}" --json --keep "$keep" \
  > "$here/bad-node.json" 2> "$here/bad-node.stderr.txt" || rc=$?
echo "end $(date -u +%FT%TZ)  rc $rc  uptime: $(uptime)" >> "$here/bad-node-run.log"
(cd "$keep" && find . \( -name '*.out' -o -name 'events.jsonl' -o -name 'lighthouse.log' \
   -o -path '*/failures/*' \) -type f -print0 | tar --null -czf "$here/bad-node-runs.tar.gz" -T -)
exit "$rc"
