#!/bin/bash
# Issue 17's "<= 2 minutes of CPU per policy per size on the 150 traces": EpiCache (installed defaults) at 2, 5 and
# 10 % in its heaviest replay (vLLM's request ends and the tier's keep_prefixes guard), all 150 traces at once
# (--folds 1: bench traces defaults to 5-fold selection, which runs every candidate option set), nothing else
# running. CPU s per size is each result row's CPU figure.
# Usage: run.sh OUT_DIR
set -u
D=$1
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)" >> "$D/runlog.txt"; }
for policy in epicache; do
  log start "$policy"
  .venv/bin/python -m lifeboatcache bench traces --policy $policy --capacity-frac 0.02 --capacity-frac 0.05 \
    --capacity-frac 0.1 --folds 1 --request-ends --keep-prefixes --json --out "$D/$policy.json" > /dev/null 2> "$D/$policy.stderr"
  log end "$policy rc=$?"
done
