#!/bin/bash
# bench tiers --codec lossless (real SmolLM2 bf16 KV, O_DIRECT file tier, 4 threads) before (6260741: core,
# file backend and lossless codec through PYTHONPATH from a worktree at /tmp/wt-old, extension built in place)
# and after (the working tree: encode into a per-thread buffer, payload written while it is coded),
# interleaved new/old, old/new, new/old. Nothing else runs.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
OLD=/tmp/wt-old/lifeboatcache_core/src:/tmp/wt-old/backends/file/src:/tmp/wt-old/codecs/lossless/src
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
for pair in 1 2 3; do
  if [ $pair = 2 ]; then sides="old new"; else sides="new old"; fi
  for side in $sides; do
    [ $side = old ] && PP=$OLD || PP=
    log start "$pair $side"
    PYTHONPATH=$PP .venv/bin/python -m lifeboatcache bench tiers --codec lossless --json --path /work/bench-ab \
      > $D/tiers-$side-$pair.json 2> $D/tiers-$side-$pair.stderr
    log end "$pair $side rc=$?"
  done
done
rm -rf /work/bench-ab
