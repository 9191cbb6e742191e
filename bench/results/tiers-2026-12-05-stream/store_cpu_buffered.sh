#!/bin/bash
# store_cpu.py's buffered case again (its first three rounds spread 6.6-10.4 ms), five rounds of 600 blocks,
# alternating as store_cpu.sh does, each after a sync so that one side's dirty pages do not land on the other's.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
OLD=/tmp/wt-old/lifeboatcache_core/src:/tmp/wt-old/backends/file/src:/tmp/wt-old/codecs/lossless/src
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 0 ]; then sides="old new"; else sides="new old"; fi
  for side in $sides; do
    [ $side = old ] && PP=$OLD || PP=
    sync
    echo "$side direct=0 round=$round $(PYTHONPATH=$PP .venv/bin/python $D/store_cpu.py 600 0 2>/dev/null)" \
      >> $D/store_cpu_buffered.out
  done
done
