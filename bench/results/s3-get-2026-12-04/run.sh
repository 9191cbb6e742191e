#!/usr/bin/env bash
# A/B of Tier.fetch_many (one bulk backend call per slice of a get), interleaved old/new:
# new = the working tree, old = BASE in a worktree, imported first via PYTHONPATH (core, the s3 and
# file backends, the lossless codec with the new build of its C extension, whose decode is unchanged).
# Per pair: an S3 get (get_latency.py, codecs none and lossless) and the CPU per 1,000 loads of a
# lossless file tier (../tiers-2026-12-04-stream/fetch_cpu.py: the engine's local path, which must
# not get slower). Nothing else may run meanwhile.
#   bash bench/results/s3-get-2026-12-04/run.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
BASE=${1:-HEAD}
PAIRS=${2:-3}
OUT=bench/results/s3-get-2026-12-04
OLD=/tmp/ab-old
PY=.venv/bin/python
rm -rf "$OLD" && git worktree prune && git worktree add -f --detach "$OLD" "$BASE" >/dev/null
cp codecs/lossless/src/lifeboatcache_codec_lossless/_planes*.so "$OLD/codecs/lossless/src/lifeboatcache_codec_lossless/"
OLDPATH="$OLD/lifeboatcache_core/src:$OLD/backends/s3/src:$OLD/backends/file/src:$OLD/codecs/lossless/src"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/runlog.txt"; }
log "start: new = $(git rev-parse --short HEAD)+working tree, old = $(git -C "$OLD" rev-parse --short HEAD)"
for i in $(seq 1 "$PAIRS"); do
  for side in new old; do
    [ $((i % 2)) -eq 0 ] && side=$([ "$side" = new ] && echo old || echo new)  # A B, B A, ...
    if [ "$side" = old ]; then export PYTHONPATH="$OLDPATH"; else unset PYTHONPATH; fi
    for codec in none lossless; do
      log "pair $i $side: s3 get, codec $codec ($($PY -c 'import lifeboatcache_core.tier as t; print(t.__file__)'))"
      $PY "$OUT/get_latency.py" "$codec" 15 > "$OUT/get-$codec-$side-$i.json"
    done
    log "pair $i $side: fetch_cpu"
    $PY bench/results/tiers-2026-12-04-stream/fetch_cpu.py /work/bench-ab > "$OUT/fetch-$side-$i.json"
    unset PYTHONPATH
  done
done
log "end"
rm -rf /work/bench-ab
git worktree remove --force "$OLD"
