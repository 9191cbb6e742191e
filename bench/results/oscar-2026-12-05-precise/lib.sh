# Shared by this folder's rounds: source it from the repository root with D set to the round's folder.
#   rank TEXT...              bench codecs --rank-oscar-layers over the TEXTs -> $D/rank.json; stops the round if it
#                             fails; OPTS = the options it chose
#   opts_from RANK_JSON       OPTS = the options a ranking chose
#   judge NAME TEXT VARIANT   bench codecs --codecs oscar on TEXT, VARIANT plain ({}) or precise ($OPTS)
#                             -> $D/NAME-VARIANT.json
# Every step is logged in $D/runlog.txt with the time, load and commit. Perplexities are deterministic.
mkdir -p "$D"
PYD=$(.venv/bin/python -c "import argparse, os; print(os.path.dirname(argparse.__file__))")
L=/usr/share/common-licenses

log() { echo "$1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $2 commit $(git rev-parse --short HEAD)+wt" >> "$D/runlog.txt"; }

opts_from() { OPTS=$(python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['codec_options']))" "$1"); }

rank() {
  local args=() text rc
  for text in "$@"; do args+=(--calibrate-on "$text"); done
  log start rank
  .venv/bin/python -m lifeboatcache bench codecs --rank-oscar-layers "${args[@]}" > "$D/rank.json" 2> "$D/rank.stderr"
  rc=$?
  log end "rank rc=$rc"
  [ $rc = 0 ] || exit 1
  opts_from "$D/rank.json"
}

judge() {
  local name=$1 text=$2 variant=$3 options='{}'
  [ "$variant" = plain ] || options=$OPTS
  log start "$name $variant $options"
  .venv/bin/python -m lifeboatcache bench codecs --codecs oscar --reference '' --repeats 1 --text "$text" \
    --oscar-options "$options" --json > "$D/$name-$variant.json" 2> "$D/$name-$variant.stderr"
  log end "$name $variant rc=$?"
}
