"""Count, in one replay of all 150 traces, how many EpiCache inserts took the bisect path (a depth shallower
than the episode's deepest that it did not hold) instead of the O(1) append. Usage (repository root):
.venv/bin/python bench/results/epicache-buckets-2026-12-07/count_insort.py bench traces ARGS..."""
import atexit
import runpy
import sys

import lifeboatcache_policy_epicache.policy as mod

counts = {"stored": 0, "bisect": 0}
real_bisect = mod.bisect_left


def counting_bisect(a, x):
    counts["bisect"] += 1
    return real_bisect(a, x)


mod.bisect_left = counting_bisect
real_insert = mod.EpiCachePolicy.insert


def counting_insert(self, key, size, hint=None):
    before = len(self._blocks)
    real_insert(self, key, size, hint)
    counts["stored"] += len(self._blocks) - before


mod.EpiCachePolicy.insert = counting_insert
atexit.register(lambda: print("COUNTS", counts, f"{counts['bisect'] / max(counts['stored'], 1):.4%}", file=sys.stderr))
sys.argv = ["lifeboatcache", *sys.argv[1:]]
runpy.run_module("lifeboatcache", run_name="__main__")
