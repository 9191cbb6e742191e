#!/usr/bin/env bash
# store_cpu.py before (6260741) and after (the working tree), interleaved through ../ab-lib.sh, a sync before each
# run so that one side's dirty pages do not land on the other's; one line per run appended to OUT_FILE.
#   bash bench/results/tiers-2026-12-05-stream/store_cpu.sh ROUNDS BLOCKS "DIRECT..." OUT_FILE
# Recorded: `store_cpu.sh 3 300 "0 1" store_cpu.out` (its buffered rounds spread 6.6-10.4 ms), then
# `store_cpu.sh 5 600 0 store_cpu_buffered.out` (those first runs had inline loops of the same order, without the sync
# in the first).
set -u
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
OUT=bench/results/tiers-2026-12-05-stream
ab_setup 6260741 /tmp/ab-old "$OUT/runlog.txt" lifeboatcache_core/src backends/file/src codecs/lossless/src
ab_build_ext codecs/lossless
for direct in $3; do
  for round in $(seq 1 "$1"); do
    for side in $(ab_sides "$round"); do
      ab_use "$side"
      sync
      echo "$side direct=$direct round=$round $($AB_PY $OUT/store_cpu.py "$2" "$direct" 2>/dev/null)" >> "$OUT/$4"
    done
  done
done
ab_done
