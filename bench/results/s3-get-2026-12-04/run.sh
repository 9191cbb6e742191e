#!/usr/bin/env bash
# A/B of Tier.fetch_many (one bulk backend call per slice of a get), interleaved old/new (../ab-lib.sh):
# old = BASE (core, the s3 and file backends, the lossless codec with the new build of its C extension, whose
# decode is unchanged). Per pair: an S3 get (get_latency.py, codecs none and lossless) and the CPU per 1,000 loads
# of a lossless file tier (../tiers-2026-12-04-stream/fetch_cpu.py: the engine's local path, which must not get
# slower). Nothing else may run meanwhile.
#   bash bench/results/s3-get-2026-12-04/run.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
OUT=bench/results/s3-get-2026-12-04
ab_setup "${1:-HEAD}" /tmp/ab-old "$OUT/runlog.txt" lifeboatcache_core/src backends/s3/src backends/file/src \
  codecs/lossless/src
cp codecs/lossless/src/lifeboatcache_codec_lossless/_planes*.so "$AB_OLD/codecs/lossless/src/lifeboatcache_codec_lossless/"
for i in $(seq 1 "${2:-3}"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    for codec in none lossless; do
      ab_log "pair $i $side: s3 get, codec $codec ($(ab_tier_file))"
      $AB_PY "$OUT/get_latency.py" "$codec" 15 > "$OUT/get-$codec-$side-$i.json"
    done
    ab_log "pair $i $side: fetch_cpu"
    $AB_PY bench/results/tiers-2026-12-04-stream/fetch_cpu.py /work/bench-ab > "$OUT/fetch-$side-$i.json"
  done
done
rm -rf /work/bench-ab
ab_done
