#!/bin/bash
# Recorded as run: the py-spy watcher and the sitecustomize were under /tmp/r14 and /tmp/r15 (copies in this folder).
# threadmon_schedstat.py = grid-2026-12-02-r9/threadmon.py with threadmon_schedstat.patch applied (was /tmp/r16).
# r14: where the restarted server's time goes at 8 agents: one run of each column, py-spy on each restarted EngineCore.
set -u
cd /work/main
D=/tmp/r16
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD) ${3:-}" >> $D/runlog.txt; }
.venv/bin/python /tmp/r16/threadmon2.py $D/threadmon.jsonl & MON=$!
SPY=$MON
ARGS="--dram-gb 0.25 --rounds 8 --scale 0.0625 --max-model-len 8192 --block-size 32 --max-tokens 16 --device-kv-blocks 320 --repeat 1 --configs lifeboatcache,vllm-fs --agents 8 --restart-after-round 4"
log start r16-a8-restart "$ARGS"
.venv/bin/python -m lifeboatcache grid $ARGS --out $D/r16-a8-restart > $D/r16-a8-restart.stdout 2> $D/r16-a8-restart.stderr
log end r16-a8-restart "rc=$?"
kill $MON $SPY
