#!/bin/bash
# r38: r37's three columns (lifeboatcache, lifeboatcache:write-through, vllm-fs) in the same bounded 8-agent cell
# on other traces, to check r37 before a default changes: the traces of ../shared sorted by name, from the 76th on
# (the grid takes the first 8 that fit 8,192 tokens; r37 took the first 8 of the whole set).
# Usage: bash run.sh OUT NAME REPEAT (r37's script, with --traces)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TR=/tmp/traces-b
mkdir -p "$TR"
(cd "$HERE/../../../../shared/traces/kv-cache-tester" && ls trace_*.json.gz | sort | tail -n +76 | while read -r f; do ln -sfn "$PWD/$f" "$TR/$f"; done)
EXTRA_FLAGS="--traces $TR" exec bash "$HERE/../grid-2026-12-07-r37/run.sh" "$@"
