#!/usr/bin/env bash
# bench staging (defaults: DRAM for 2 sessions, file tier, S3 on moto behind the proxy at 20 ms + 200 MB/s),
# old (BASE, imported first via PYTHONPATH) and new (the working tree) interleaved: its staging-off run
# reads every chunk below the file tier from S3, so its load latency shows the bulk get.
#   bash bench/results/s3-get-2026-12-04/run-staging.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
BASE=${1:-HEAD}
PAIRS=${2:-2}
OUT=bench/results/s3-get-2026-12-04
OLD=/tmp/ab-old-staging
PY=.venv/bin/python
rm -rf "$OLD" && git worktree prune && git worktree add -f --detach "$OLD" "$BASE" >/dev/null
OLDPATH="$OLD/lifeboatcache_core/src:$OLD/backends/s3/src:$OLD/backends/file/src"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/runlog-staging.txt"; }
log "start: new = $(git rev-parse --short HEAD)+working tree, old = $(git -C "$OLD" rev-parse --short HEAD)"
for i in $(seq 1 "$PAIRS"); do
  for side in new old; do
    [ $((i % 2)) -eq 0 ] && side=$([ "$side" = new ] && echo old || echo new)
    if [ "$side" = old ]; then export PYTHONPATH="$OLDPATH"; else unset PYTHONPATH; fi
    log "pair $i $side: bench staging ($($PY -c 'import lifeboatcache_core.tier as t; print(t.__file__)'))"
    $PY -m lifeboatcache bench staging --out "$OUT/staging-$side-$i.json" > /dev/null
    unset PYTHONPATH
  done
done
log "end"
git worktree remove --force "$OLD"
