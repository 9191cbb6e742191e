#!/bin/bash
# r17: the 8-agent restart cell beside vllm-fs (three interleaved runs) after the read path change
# (341368a, 16c4da4: coding tiers decode from the backend's scratch map in one preadv), then bench
# returning with and without the lossless codec. Nothing else runs meanwhile. Tier directories in /tmp/r17.
set -u
cd /work/main
D=/tmp/r17
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon-restart.jsonl & MON=$!
ARGS="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 3 --configs vllm-fs,lifeboatcache --agents 8 --restart-after-round 4"
log start r17-a8-restart "$ARGS"
.venv/bin/python -m lifeboatcache grid $ARGS --out $D/r17-a8-restart > $D/r17-a8-restart.stdout 2> $D/r17-a8-restart.stderr
log end r17-a8-restart "rc=$?"
kill $MON
for codec in lossless none; do
  log start returning-$codec "returning --codec $codec --json"
  .venv/bin/python -m lifeboatcache bench returning --codec $codec --json > $D/returning-$codec.json 2> $D/returning-$codec.stderr
  log end returning-$codec "rc=$?"
done
