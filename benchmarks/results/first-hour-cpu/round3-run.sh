#!/bin/bash
# A newcomer's first hour on this box: a fresh clone of branch i49, `make run` twice, the .venv's size.
set -u
cd /tmp/fh49
git clone -q --branch i49 /work/wt49 clone
cd clone
unset COLUMNS
echo "commit $(git rev-parse --short HEAD)  date $(date -u +%FT%TZ)"
for n in 1 2; do
  echo "== make run $n: load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s.%N)
  make run > ../make-run-$n.txt 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "make run $n: rc=$rc wall=$(echo "$end - $start" | bc) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "venv: $(du -sm .venv | cut -f1) MB, $(ls -d .venv/lib/python3*/site-packages/*.dist-info | wc -l) distributions"
