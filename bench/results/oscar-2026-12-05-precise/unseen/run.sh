#!/bin/bash
# oscar's precise layers as r2 chose them (r2/rank.json: calibrated on GPL-3 + argparse.py), judged on five texts
# no earlier round saw: another licence, a dpkg spec (technical prose), two other Python modules and this
# repository's docs/ARCHITECTURE.md (Markdown). bench codecs --codecs oscar with and without those options.
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/unseen
PYD=$(.venv/bin/python -c "import argparse, os; print(os.path.dirname(argparse.__file__))")
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
OPTS=$(python3 -c "import json; print(json.dumps(json.load(open('bench/results/oscar-2026-12-05-precise/r2/rank.json'))['codec_options']))")
for text in /usr/share/common-licenses/GFDL-1.3 /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py $PYD/tarfile.py \
            docs/ARCHITECTURE.md; do
  name=$(basename $text)
  for variant in plain precise; do
    [ $variant = plain ] && O='{}' || O=$OPTS
    log start "$name $variant $O"
    .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 1 --text $text \
      --oscar-options "$O" --json > $D/$name-$variant.json 2> $D/$name-$variant.stderr
    log end "$name $variant rc=$?"
  done
done
