set -u
cd /work/main
P=/sys/module/page_reporting/parameters
orig=$(cat $P/min_free_ms)
for i in 1 2 3 4; do
  for ms in 60000 0; do
    echo $ms > $P/min_free_ms
    before=$(cat $P/reported_kib)
    flock /tmp/ftslurm-heavy.lock python bench/heal_speed.py --transports pg --json > /tmp/hs4/pg-minfree$ms-$i.json 2>/tmp/hs4/pg-minfree$ms-$i.err
    echo "$i $ms reported_kib_delta=$(( $(cat $P/reported_kib) - before ))" >> /tmp/hs4/report.txt
  done
done
echo $orig > $P/min_free_ms
echo done > /tmp/hs4/alt.done
