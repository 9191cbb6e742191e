#!/usr/bin/env bash
# A/B of the read path change (Backend.read_payload, streamed lossless decode), interleaved (../ab-lib.sh):
# old = BASE (core, file backend, lossless codec; its C extension is the new build, whose encode/decode
# are unchanged: the old codec never calls decode_prefix). Nothing else may run meanwhile.
#   bash bench/results/tiers-2026-12-04-stream/run.sh BASE RUNS [TAG]   (TAG names a later round's files)
set -u
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
TAG=${3:-}
OUT=bench/results/tiers-2026-12-04-stream
ab_setup "${1:-HEAD}" /tmp/ab-old "$OUT/runlog.txt" lifeboatcache_core/src backends/file/src codecs/lossless/src
cp codecs/lossless/src/lifeboatcache_codec_lossless/_planes*.so "$AB_OLD/codecs/lossless/src/lifeboatcache_codec_lossless/"
for i in $(seq 1 "${2:-3}"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "run $i $side: bench tiers --codec lossless ($(ab_tier_file))"
    $AB_PY -m lifeboatcache bench tiers --codec lossless --json --path /work/bench-ab > "$OUT/tiers-$side-$TAG$i.json"
    ab_log "run $i $side: fetch_cpu"
    $AB_PY "$OUT/fetch_cpu.py" /work/bench-ab > "$OUT/fetch-$side-$TAG$i.json"
  done
done
rm -rf /work/bench-ab
ab_done
