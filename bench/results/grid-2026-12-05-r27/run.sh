#!/bin/bash
# r27: the bounded cells (16 agents/0.5 GB, 8 agents/0.27 GB) with the default column beside the same stack with
# o_direct = true (bench/configs/odirect.toml) and vllm-fs, two interleaved runs, on the 2-core Intel Xeon.
# Nothing else heavy runs; code is not edited meanwhile.
set -u
cd /work/main
D=/tmp/r27
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py $D/threadmon.jsonl & MON=$!
BASE="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --configs vllm-fs,lifeboatcache,lifeboatcache:bench/configs/odirect.toml --repeat 2"
# invoked as: run.sh "r27-bounded16|--agents 16 --disk-gb 0.5" "r27-a8-bounded|--agents 8 --disk-gb 0.27"
for cell in "$@"; do
  name=${cell%%|*}; extra=${cell#*|}
  log start $name "$BASE $extra"
  .venv/bin/python -m lifeboatcache grid $BASE $extra --out $D/$name > $D/$name.stdout 2> $D/$name.stderr
  log end $name "rc=$?"
done
kill $MON
