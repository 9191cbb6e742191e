#!/bin/bash
# A third round after unseen/ showed r2's layers at +7.7 to +15.9 % on five new texts: rank on four calibration
# texts (r2's two plus two of unseen/'s: a dpkg spec and pathlib.py), then judge on the other texts with and
# without the layers (held out: GFDL-1.3, tarfile.py, ARCHITECTURE.md, MPL-2.0, subprocess.py, typing.py).
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/r3
PYD=$(.venv/bin/python -c "import argparse, os; print(os.path.dirname(argparse.__file__))")
L=/usr/share/common-licenses
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
log start rank
.venv/bin/python -m lifeboatcache bench codecs --rank-oscar-layers --calibrate-on $L/GPL-3 --calibrate-on $PYD/argparse.py \
  --calibrate-on /usr/share/doc/dpkg/spec/triggers.txt --calibrate-on $PYD/pathlib.py > $D/rank.json 2> $D/rank.stderr
log end "rank rc=$?"
OPTS=$(python3 -c "import json; print(json.dumps(json.load(open('$D/rank.json'))['codec_options']))")
for text in $L/GFDL-1.3 $PYD/tarfile.py docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py; do
  name=$(basename $text)
  log start "$name precise $OPTS"
  .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 1 --text $text \
    --oscar-options "$OPTS" --json > $D/$name-precise.json 2> $D/$name-precise.stderr
  log end "$name precise rc=$?"
done
