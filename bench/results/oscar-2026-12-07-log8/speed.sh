#!/bin/bash
# oscar's speed with log8 row grids against float16 ones (the same codec, `ranges` the only difference), one text,
# interleaved float16 / log8 / log8 / float16 / float16 / log8, nothing else running. bench codecs reports encode and
# decode GB/s of raw bytes per CPU second of all threads, one thread on blocks one after another, and wall clock with
# the blocks spread over the cores.
set -u
cd /work/main
D=bench/results/oscar-2026-12-07-log8
TEXT=/usr/share/common-licenses/GPL-3
n=0
for ranges in float16 log8 log8 float16 float16 log8; do
  n=$((n + 1))
  echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) speed-$n $ranges commit $(git rev-parse --short HEAD)+wt" >> $D/runlog.txt
  .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 5 --text $TEXT \
    --oscar-options "{\"ranges\": \"$ranges\"}" --json > $D/speed-$n-$ranges.json 2> $D/speed-$n-$ranges.stderr
  echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) speed-$n rc=$?" >> $D/runlog.txt
done
python3 - "$D" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/speed-*.json")):
    o = json.load(open(f))["codecs"]["oscar"]
    print(f.rsplit("/", 1)[1], {k: o[k] for k in ("ratio", "encode_GBps", "decode_GBps", "encode_GBps_wall_threads",
                                                 "decode_GBps_wall_threads", "ppl_rel")})
PY
