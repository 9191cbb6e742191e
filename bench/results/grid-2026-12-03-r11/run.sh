#!/bin/bash
# r11: the 16-agent bounded cell after the fp8/lbq C kernels (one run per config), then bench tiers.
set -u
cd /work/main
D=/tmp/r11
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
ARGS="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 1 --agents 16 --configs vllm-fs,lifeboatcache,lifeboatcache:bench/configs/fp8.toml --disk-gb 0.5"
log start r11-bounded "$ARGS"
.venv/bin/python -m lifeboatcache grid $ARGS --out $D/r11-bounded > $D/grid.stdout 2> $D/grid.stderr
log end r11-bounded "rc=$?"
kill $MON
mkdir -p /tmp/bench/tiersdir
for run in tiers-1 tiers-lossless-1 tiers-2 tiers-lossless-2 tiers-3; do
  case $run in tiers-lossless*) EXTRA="--codec lossless";; *) EXTRA="";; esac
  log start $run "tiers --json $EXTRA"
  .venv/bin/python -m lifeboatcache bench tiers --json $EXTRA --path /tmp/bench/tiersdir > $D/$run.json 2> $D/$run.stderr
  log end $run "rc=$?"
done
