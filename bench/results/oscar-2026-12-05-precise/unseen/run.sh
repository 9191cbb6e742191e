#!/bin/bash
# oscar's precise layers as r2 chose them (r2/rank.json: calibrated on GPL-3 + argparse.py), judged on five texts
# no earlier round saw: another licence, a dpkg spec (technical prose), two other Python modules and this
# repository's docs/ARCHITECTURE.md (Markdown). bench codecs --codecs oscar with and without those options.
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/unseen
source bench/results/oscar-2026-12-05-precise/lib.sh
opts_from bench/results/oscar-2026-12-05-precise/r2/rank.json
for text in $L/GFDL-1.3 /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py $PYD/tarfile.py docs/ARCHITECTURE.md; do
  for variant in plain precise; do judge "$(basename $text)" $text $variant; done
done
