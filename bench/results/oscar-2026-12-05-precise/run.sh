#!/bin/bash
# oscar's precise layers, chosen on two calibration texts (a licence, a Python module) and judged on three
# held-out texts (another licence, two other Python modules) and on the calibration texts (in-sample).
# 1. rank (K/V, layer) with the model: bench codecs --rank-oscar-layers (precise_bits 3, >= 6x);
# 2. bench codecs --codecs oscar with and without those options on every text (no timing figures used).
set -u
cd /work/main
D=${1:-bench/results/oscar-2026-12-05-precise}  # a later round: a subfolder
source bench/results/oscar-2026-12-05-precise/lib.sh
rank $L/GPL-3 $PYD/argparse.py
for text in $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py $L/GPL-3 $PYD/argparse.py; do
  for variant in plain precise; do judge "$(basename $text)" $text $variant; done
done
