#!/bin/bash
# A fourth round: r3's four calibration texts gave better held-out figures than r2's two, so six here (r3's four
# plus a Markdown file, this repository's README.md, and another licence, GPL-2; Apache-2.0 is too short for 2,305 tokens); judged with the layers on
# the held-out texts of r3 and four texts no round has seen (json/decoder.py, collections/__init__.py, LGPL-2.1,
# adapters/vllm/README.md; codecs/lbq/README.md was too short), each also plain.
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/r4
PYD=$(.venv/bin/python -c "import argparse, os; print(os.path.dirname(argparse.__file__))")
L=/usr/share/common-licenses
log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt; }
log start rank
.venv/bin/python -m lifeboatcache bench codecs --rank-oscar-layers --calibrate-on $L/GPL-3 --calibrate-on $PYD/argparse.py \
  --calibrate-on /usr/share/doc/dpkg/spec/triggers.txt --calibrate-on $PYD/pathlib.py --calibrate-on README.md \
  --calibrate-on $L/GPL-2 > $D/rank.json 2> $D/rank.stderr
log end "rank rc=$?"
OPTS=$(python3 -c "import json; print(json.dumps(json.load(open('$D/rank.json'))['codec_options']))")
for text in $L/GFDL-1.3 $PYD/tarfile.py docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py \
            $PYD/json/decoder.py $PYD/collections/__init__.py $L/LGPL-2.1 adapters/vllm/README.md; do
  name=$(basename $(dirname $text))-$(basename $text)
  for variant in precise plain; do
    case "$variant-$text" in plain-*GFDL*|plain-*tarfile*|plain-*ARCH*|plain-*MPL*|plain-*subprocess*|plain-*typing*) continue;; esac
    [ $variant = plain ] && O='{}' || O=$OPTS
    log start "$name $variant $O"
    .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 1 --text $text \
      --oscar-options "$O" --json > $D/$name-$variant.json 2> $D/$name-$variant.stderr
    log end "$name $variant rc=$?"
  done
done
