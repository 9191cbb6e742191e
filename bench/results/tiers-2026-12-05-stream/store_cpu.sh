#!/bin/bash
# store_cpu.py before (6260741, a worktree at /tmp/wt-old through PYTHONPATH) and after (the working tree), buffered
# and O_DIRECT, three rounds alternating new/old, old/new, new/old. Nothing else runs.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
OLD=/tmp/wt-old/lifeboatcache_core/src:/tmp/wt-old/backends/file/src:/tmp/wt-old/codecs/lossless/src
for direct in 0 1; do
  for round in 1 2 3; do
    if [ $round = 2 ]; then sides="old new"; else sides="new old"; fi
    for side in $sides; do
      [ $side = old ] && PP=$OLD || PP=
      echo "$side direct=$direct round=$round $(PYTHONPATH=$PP .venv/bin/python $D/store_cpu.py 300 $direct 2>/dev/null)" \
        >> $D/store_cpu.out
    done
  done
done
