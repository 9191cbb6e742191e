#!/bin/bash
# ../returning-2026-12-05-decoder/tierload.py with the lossless codec of 5ccc8aa (one chunk per 128-token page;
# its codec package through PYTHONPATH from a worktree WT) and of this tree (one chunk per layer), interleaved
# old, new, new, old, 20 loads per codec each; then decode_layout.py the same way. Usage: tierload.sh OUT_DIR WT
set -u
D=$1
WT=$2
mkdir -p "$D"
cd "$(dirname "$0")/../../.."
HERE=bench/results/returning-2026-12-06-layerchunks
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)" >> "$D/tierload.log"; }
for script in bench/results/returning-2026-12-05-decoder/tierload.py $HERE/decode_layout.py; do
  for run in old-1 new-1 new-2 old-2; do
    case $run in old*) PP=$WT/codecs/lossless/src;; *) PP=;; esac
    log start "$run $(basename $script)"
    PYTHONPATH=$PP OPENBLAS_NUM_THREADS=1 .venv/bin/python $script 20 2>/dev/null | sed "s/^/$run /" >> "$D/tierload.log"
    log end "$run"
  done
done
