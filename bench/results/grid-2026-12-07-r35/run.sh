#!/bin/bash
# r35: r34b's bounded 8-agent cell after the tier marks a request's chain used when vLLM first asks for it
# (LifeboatTier._mark_asked). diag/sitecustomize.py logs arrivals, first asks (with chains), ends and every
# victim the prefix guard judges, to see whether live sessions' heads are still evicted as idle, and whether
# a request waits in vLLM's queue before it is first asked for.
# r36 (another folder as OUT) ran it after keep_prefixes kept every live block (1ed8fe2).
# Usage: bash run.sh OUT NAME REPEAT CONFIGS
set -u
D=$1; NAME=$2; REPEAT=$3; CONFIGS=$4
cd /work/main
mkdir -p "$D/events"
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
FLAGS="--dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat $REPEAT --configs $CONFIGS --agents 8 --disk-gb 0.54"
log start "$NAME" "$FLAGS"
LBC_DIAG_DIR="$D/events" PYTHONPATH="$PWD/bench/results/grid-2026-12-07-r35/diag" \
  .venv/bin/python -m lifeboatcache grid $FLAGS --out "$D/$NAME" > "$D/$NAME.stdout" 2> "$D/$NAME.stderr"
log end "$NAME" "rc=$?"
