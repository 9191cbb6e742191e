#!/usr/bin/env bash
# bench staging (hints), old = BASE vs the working tree, on trace sets the default replay never reads:
# the 11th-20th and the 31st-40th traces of ../shared/traces/kv-cache-tester in name order (the default
# replays the first ten). usage: [OUT_DIR=DIR] bash heldout.sh BASE PAIRS (files in DIR, default this folder)
set -u
cd "$(dirname "$0")/../../.."
BASE=$1 PAIRS=$2
OUT=${OUT_DIR:-bench/results/staging-2026-12-06-rewind}
SRC=$(cd ../shared/traces/kv-cache-tester && pwd)
for range in 11,20 31,40; do
  dir=/tmp/heldout-${range/,/-}
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$SRC" && ls trace_*.json.gz | sed -n "${range}p" | while read -r f; do ln -s "$SRC/$f" "$dir/$f"; done)
  OUT_DIR=$OUT TAG=heldout-${range/,/-} \
    bash bench/results/staging-2026-12-05-proxy/run.sh "$BASE" "$PAIRS" --traces "$dir"
done
