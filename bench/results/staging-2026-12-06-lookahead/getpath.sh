#!/usr/bin/env bash
# A DRAM get over a write-through file tier: what telling the tier below of the hits costs the get.
# old = BASE, new = the working tree, interleaved; 36 blocks of 32 KiB (bench staging's), 2000 gets.
# usage: [OUT_DIR=DIR] bash bench/results/staging-2026-12-06-lookahead/getpath.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
D=${OUT_DIR:-bench/results/staging-2026-12-06-lookahead}  # where getpath.jsonl and runlog.txt go
. bench/results/ab-lib.sh
ab_setup "$1" /tmp/ab-getpath "$D/runlog.txt" lifeboatcache_core/src .
for i in $(seq 1 "$2"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    rm -rf /tmp/getpath-below
    ab_log "getpath pair $i $side"
    echo "{\"pair\": $i, \"side\": \"$side\", \"result\": $($AB_PY bench/results/dram-get-2026-12-06/dramget.py 36 32 2000 4 /tmp/getpath-below)}" >> "$D/getpath.jsonl"
  done
done
ab_done
