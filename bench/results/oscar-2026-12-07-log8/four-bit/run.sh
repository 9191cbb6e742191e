#!/bin/bash
# The same six calibration texts ranked with the head of the ranking at 4 bits (bench codecs --rank-oscar-layers,
# --four-bit 4 by default: chosen on these six texts by proto.py, ../proto-run5-calib.out), judged on the ten
# held-out texts of ../run.sh. Perplexities are deterministic; no timing figure is used.
set -u
cd /work/main
D=bench/results/oscar-2026-12-07-log8/four-bit
source bench/results/oscar-2026-12-05-precise/lib.sh
T=$(mktemp -d)
for f in README.md docs/ARCHITECTURE.md adapters/vllm/README.md; do
  mkdir -p "$T/$(dirname $f)" && git show 02f35e5:$f > "$T/$f"
done
rank $L/GPL-3 $PYD/argparse.py /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py $T/README.md $L/GPL-2
for text in $L/GFDL-1.3 $PYD/tarfile.py $T/docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py \
            $PYD/json/decoder.py $PYD/collections/__init__.py $L/LGPL-2.1 $T/adapters/vllm/README.md; do
  judge "$(basename $(dirname $text))-$(basename $text)" $text precise
done
rm -rf "$T"
