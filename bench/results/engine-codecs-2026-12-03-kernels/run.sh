#!/bin/bash
# engine-codecs A/B: C kernels (HEAD) vs the numpy codecs of 30978b5, same sessions, back to back.
set -u
cd /work/main
FILES="codecs/fp8/src/lifeboatcache_codec_fp8/codec.py codecs/lbq/src/lifeboatcache_codec_lbq/groups.py codecs/lbq/src/lifeboatcache_codec_lbq/lbq.py codecs/lbq/src/lifeboatcache_codec_lbq/oscar.py"
run() {  # $1 label
  echo "$1 start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) commit $(git rev-parse --short HEAD) $( [ "$1" = numpy ] && echo 'codec .py files of 30978b5')"
  .venv/bin/python -m lifeboatcache bench engine-codecs --codecs none,fp8,lbq4 --workdir /tmp/ec/work-$1 --out /tmp/ec/$1.json --json > /tmp/ec/$1.stdout 2> /tmp/ec/$1.stderr
  echo "$1 end $(date -u +%H:%M:%S) rc $? load $(cut -d' ' -f1-3 /proc/loadavg)"
}
run C1
for f in $FILES; do cp $f /tmp/ec/$(basename $f).new; git show 30978b5:$f > $f; done
run numpy
for f in $FILES; do git checkout -q HEAD -- $f; done
git status --short
run C2
