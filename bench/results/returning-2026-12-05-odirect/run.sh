#!/bin/bash
# r28: bench returning with our tier's block I/O buffered (default) and with --o-direct, interleaved
# (plain, odirect, odirect, plain), codec none (the bench default), five reps each. Nothing else heavy runs.
set -u
cd /work/main
D=/tmp/r28
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
for run in plain-1 odirect-1 odirect-2 plain-2; do
  case $run in odirect*) EXTRA="--o-direct";; *) EXTRA="";; esac
  log start "$run $EXTRA"
  .venv/bin/python -m lifeboatcache bench returning --json --reps 5 $EXTRA --out $D/$run.json > /dev/null 2> $D/$run.stderr
  log end "$run rc=$?"
done
