#!/usr/bin/env bash
# Issue 16's must-hold on `bench returning` (256-token chunks, ~7.4k-token session): lossless no slower than no
# codec (TTFT from our tier within 5 %). One invocation per codec, one after the other in one session, the order
# given (alternate it between pairs); nothing else may run meanwhile.
#   bash bench/results/returning-codecs-2026-12-04/run.sh TAG CODEC
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/returning-codecs-2026-12-04
TAG=$1 CODEC=$2
echo "$TAG ($CODEC) start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lifeboatcache_core adapters backends codecs || echo '+working tree')" >> "$OUT/runlog.txt"
rm -rf "/tmp/rc-$TAG"
.venv/bin/python -m lifeboatcache bench returning --codec "$CODEC" --workdir "/tmp/rc-$TAG" \
  --out "$OUT/$TAG-$CODEC.json" --json > "/tmp/rc-$TAG.stdout" 2> "/tmp/rc-$TAG.stderr"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/runlog.txt"
rm -rf "/tmp/rc-$TAG"
