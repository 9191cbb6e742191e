#!/bin/bash
# OSCAR with log8 row grids (two bytes a row instead of a float16 scale and zero): the six calibration texts of
# oscar-2026-12-05-precise/r4 ranked again under log8 (bench codecs chooses as many precise layers as keep >= 6x),
# judged on r4's ten held-out texts beside plain log8 oscar and what shipped before (r4's nine layers, float16
# grids). The repository's own texts are read at 02f35e5, the commit r4 read them at. Perplexities are
# deterministic; no timing figure is used. Ran at a93c40c (05:09-05:31), before the ranking's --four-bit (default 4
# since f59191a): run at a later commit, its rank step chooses four layers at 4 bits, as four-bit/run.sh did.
set -u
cd /work/main
D=bench/results/oscar-2026-12-07-log8
source bench/results/oscar-2026-12-05-precise/lib.sh
source $D/texts.sh
rank "${CALIB[@]}"
NEW=$OPTS
OLD='{"precise_k": [8, 17, 18, 20, 22, 23, 24, 26], "precise_v": [18], "precise_bits": 3, "ranges": "float16"}'
for text in "${HELD[@]}"; do
  name="$(basename $(dirname $text))-$(basename $text)"
  OPTS=$NEW; judge "$name" $text precise
  judge "$name" $text plain
  OPTS=$OLD; judge "$name-shipped" $text precise
done
