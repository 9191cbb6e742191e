#!/usr/bin/env bash
# bench tiers, old (BASE: core, file backend and lossless codec, its C extension built from BASE) against new (the
# working tree), interleaved through ../ab-lib.sh; the JSON of run I of a side is tiers-TAG<side>-I.json here.
# Nothing else may run meanwhile.
#   bash bench/results/tiers-2026-12-05-stream/ab_tiers.sh BASE RUNS TAG [bench tiers options...]
set -u
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
OUT=bench/results/tiers-2026-12-05-stream
BASE=$1 RUNS=$2 TAG=$3
shift 3
ab_setup "$BASE" /tmp/ab-old "$OUT/runlog.txt" lifeboatcache_core/src backends/file/src codecs/lossless/src
ab_build_ext codecs/lossless
for i in $(seq 1 "$RUNS"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "$TAG run $i $side: bench tiers $* ($(ab_tier_file))"
    $AB_PY -m lifeboatcache bench tiers "$@" --json --path /work/bench-ab > "$OUT/tiers-$TAG$side-$i.json" \
      2> "$OUT/tiers-$TAG$side-$i.stderr"
  done
done
rm -rf /work/bench-ab
ab_done
