#!/bin/bash
# r36: r35's bounded 8-agent cell after keep_prefixes keeps every live session's block whatever the newcomer's
# depth (1ed8fe2); diag/sitecustomize.py logs as in r35 (the guard's judgements without a newcomer depth).
# Usage: bash run.sh OUT NAME REPEAT CONFIGS
set -u
D=$1; NAME=$2; REPEAT=$3; CONFIGS=$4
cd /work/main
mkdir -p "$D/events"
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
FLAGS="--dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat $REPEAT --configs $CONFIGS --agents 8 --disk-gb 0.54"
log start "$NAME" "$FLAGS"
LBC_DIAG_DIR="$D/events" PYTHONPATH="$PWD/bench/results/grid-2026-12-07-r36/diag" \
  .venv/bin/python -m lifeboatcache grid $FLAGS --out "$D/$NAME" > "$D/$NAME.stdout" 2> "$D/$NAME.stderr"
log end "$NAME" "rc=$?"
