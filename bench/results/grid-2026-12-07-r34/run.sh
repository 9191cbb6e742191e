#!/bin/bash
# r34: r33's bounded 8-agent cell once more (lifeboatcache first, then vllm-fs), with the prefix guard's every
# judgement logged (diag/sitecustomize.py on PYTHONPATH: LBC_DIAG_DIR gets one JSON line per victim judged), to see
# why our tier's 15 % more blocks on the same disk (lossless on float32 KV) served no more of the prompts than vllm-fs.
# r34 ran at 106f21c (the guard sampling every use), r34b after the guard's return gaps went end to end.
# Usage: bash run.sh OUT NAME [REPEAT]
set -u
D=$1; NAME=$2; REPEAT=${3:-1}
cd /work/main
mkdir -p "$D/guard"
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
FLAGS="--dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat $REPEAT --configs lifeboatcache,vllm-fs --agents 8 --disk-gb 0.54"
log start "$NAME" "$FLAGS"
LBC_DIAG_DIR="$D/guard" PYTHONPATH="$PWD/bench/results/grid-2026-12-07-r34/diag" \
  .venv/bin/python -m lifeboatcache grid $FLAGS --out "$D/$NAME" > "$D/$NAME.stdout" 2> "$D/$NAME.stderr"
log end "$NAME" "rc=$?"
