#!/bin/bash
# bench returning --o-direct (our file tier's loads read the disk, not the page cache): codec none against
# always-lossless, interleaved none, lossless, lossless, none; three reps a run (a run takes ~12 min on the AMD box).
# Usage: run.sh OUT_DIR [RUN...] (default: the four runs below). Nothing else heavy runs.
set -u
D=$1
shift
RUNS=("$@")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(od-none-1 od-lossless-1 od-lossless-2 od-none-2)
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)" >> "$D/runlog.txt"; }
for run in "${RUNS[@]}"; do
  EXTRA=""
  case $run in *lossless*) EXTRA="--codec lossless";; esac
  case $run in od-*) EXTRA="$EXTRA --o-direct";; esac
  log start "$run $EXTRA"
  .venv/bin/python -m lifeboatcache bench returning --json --reps 3 $EXTRA --out "$D/$run.json" > /dev/null 2> "$D/$run.stderr"
  log end "$run rc=$?"
done
