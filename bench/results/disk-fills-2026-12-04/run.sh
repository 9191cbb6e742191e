#!/usr/bin/env bash
# Issue 15/16: the vLLM tier's default codec setting on a disk that fills and on one that does not
# (`bench disk-fills`: every setting fed the same requests in lockstep). Nothing else may run meanwhile.
#   bash bench/results/disk-fills-2026-12-04/run.sh TAG [extra bench options]
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/disk-fills-2026-12-04
TAG=$1; shift
echo "$TAG start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lifeboatcache_core lifeboatcache/bench || echo '+working tree') args: $*" >> "$OUT/runlog.txt"
.venv/bin/python -m lifeboatcache bench disk-fills --json --out "$OUT/$TAG.json" "$@" > /dev/null 2> "/tmp/df-$TAG.stderr"
rc=$?
echo "$TAG end $(date -u +%H:%M:%S) rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/runlog.txt"
