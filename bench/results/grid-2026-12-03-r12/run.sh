#!/bin/bash
# r12: the bounded cells (16 and 8 agents) beside vllm-fs after "reserve before encode" (bb3e2a5), three
# interleaved runs per column, then bench tiers. Nothing else heavy runs; code is not edited meanwhile.
set -u
cd /work/main
D=/tmp/r12
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
BASE="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 3 --configs vllm-fs,lifeboatcache"
for cell in "r12-bounded|--agents 16 --disk-gb 0.5" "r12-a8-bounded|--agents 8 --disk-gb 0.27"; do
  name=${cell%%|*}; extra=${cell#*|}
  log start $name "$BASE $extra"
  .venv/bin/python -m lifeboatcache grid $BASE $extra --out $D/$name > $D/$name.stdout 2> $D/$name.stderr
  log end $name "rc=$?"
done
kill $MON
mkdir -p /tmp/bench/tiersdir
for run in tiers-1 tiers-lossless-1 tiers-2; do
  case $run in tiers-lossless*) EXTRA="--codec lossless";; *) EXTRA="";; esac
  log start $run "tiers --json $EXTRA"
  .venv/bin/python -m lifeboatcache bench tiers --json $EXTRA --path /tmp/bench/tiersdir > $D/$run.json 2> $D/$run.stderr
  log end $run "rc=$?"
done
