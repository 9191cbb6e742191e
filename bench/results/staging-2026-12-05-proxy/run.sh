#!/usr/bin/env bash
# bench staging, old = BASE, new = the working tree, interleaved (first use: the shaped S3 proxy in the
# measured process or in a process of its own; then a DRAM tier's jobs as one task); the loads' tail.
# usage: TAG=NAME bash bench/results/staging-2026-12-05-proxy/run.sh BASE PAIRS [bench staging options]
# (files NAME-runI-SIDE.json/.txt, in OUT_DIR if set)
set -u
cd "$(dirname "$0")/../../.."
D=${OUT_DIR:-bench/results/staging-2026-12-05-proxy}  # where the files go
. bench/results/ab-lib.sh
BASE=$1 PAIRS=$2 TAG=${TAG:-run}
shift 2
ab_setup "$BASE" /tmp/ab-staging-proxy "$D/runlog.txt" lifeboatcache_core/src .
for i in $(seq 1 "$PAIRS"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "run $i $side: $*"
    .venv/bin/lifeboatcache bench staging "$@" --out "$D/$TAG-run$i-$side.json" > "$D/$TAG-run$i-$side.txt" 2>&1
    ab_log "end run $i $side rc=$?"
  done
done
ab_done
