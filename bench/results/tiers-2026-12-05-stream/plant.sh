#!/bin/bash
# Each planted bug, applied to the working tree alone, must fail the tests named beside it; the
# tree is restored after each. Run on the uncommitted change before 5ea04f4.
set -u
cd /work/main
D=bench/results/tiers-2026-12-05-stream
B=backends/file/src/lifeboatcache_backend_file/backend.py
C=codecs/lossless/src/lifeboatcache_codec_lossless/_planes.c
T=lifeboatcache_core/src/lifeboatcache_core/tier.py
R=lifeboatcache_core/src/lifeboatcache_core/builtin/dram.py
plant() {  # name, file, python replace old, new, tests
  local name=$1 file=$2 old=$3 new=$4 tests=$5
  cp $file /tmp/plant.bak
  python3 -c "import sys; p=sys.argv[1]; s=open(p).read(); assert sys.argv[2] in s, 'pattern'; open(p,'w').write(s.replace(sys.argv[2], sys.argv[3], 1))" $file "$old" "$new"
  [ $file = $C ] && (cd codecs/lossless && ../../.venv/bin/python setup.py -q build_ext --inplace >/dev/null 2>&1)
  out=$(.venv/bin/python -m pytest -q -p no:randomly $tests 2>&1 | tail -1)
  echo "$name: $out" >> $D/planted-regressions.txt
  cp /tmp/plant.bak $file
  [ $file = $C ] && (cd codecs/lossless && ../../.venv/bin/python setup.py -q build_ext --inplace >/dev/null 2>&1)
}
: > $D/planted-regressions.txt
plant "dram keeps the lent payload view" $R 'data = b"".join(payload)' 'data = payload[0] if len(payload) == 1 else b"".join(payload)' \
  "tests/codecs/test_tiers.py -k one_after_another"
plant "stream writes no head at the end" $B '_pwritev_all(fd, [view[:DIRECT_ALIGN], out[:head_pages]] if head_pages else [view[:DIRECT_ALIGN]],' \
  '_pwritev_all(fd, [view[:DIRECT_ALIGN], bytes(head_pages)] if head_pages else [view[:DIRECT_ALIGN]],' \
  "tests/core/test_builtin_contracts.py -k put_stream"
plant "file put_stream codes whole first" $B 'if not self._direct:
            return super().put_stream(key, encoder, finish)' 'if True:
            return super().put_stream(key, encoder, finish)' \
  "tests/core/test_builtin_contracts.py -k writes_coded_pages"
plant "staged tail one byte short" $B 'scratch[head: head + left] = rest[direct:]' 'scratch[head: head + left - 1] = rest[direct:-1]' \
  "tests/core/test_builtin_contracts.py -k page_aligned"
plant "encoder failure taken for an I/O error" $T 'except _EncodeFailed as failed:' 'except ZeroDivisionError as failed:' \
  "tests/codecs/test_tiers.py -k failing_while"
plant "raw run not carried across steps" $C 'raw_run[b]++;' '(void)0;' \
  "tests/codecs/test_lossless.py -k one_call_payload"
plant "settled bytes rewritten at the end" $C 'for (; c < nchunks && pos < stop; c++) {' 'if (c == nchunks - 1) memset(out + table, 0, 1);
    for (; c < nchunks && pos < stop; c++) {' \
  "tests/codecs/test_lossless.py -k one_call_payload"
