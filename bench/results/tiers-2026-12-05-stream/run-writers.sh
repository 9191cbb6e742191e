#!/bin/bash
# The streamed write's pieces handed to writer threads (the working tree) against each coding thread writing its own
# pieces (ea4732b, from a worktree at /tmp/wt-head through PYTHONPATH), lossless with 4 and with 2 I/O threads,
# each new/old then old/new. Nothing else runs.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
OLD=/tmp/wt-head/lifeboatcache_core/src:/tmp/wt-head/backends/file/src:/tmp/wt-head/codecs/lossless/src
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
for threads in 4 2; do
  for pair in 1 2; do
    if [ $pair = 2 ]; then sides="old new"; else sides="new old"; fi
    for side in $sides; do
      [ $side = old ] && PP=$OLD || PP=
      log start "writers t$threads $pair $side"
      PYTHONPATH=$PP .venv/bin/python -m lifeboatcache bench tiers --codec lossless --threads $threads --json \
        --path /work/bench-ab > $D/tiers-writers-t$threads-$side-$pair.json 2> $D/tiers-writers-t$threads-$side-$pair.stderr
      log end "writers t$threads $pair $side rc=$?"
    done
  done
done
rm -rf /work/bench-ab
