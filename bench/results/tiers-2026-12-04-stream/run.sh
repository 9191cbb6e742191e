#!/usr/bin/env bash
# A/B of the read path change (Backend.read_payload, streamed lossless decode), interleaved:
# new = the working tree, old = BASE checked out in a worktree, imported first via PYTHONPATH
# (core, file backend, lossless codec; its C extension is the new build, whose encode/decode
# are unchanged: the old codec never calls decode_prefix). Nothing else may run meanwhile.
#   bash bench/results/tiers-2026-12-04-stream/run.sh BASE RUNS [TAG]   (TAG names a later round's files)
set -u
cd "$(dirname "$0")/../../.."
BASE=${1:-HEAD}
RUNS=${2:-3}
TAG=${3:-}
OUT=bench/results/tiers-2026-12-04-stream
OLD=/tmp/ab-old
PY=.venv/bin/python
rm -rf "$OLD" && git worktree prune && git worktree add -f --detach "$OLD" "$BASE" >/dev/null
cp codecs/lossless/src/lifeboatcache_codec_lossless/_planes*.so "$OLD/codecs/lossless/src/lifeboatcache_codec_lossless/"
OLDPATH="$OLD/lifeboatcache_core/src:$OLD/backends/file/src:$OLD/codecs/lossless/src"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/runlog.txt"; }
log "start: new = $(git rev-parse --short HEAD)+working tree, old = $(git -C "$OLD" rev-parse --short HEAD)"
for i in $(seq 1 "$RUNS"); do
  for side in new old; do
    [ $((i % 2)) -eq 0 ] && side=$([ "$side" = new ] && echo old || echo new)  # A B, B A, ...
    if [ "$side" = old ]; then export PYTHONPATH="$OLDPATH"; else unset PYTHONPATH; fi
    log "run $i $side: bench tiers --codec lossless ($($PY -c 'import lifeboatcache_core.tier as t; print(t.__file__)'))"
    $PY -m lifeboatcache bench tiers --codec lossless --json --path /work/bench-ab > "$OUT/tiers-$side-$TAG$i.json"
    log "run $i $side: fetch_cpu"
    $PY "$OUT/fetch_cpu.py" /work/bench-ab > "$OUT/fetch-$side-$TAG$i.json"
    unset PYTHONPATH
  done
done
log "end"
rm -rf /work/bench-ab
git worktree remove --force "$OLD"
