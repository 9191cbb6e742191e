#!/usr/bin/env bash
# Issue 18's no-regression check for restart recovery: `bench recovery` interleaved old/new (../ab-lib.sh).
# old = BASE (default 4ba054f, the tree before issue 18's layering: core and the app, whose file backend was
# still a core built-in); new = the working tree. Each side prepares its own tier once (its own path, so neither
# reads a tier the other wrote), then every run opens it in a fresh process with a cold page cache.
# Only the file backend is loaded on both sides (LIFEBOATCACHE_LOAD_PLUGINS), so the old side never imports a
# newer plugin; python runs from /tmp so that its cwd (first on sys.path) is neither tree. Nothing else may run
# meanwhile.
#   bash bench/results/recovery-2026-12-04/run.sh BASE PAIRS BLOCKS
# (after the recorded run, two unused imports left the prepare step's one-liner: same steps)
set -eu
cd "$(dirname "$0")/../../.."
source bench/results/ab-lib.sh
AB_PY=$PWD/.venv/bin/python
OUT=bench/results/recovery-2026-12-04
BLOCKS=${3:-1000000}
export LIFEBOATCACHE_LOAD_PLUGINS=file
ab_setup "${1:-4ba054f}" /tmp/ab-old-recovery "$OUT/runlog.txt" lifeboatcache_core/src .
for side in new old; do
  ab_use "$side"
  ab_log "prepare $side: $BLOCKS blocks ($(ab_tier_file))"
  (cd /tmp && $AB_PY -c "from pathlib import Path; from lifeboatcache.bench.recovery import prepare
prepare(Path('/work/bench-recovery/$side/recovery-${BLOCKS}x4096'), $BLOCKS, 4096, show_progress=False)")
done
for i in $(seq 1 "${2:-3}"); do
  for side in $(ab_sides "$i"); do
    ab_use "$side"
    ab_log "pair $i $side: bench recovery ($(cd /tmp && ab_tier_file), app $(cd /tmp && $AB_PY -c 'import lifeboatcache; print(lifeboatcache.__file__)'))"
    (cd /tmp && $AB_PY -m lifeboatcache bench recovery --blocks "$BLOCKS" --path "/work/bench-recovery/$side" --json) \
      > "$OUT/recovery-$side-$i.json"
    ab_log "pair $i $side: $(cat "$OUT/recovery-$side-$i.json")"
  done
done
ab_done
