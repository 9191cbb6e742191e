#!/bin/bash
# The same six calibration texts ranked with the head of the ranking at 4 bits (bench codecs --rank-oscar-layers,
# --four-bit 4 by default: chosen on these six texts by proto.py, ../proto-run5-calib.out), judged on the ten
# held-out texts of ../run.sh. Perplexities are deterministic; no timing figure is used.
set -u
cd /work/main
D=bench/results/oscar-2026-12-07-log8/four-bit
source bench/results/oscar-2026-12-05-precise/lib.sh
source $D/../texts.sh
rank "${CALIB[@]}"
for text in "${HELD[@]}"; do
  judge "$(basename $(dirname $text))-$(basename $text)" $text precise
done
