# Sourced by run.sh and four-bit/run.sh (after lib.sh of oscar-2026-12-05-precise, which sets L and PYD): the six
# calibration texts (CALIB) and ten held-out texts (HELD) of the r4 round, the repository's own at 02f35e5, the
# commit r4 read them at, extracted into $T (removed on exit).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for f in README.md docs/ARCHITECTURE.md adapters/vllm/README.md; do
  mkdir -p "$T/$(dirname $f)" && git show 02f35e5:$f > "$T/$f"
done
CALIB=($L/GPL-3 $PYD/argparse.py /usr/share/doc/dpkg/spec/triggers.txt $PYD/pathlib.py $T/README.md $L/GPL-2)
HELD=($L/GFDL-1.3 $PYD/tarfile.py $T/docs/ARCHITECTURE.md $L/MPL-2.0 $PYD/subprocess.py $PYD/typing.py
      $PYD/json/decoder.py $PYD/collections/__init__.py $L/LGPL-2.1 $T/adapters/vllm/README.md)
