#!/bin/sh
uptime
for c in old-ft ft-99edbe2 ft-1d326b2 ft-7fb9e5d; do
  echo "== $c"; (cd /tmp/$c && git log --oneline -1 && python bench/report_speed.py 2>&1 | grep -E "^failing|RSS growth")
done
cd /work/main && echo "== HEAD" && git log --oneline -1 && python bench/report_speed.py 2>&1 | grep -E "^failing|RSS growth"
