#!/bin/bash
# The plants behind planted-regressions.txt (its last entry was planted by hand with sed in tier.py).
# Each run() replaces one snippet of a file, runs the tests named, and restores the file.
# plant NAME FILE PYTHON-REPLACEMENT(old|||new) TESTS...
cd /work/main
run() {
  local name=$1 file=$2 old=$3 new=$4; shift 4
  cp "$file" /tmp/plant.bak
  python3 - "$file" "$old" "$new" <<'PY'
import sys
p, old, new = sys.argv[1:4]
s = open(p).read()
assert old in s, old
open(p, "w").write(s.replace(old, new, 1))
PY
  echo "=== $name"
  timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider "$@" 2>&1 | grep -E "^(FAILED|ERROR)|passed|failed" | cut -c1-220
  cp /tmp/plant.bak "$file"
}
T=lifeboatcache_core/src/lifeboatcache_core/tier.py
F=backends/file/src/lifeboatcache_backend_file/backend.py
L=codecs/lossless/src/lifeboatcache_codec_lossless/codec.py
run "feed decodes nothing (all at finish)" $L "    def feed(self, prefix: memoryview) -> None:
        self._advance(prefix)" "    def feed(self, prefix: memoryview) -> None:
        pass" tests/codecs/test_lossless.py -k "stream or pieces"
run "a stale size is trusted" $F "                except _WrongSize:
                    pass" "                except _WrongSize:
                    raise CorruptBlockError('size')" tests/core/test_builtin_contracts.py -k "read_payload"
run "a known size still fstats" $F "            if stored_size is not None:
                try:" "            if stored_size is not None and False:
                try:" tests/core/test_builtin_contracts.py -k "read_payload"
run "o_direct read whole (no pieces)" $F "        step = STREAM_RANGE if self._direct else limit" "        step = limit" tests/core/test_builtin_contracts.py -k "read_payload"
run "end before the trailer is checked" $F "            with view[start:end] as payload:
                check_trailer(view[end:end + TRAILER_LEN], n, (payload,))
                sink.end(payload)" "            with view[start:end] as payload:
                sink.end(payload)
                check_trailer(view[end:end + TRAILER_LEN], n, (payload,))" tests/core/test_builtin_contracts.py -k "before_the_payload"
run "no longer-file check" $F "            if have > size:
                if hinted:" "            if False:
                if hinted:" tests/core/test_builtin_contracts.py -k "before_the_payload or read_payload"
run "keyed tiers stream too" $T "        if self._signer is None:  # a keyed tier decodes nothing before its MAC is checked" "        if True:  # planted" tests/reliability/test_keyed_integrity.py -k "decodes_nothing"
