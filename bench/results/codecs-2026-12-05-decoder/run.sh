#!/bin/bash
# bench codecs, lossless + lossless_fp8 (ZipNN in every run): the decoder before (7d8d8f9's codec package
# through PYTHONPATH from a worktree, /tmp/wt-old) and after (the working tree), interleaved.
set -u
cd /work/main
D=${1:-/tmp/codecs-ab}
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2" >> $D/runlog.txt; }
for run in old-1 new-1 new-2 old-2; do
  case $run in old*) PP=/tmp/wt-old/codecs/lossless/src;; *) PP=;; esac
  log start "$run PYTHONPATH=$PP"
  PYTHONPATH=$PP .venv/bin/python -m lifeboatcache bench codecs --codecs lossless,lossless_fp8 --repeats 5 --json > $D/$run.json 2> $D/$run.stderr
  log end "$run rc=$?"
done
