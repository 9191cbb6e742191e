#!/bin/bash
# tierload.py with the lossless codec before (7d8d8f9's codec package through PYTHONPATH from a worktree at
# /tmp/wt-old, its extension built in place) and after (the working tree), interleaved, 20 loads per codec each.
set -u
cd /work/main
D=bench/results/returning-2026-12-05-decoder
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/tierload.log; }
for run in old-1 new-1 new-2 old-2; do
  case $run in old*) PP=/tmp/wt-old/codecs/lossless/src;; *) PP=;; esac
  log start "$run"
  PYTHONPATH=$PP .venv/bin/python $D/tierload.py 20 2>/dev/null | sed "s/^/$run /" >> $D/tierload.log
  log end "$run"
done
