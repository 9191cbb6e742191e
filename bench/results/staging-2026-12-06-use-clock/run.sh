#!/usr/bin/env bash
# bench staging --estimate (EpiCache on every tier, staging from its own return estimates), old = 4de2f23
# (the policy read the clock when a tier applied a deferred use) against the working tree (each use at
# its own time), interleaved: new old | old new. usage: bash bench/results/staging-2026-12-06-use-clock/run.sh PAIRS
set -u
cd "$(dirname "$0")/../../.."
OUT_DIR=bench/results/staging-2026-12-06-use-clock TAG=estimate \
  bash bench/results/staging-2026-12-05-proxy/run.sh 4de2f23 "${1:-2}" --estimate \
  --traces "$PWD/../shared/traces/kv-cache-tester"
