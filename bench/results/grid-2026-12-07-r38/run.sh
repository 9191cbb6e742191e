#!/bin/bash
# r38: r37's three columns (lifeboatcache, lifeboatcache:write-through, vllm-fs) in the same bounded 8-agent cell
# on other traces, to check r37 before a default changes: the traces of ../shared sorted by name, from the 76th on
# (the grid takes the first 8 that fit 8,192 tokens; r37 took the first 8 of the whole set).
# Usage: bash run.sh OUT NAME REPEAT
set -u
D=$1; NAME=$2; REPEAT=$3
cd /work/main
TR=/tmp/traces-b
mkdir -p "$TR" "$D/events"
(cd ../shared/traces/kv-cache-tester && ls trace_*.json.gz | sort | tail -n +76 | while read -r f; do ln -sfn "$PWD/$f" "$TR/$f"; done)
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
CONFIGS=lifeboatcache,lifeboatcache:bench/configs/write-through.toml,vllm-fs
FLAGS="--traces $TR --dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat $REPEAT --configs $CONFIGS --agents 8 --disk-gb 0.54"
log start "$NAME" "$FLAGS"
LBC_DIAG_DIR="$D/events" PYTHONPATH="$PWD/bench/results/grid-2026-12-07-r35/diag" \
  .venv/bin/python -m lifeboatcache grid $FLAGS --out "$D/$NAME" > "$D/$NAME.stdout" 2> "$D/$NAME.stderr"
log end "$NAME" "rc=$?"
