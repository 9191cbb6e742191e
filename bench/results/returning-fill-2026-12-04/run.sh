#!/usr/bin/env bash
# Issue 16's must-hold on `bench returning` (256-token chunks, ~7.4k-token session), with the codec setting
# LIFEBOAT_CACHE=1 now uses (lossless@0.8: raw until the 20 GB tier is 80 % full) against none: TTFT from our tier
# within 5 %. One invocation per setting, one after the other, the order given; nothing else may run meanwhile.
#   bash bench/results/returning-fill-2026-12-04/run.sh TAG CODEC
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/returning-fill-2026-12-04
TAG=$1 CODEC=$2
echo "$TAG ($CODEC) start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lifeboatcache_core adapters backends codecs || echo '+working tree')" >> "$OUT/runlog.txt"
rm -rf "/tmp/rc-$TAG"
.venv/bin/python -m lifeboatcache bench returning --codec "$CODEC" --workdir "/tmp/rc-$TAG" \
  --out "$OUT/$TAG-${CODEC/@/-from-}.json" --json > "/tmp/rc-$TAG.stdout" 2> "/tmp/rc-$TAG.stderr"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/runlog.txt"
rm -rf "/tmp/rc-$TAG"
