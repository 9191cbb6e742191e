#!/bin/bash
# Issue 17: EpiCache's per-episode heap (2143fbc) against its depth buckets (BUCKETS_REV), side by side on this box:
# all 150 traces at once at 2 and 5 % of the working set, the heaviest replay (vLLM's request ends + the tier's
# keep_prefixes guard), installed defaults, nothing else running. The two are interleaved (heap, buckets, heap,
# buckets); each round swaps the policy module in the working tree (the package is installed editable) and puts
# BUCKETS_REV's back at the end. CPU s per size is each result row's cpu_seconds.
# Usage: run.sh OUT_DIR [ROUNDS [BUCKETS_REV]]   (ab-93aa3f6/: run.sh ab-93aa3f6 2 93aa3f6)
set -u
D=$1
ROUNDS=${2:-2}
BUCKETS=${3:-b8a2b78}
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
MOD=policies/epicache/src/lifeboatcache_policy_epicache/policy.py
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2" >> "$D/runlog.txt"; }
for round in $(seq 1 "$ROUNDS"); do
  for variant in heap:2143fbc "buckets:$BUCKETS"; do
    name=${variant%%:*} rev=${variant##*:}
    git show "$rev:$MOD" > "$MOD"
    log start "$name round $round ($rev)"
    .venv/bin/python -m lifeboatcache bench traces --policy epicache --capacity-frac 0.02 --capacity-frac 0.05 \
      --folds 1 --request-ends --keep-prefixes --json --out "$D/$name-$round.json" > /dev/null 2> "$D/$name-$round.stderr"
    log end "$name round $round rc=$?"
  done
done
git show "$BUCKETS:$MOD" > "$MOD"
