#!/bin/bash
# A third round after unseen/ showed r2's layers at +7.7 to +15.9 % on five new texts: rank on four calibration
# texts (r2's two plus two of unseen/'s: a dpkg spec and pathlib.py), then judge on the other texts with the layers
# (held out: GFDL-1.3, tarfile.py, ARCHITECTURE.md, MPL-2.0, subprocess.py, typing.py; plain figures in unseen/, r2/).
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/r3
source bench/results/oscar-2026-12-05-precise/lib.sh
rank $L/GPL-3 $PYD/argparse.py /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py
for text in $L/GFDL-1.3 $PYD/tarfile.py docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py; do
  judge "$(basename $text)" $text precise
done
