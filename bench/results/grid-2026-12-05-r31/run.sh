#!/bin/bash
# r31: engine.promotion_budget 0.5 (default) vs 0.75 vs 1.0 beside vllm-fs: first the 8-agent bounded cell (where
# 16-17 of 71 requests waited 30-37 s in all for the budget, r30), two interleaved runs; then the 16-agent
# unbounded cell (where the budget was made: 1.63x over none), two runs. Nothing else heavy runs.
set -u
cd /work/main
D=/tmp/r31
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
BASE="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 2"
for cell in "$@"; do
  name=${cell%%|*}; extra=${cell#*|}
  log start $name "$BASE $extra"
  .venv/bin/python -m lifeboatcache grid $BASE $extra --out $D/$name > $D/$name.stdout 2> $D/$name.stderr
  log end $name "rc=$?"
done
kill $MON
