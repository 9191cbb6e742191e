#!/usr/bin/env bash
# A DRAM tier's jobs split over its four threads (old = BASE) or run as one task (new = working
# tree, Tier.job_slices), interleaved; small (32 KiB, bench staging's) and engine-sized blocks.
# usage: bash bench/results/dram-get-2026-12-06/run.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
D=bench/results/dram-get-2026-12-06
. bench/results/ab-lib.sh
ab_setup "$1" /tmp/ab-dram-get "$D/runlog.txt" lifeboatcache_core/src .
for i in $(seq 1 "$2"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    for shape in "36 32 2000" "36 720 300"; do
      ab_log "pair $i $side: $shape"
      echo "{\"pair\": $i, \"side\": \"$side\", \"result\": $($AB_PY $D/dramget.py $shape)}" >> "$D/results.jsonl"
    done
  done
done
ab_done
