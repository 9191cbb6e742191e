#!/bin/bash
# r29: bench returning with our tier raw (codec none) and always lossless (--codec lossless), interleaved
# (none, lossless, lossless, none), buffered I/O, five reps each, on the 2-core Intel Xeon. Nothing else heavy runs.
set -u
cd /work/main
D=/tmp/r29
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
for run in none-1 lossless-1 lossless-2 none-2; do
  case $run in lossless*) EXTRA="--codec lossless";; *) EXTRA="";; esac
  log start "$run $EXTRA"
  .venv/bin/python -m lifeboatcache bench returning --json --reps 5 $EXTRA --out $D/$run.json > /dev/null 2> $D/$run.stderr
  log end "$run rc=$?"
done
