#!/bin/bash
# r21: the head-to-head cells at today's default (lossless from 80 % full, compaction) beside vllm-fs,
# three interleaved runs per column, on a 2-core AMD EPYC (family 25 model 17, AVX-512). Nothing else heavy runs.
set -u
cd /work/main
# invoked as: run.sh "r21-a8-restart|--configs vllm-fs,lifeboatcache --agents 8 --restart-after-round 4" \
#   "r21-a8-bounded|--configs vllm-fs,lifeboatcache --agents 8 --disk-gb 0.27", then
#   run.sh "r21-bounded|--configs vllm-fs,lifeboatcache --agents 16 --disk-gb 0.5"
D=/tmp/r21
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
BASE="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 3"
for cell in "$@"; do
  name=${cell%%|*}; extra=${cell#*|}
  log start $name "$BASE $extra"
  .venv/bin/python -m lifeboatcache grid $BASE $extra --out $D/$name > $D/$name.stdout 2> $D/$name.stderr
  log end $name "rc=$?"
done
kill $MON
