#!/bin/bash
# r33: the two 8-agent cells issue 15 asks >= 10 % of (a restart after round 4; a disk that holds about a third of
# the run's KV) at today's defaults, vllm-fs beside lifeboatcache, three interleaved runs each (--repeat 3).
# On this 2-core AVX2 AMD EPYC vLLM emulates bfloat16 (a request took 66 s in bf16 here), so the engine runs in
# float32, whose KV takes twice the bytes a token: --dram-gb and --disk-gb are twice r25b's (0.25, 0.27) so each
# holds the same tokens. Nothing else heavy runs meanwhile.
# Usage: bash run.sh OUT "NAME|GRID FLAGS"...
set -u
D=$1; shift
cd /work/main
mkdir -p "$D"
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> "$D/runlog.txt"; }
.venv/bin/python bench/results/grid-2026-12-02-r9/threadmon.py "$D/threadmon.jsonl" & MON=$!
BASE="--dtype float32 --dram-gb 0.5 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 3 --configs vllm-fs,lifeboatcache"
for cell in "$@"; do
  name=${cell%%|*}; extra=${cell#*|}
  log start "$name" "$BASE $extra"
  .venv/bin/python -m lifeboatcache grid $BASE $extra --out "$D/$name" > "$D/$name.stdout" 2> "$D/$name.stderr"
  log end "$name" "rc=$?"
done
kill $MON
