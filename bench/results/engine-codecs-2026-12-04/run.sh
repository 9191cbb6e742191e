#!/usr/bin/env bash
# Issue 16's native-mode lossless must-hold (identical greedy output, stored <= 0.72 of raw, returning TTFT within
# 5 % of no codec), none as the control in the same invocation. Nothing else may run meanwhile.
# CODECS sets the order (the bench runs them one after another): alternate it between invocations.
#   bash bench/results/engine-codecs-2026-12-04/run.sh TAG [CODECS]
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/engine-codecs-2026-12-04
echo "${1:-run} (${2:-none,lossless}) start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lifeboatcache_core adapters backends codecs || echo '+working tree')" >> "$OUT/runlog.txt"
rm -rf "/tmp/ec-${1:-run}"
.venv/bin/python -m lifeboatcache bench engine-codecs --codecs "${2:-none,lossless}" --workdir "/tmp/ec-${1:-run}" \
  --out "$OUT/${1:-run}.json" --json > "/tmp/ec-${1:-run}.stdout" 2> "/tmp/ec-${1:-run}.stderr"
rc=$?
echo "${1:-run} end $(date -u +%H:%M:%S) rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/runlog.txt"
