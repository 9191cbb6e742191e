#!/usr/bin/env bash
# bench staging --estimate (EpiCache on every tier, staging from its own return estimates): old = BASE's
# EpiCache (a visit: operations back to back only) against the working tree's (visit_window), interleaved
# new old | old new. usage: bash bench/results/traces-2026-12-06-deferred-ends/staging_ab.sh BASE PAIRS
set -u
cd "$(dirname "$0")/../../.."
D=bench/results/traces-2026-12-06-deferred-ends
. bench/results/ab-lib.sh
BASE=$1 PAIRS=$2
ab_setup "$BASE" /tmp/ab-epicache-window "$D/runlog.txt" policies/epicache/src lifeboatcache_core/src .
for i in $(seq 1 "$PAIRS"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "staging run $i $side: policy $($AB_PY -c 'import lifeboatcache_policy_epicache.policy as p; print(p.__file__)')"
    .venv/bin/lifeboatcache bench staging --estimate --traces "$PWD/../shared/traces/kv-cache-tester" \
      --out "$D/estimate-run$i-$side.json" > "$D/estimate-run$i-$side.txt" 2>&1
    ab_log "end run $i $side rc=$?"
  done
done
ab_done
