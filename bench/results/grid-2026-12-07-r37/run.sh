#!/bin/bash
# r37: r36's bounded 8-agent cell (fp32, 0.5 GiB CPU tier, 0.54 GB tmpfs disk) with a third column,
# lifeboatcache:write-through (bench/configs/write-through.toml: exclusive_when_full = false), to test
# r36's hypothesis that the exclusive hand-over (chunks reach our full tier in CPU-tier coldness order,
# 1,645-1,774 demotions refused per server) is what keeps our misses dearer than vllm-fs's.
# Uses r35's diag (arrive/ask/end/judge events). Usage: bash run.sh OUT NAME REPEAT
# EXTRA_FLAGS (optional): grid flags put before the cell's own (r38: --traces DIR); CONFIGS (optional): other columns (r39)
set -u
D=$1; NAME=$2; REPEAT=$3
cd /work/main
mkdir -p "$D/events"
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
CONFIGS=${CONFIGS:-lifeboatcache,lifeboatcache:bench/configs/write-through.toml,vllm-fs}
FLAGS="${EXTRA_FLAGS:+$EXTRA_FLAGS }--dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat $REPEAT --configs $CONFIGS --agents 8 --disk-gb 0.54"
log start "$NAME" "$FLAGS"
LBC_DIAG_DIR="$D/events" PYTHONPATH="$PWD/bench/results/grid-2026-12-07-r35/diag" \
  .venv/bin/python -m lifeboatcache grid $FLAGS --out "$D/$NAME" > "$D/$NAME.stdout" 2> "$D/$NAME.stderr"
log end "$NAME" "rc=$?"
