# Shared by the interleaved old/new A/B scripts under bench/results (source it after cd to the repo root).
# old = a commit checked out in a worktree and imported first through PYTHONPATH; new = the working tree.
#   ab_setup BASE WORKTREE LOGFILE PKG_SRC...   check out BASE at WORKTREE; OLDPATH = its PKG_SRC dirs
#   ab_build_ext PKG_DIR                        build the old side's C extension of PKG_DIR (e.g. codecs/lossless)
#   ab_sides I                                  the two sides of pair I: "new old", then "old new", ...
#   ab_use SIDE                                 import that side (sets or clears PYTHONPATH)
#   ab_log MESSAGE                              a line with the time and load average, also into LOGFILE
#   ab_done                                     remove the worktree
AB_PY=.venv/bin/python

ab_setup() {
  AB_OLD=$2
  AB_LOG=$3
  local base=$1
  shift 3
  rm -rf "$AB_OLD" && git worktree prune && git worktree add -f --detach "$AB_OLD" "$base" >/dev/null
  OLDPATH=$(printf "$AB_OLD/%s:" "$@")
  OLDPATH=${OLDPATH%:}
  ab_log "start: new = $(git rev-parse --short HEAD)+working tree, old = $(git -C "$AB_OLD" rev-parse --short HEAD)"
}

ab_build_ext() { (cd "$AB_OLD/$1" && "$OLDPWD/$AB_PY" setup.py -q build_ext --inplace >/dev/null 2>&1); }

ab_sides() { if [ $(($1 % 2)) -eq 0 ]; then echo "old new"; else echo "new old"; fi; }

ab_use() { if [ "$1" = old ]; then export PYTHONPATH="$OLDPATH"; else unset PYTHONPATH; fi; }

ab_log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$AB_LOG"; }

ab_tier_file() { $AB_PY -c 'import lifeboatcache_core.tier as t; print(t.__file__)'; }

ab_done() { ab_log "end"; unset PYTHONPATH; git worktree remove --force "$AB_OLD"; }
