#!/bin/bash
# oscar's precise layers, chosen on two calibration texts (a licence, a Python module) and judged on three
# held-out texts (another licence, two other Python modules) and on the calibration texts (in-sample).
# 1. rank (K/V, layer) with the model: bench codecs --rank-oscar-layers (precise_bits 3, >= 6x);
# 2. bench codecs --codecs oscar with and without those options on every text (no timing figures used).
set -u
cd /work/main
D=${1:-bench/results/oscar-2026-12-05-precise}  # a later round: a subfolder
mkdir -p $D
PYD=$(.venv/bin/python -c "import argparse, os; print(os.path.dirname(argparse.__file__))")
L=/usr/share/common-licenses
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
log start rank
.venv/bin/python -m lifeboatcache bench codecs --rank-oscar-layers --calibrate-on $L/GPL-3 --calibrate-on $PYD/argparse.py \
  > $D/rank.json 2> $D/rank.stderr
log end "rank rc=$?"
OPTS=$(python3 -c "import json; print(json.dumps(json.load(open('$D/rank.json'))['codec_options']))")
for text in $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py $L/GPL-3 $PYD/argparse.py; do
  name=$(basename $text)
  for variant in plain precise; do
    [ $variant = plain ] && O='{}' || O=$OPTS
    log start "$name $variant $O"
    .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 1 --text $text \
      --oscar-options "$O" --json > $D/$name-$variant.json 2> $D/$name-$variant.stderr
    log end "$name $variant rc=$?"
  done
done
