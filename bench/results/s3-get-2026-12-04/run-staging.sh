#!/usr/bin/env bash
# bench staging (defaults: DRAM for 2 sessions, file tier, S3 on moto behind the proxy at 20 ms + 200 MB/s),
# old (BASE) and new interleaved (../ab-lib.sh): its staging-off run reads every chunk below the file tier from S3,
# so its load latency shows the bulk get.
#   bash bench/results/s3-get-2026-12-04/run-staging.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
OUT=bench/results/s3-get-2026-12-04
ab_setup "${1:-HEAD}" /tmp/ab-old-staging "$OUT/runlog-staging.txt" lifeboatcache_core/src backends/s3/src \
  backends/file/src
for i in $(seq 1 "${2:-2}"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "pair $i $side: bench staging ($(ab_tier_file))"
    $AB_PY -m lifeboatcache bench staging --out "$OUT/staging-$side-$i.json" > /dev/null
  done
done
ab_done
