#!/usr/bin/env bash
# bench staging with each replay on an S3 server of its own (this tree), RUNS times each of MODES
# (estimate: --estimate; hints: the default), interleaved; usage: run.sh OUT_DIR RUNS
set -u
D=$1
RUNS=$2
cd "$(dirname "$0")/../../.."
mkdir -p "$D"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD)+wt $*" >> "$D/runlog.txt"; }
for i in $(seq 1 "$RUNS"); do
  for mode in estimate hints; do
    case $mode in estimate) EXTRA="--estimate";; *) EXTRA="";; esac
    log "run $i $mode"
    .venv/bin/lifeboatcache bench staging --traces ../shared/traces/kv-cache-tester $EXTRA --out "$D/$mode-run$i.json" \
      > "$D/$mode-run$i.txt" 2>&1
    log "end run $i $mode rc=$?"
  done
done
