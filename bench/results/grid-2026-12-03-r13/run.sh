#!/bin/bash
# r13: is the promotion budget what slows the rounds after a restart at 8 agents? The restart cell with
# the default column, the same stack with engine.promotion_budget = 0, and vllm-fs, three interleaved runs.
set -u
cd /work/main
D=/tmp/r13
mkdir -p $D
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
ARGS="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 3 --configs vllm-fs,lifeboatcache,lifeboatcache:bench/configs/no-budget.toml --agents 8 --restart-after-round 4"
log start r13-a8-restart "$ARGS"
.venv/bin/python -m lifeboatcache grid $ARGS --out $D/r13-a8-restart > $D/r13-a8-restart.stdout 2> $D/r13-a8-restart.stderr
log end r13-a8-restart "rc=$?"
kill $MON
