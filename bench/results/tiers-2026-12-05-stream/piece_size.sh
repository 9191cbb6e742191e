#!/bin/bash
# STREAM_WRITE (the streamed write's piece size, 1 MiB) against 512 KiB and 2 MiB: bench tiers --codec lossless with
# the constant set before the command runs, sizes rotated per round (two rounds). Nothing else runs.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
for round in 1 2; do
  if [ $round = 1 ]; then sizes="1048576 524288 2097152"; else sizes="2097152 524288 1048576"; fi
  for size in $sizes; do
    echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) piece $size round $round" >> $D/runlog.txt
    .venv/bin/python -c "
import lifeboatcache_backend_file.backend as b
b.STREAM_WRITE = $size
from lifeboatcache.cli import main
main()" bench tiers --codec lossless --json --path /work/bench-ab > $D/tiers-piece-$size-$round.json 2> /dev/null
  done
done
rm -rf /work/bench-ab
