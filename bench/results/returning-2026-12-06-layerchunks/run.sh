#!/bin/bash
# bench returning: our tier raw (codec none) against always-lossless, the lossless codec of this tree (one
# format-2 chunk per layer, abebcd3) and of 5ccc8aa (one per 128-token page; its codec package through
# PYTHONPATH from a worktree, WT), interleaved none, new, old, old, new, none; buffered I/O, five reps each.
# Usage: run.sh OUT_DIR WT. Nothing else heavy runs.
set -u
D=$1
WT=$2
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-5 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)" >> "$D/runlog.txt"; }
for run in none-1 new-1 old-1 old-2 new-2 none-2; do
  case $run in new*|old*) EXTRA="--codec lossless";; *) EXTRA="";; esac
  case $run in old*) PP="$WT/codecs/lossless/src";; *) PP="";; esac
  log start "$run $EXTRA ${PP:+PYTHONPATH=$PP}"
  PYTHONPATH="$PP" .venv/bin/python -m lifeboatcache bench returning --json --reps 5 $EXTRA --out "$D/$run.json" \
    > /dev/null 2> "$D/$run.stderr"
  log end "$run rc=$?"
done
