#!/bin/bash
# OSCAR with log8 row grids (two bytes a row instead of a float16 scale and zero): the six calibration texts of
# oscar-2026-12-05-precise/r4 ranked again under log8 (bench codecs chooses as many precise layers as keep >= 6x),
# judged on r4's ten held-out texts beside plain log8 oscar and what shipped before (r4's nine layers, float16
# grids). The repository's own texts are read at 02f35e5, the commit r4 read them at. Perplexities are
# deterministic; no timing figure is used.
set -u
cd /work/main
D=bench/results/oscar-2026-12-07-log8
source bench/results/oscar-2026-12-05-precise/lib.sh
T=$(mktemp -d)
for f in README.md docs/ARCHITECTURE.md adapters/vllm/README.md; do
  mkdir -p "$T/$(dirname $f)" && git show 02f35e5:$f > "$T/$f"
done
rank $L/GPL-3 $PYD/argparse.py /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py $T/README.md $L/GPL-2
NEW=$OPTS
OLD='{"precise_k": [8, 17, 18, 20, 22, 23, 24, 26], "precise_v": [18], "precise_bits": 3, "ranges": "float16"}'
for text in $L/GFDL-1.3 $PYD/tarfile.py $T/docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py \
            $PYD/json/decoder.py $PYD/collections/__init__.py $L/LGPL-2.1 $T/adapters/vllm/README.md; do
  name="$(basename $(dirname $text))-$(basename $text)"
  OPTS=$NEW; judge "$name" $text precise
  judge "$name" $text plain
  OPTS=$OLD; judge "$name-shipped" $text precise
done
rm -rf "$T"
