#!/bin/bash
# A fourth round: r3's four calibration texts gave better held-out figures than r2's two, so six here (r3's four plus
# a Markdown file, this repository's README.md, and another licence, GPL-2; Apache-2.0 is too short for 2,305
# tokens: the first attempt stopped there). Judged with the layers on r3's held-out texts and on four texts no round
# has seen (json/decoder.py, collections/__init__.py, LGPL-2.1, adapters/vllm/README.md; codecs/lbq/README.md was
# too short), those four also plain.
set -u
cd /work/main
D=bench/results/oscar-2026-12-05-precise/r4
source bench/results/oscar-2026-12-05-precise/lib.sh
rank $L/GPL-3 $PYD/argparse.py /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py README.md $L/GPL-2
for text in $L/GFDL-1.3 $PYD/tarfile.py docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py; do
  judge "$(basename $(dirname $text))-$(basename $text)" $text precise
done
for text in $PYD/json/decoder.py $PYD/collections/__init__.py $L/LGPL-2.1 adapters/vllm/README.md; do
  for variant in precise plain; do judge "$(basename $(dirname $text))-$(basename $text)" $text $variant; done
done
