#!/usr/bin/env bash
# Issue 16: the order compaction re-encodes raw blocks in (oldest written first, as at 976abed, with
# AB_ENV=LB_AB_OLDEST=1; or the raw blocks read or written last first), run b's cell of disk-fills-2026-12-04,
# interleaved. `bench disk-fills` feeds every setting the same requests in lockstep. Nothing else may run meanwhile.
#   bash bench/results/compaction-order-2026-12-04/run.sh TAG [extra bench options]
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/compaction-order-2026-12-04
TAG=$1; shift
echo "$TAG start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lifeboatcache_core lifeboatcache/bench || echo '+working tree') env ${AB_ENV:-none} args: $*" >> "$OUT/runlog.txt"
env "${AB_ENV:-X=1}" .venv/bin/python -m lifeboatcache bench disk-fills --json --out "$OUT/$TAG.json" "$@" > /dev/null 2> "/tmp/df-$TAG.stderr"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/runlog.txt"
