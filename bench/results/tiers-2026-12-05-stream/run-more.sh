#!/bin/bash
# After run.sh, same old/new setup: the uncoded tier (random bytes, identity codec: the write path's refactor must
# cost nothing there) and the lossless tier with 2 I/O threads (one per core), each new/old then old/new.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
OLD=/tmp/wt-old/lifeboatcache_core/src:/tmp/wt-old/backends/file/src:/tmp/wt-old/codecs/lossless/src
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
for what in none lossless-t2; do
  [ $what = none ] && args="" || args="--codec lossless --threads 2"
  for pair in 1 2; do
    if [ $pair = 2 ]; then sides="old new"; else sides="new old"; fi
    for side in $sides; do
      [ $side = old ] && PP=$OLD || PP=
      log start "$what $pair $side"
      PYTHONPATH=$PP .venv/bin/python -m lifeboatcache bench tiers $args --json --path /work/bench-ab \
        > $D/tiers-$what-$side-$pair.json 2> $D/tiers-$what-$side-$pair.stderr
      log end "$what $pair $side rc=$?"
    done
  done
done
rm -rf /work/bench-ab
