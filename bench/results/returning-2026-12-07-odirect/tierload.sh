#!/bin/bash
# The tier alone (../returning-2026-12-05-decoder/tierload.py: a returning session's 29 chunks of real SmolLM2 bf16
# KV, codec none and lossless alternated in one process, 20 loads each), buffered and with O_DIRECT, interleaved
# buffered, odirect, odirect, buffered. Usage: tierload.sh OUT_DIR. Nothing else heavy runs.
set -u
D=$1
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)" >> "$D/tierload.log"; }
for run in buffered-1 odirect-1 odirect-2 buffered-2; do
  case $run in odirect*) FLAG=--o-direct;; *) FLAG=;; esac
  log start "$run"
  OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/results/returning-2026-12-05-decoder/tierload.py 20 $FLAG 2>/dev/null \
    | sed "s/^/$run /" >> "$D/tierload.log"
  log end "$run"
done
