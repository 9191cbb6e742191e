"""Count, in one replay of all 150 traces, how many EpiCache inserts took the bisect path (a depth shallower
than the episode's deepest that it did not hold) instead of the O(1) append."""
import atexit
import runpy
import sys

import lifeboatcache_policy_epicache.policy as mod

counts = {"stored": 0, "insort": 0}
real_insort = mod.insort


def counting_insort(a, x):
    counts["insort"] += 1
    real_insort(a, x)


mod.insort = counting_insort
real_insert = mod.EpiCachePolicy.insert


def counting_insert(self, key, size, hint=None):
    before = len(self._blocks)
    real_insert(self, key, size, hint)
    counts["stored"] += len(self._blocks) - before


mod.EpiCachePolicy.insert = counting_insert
atexit.register(lambda: print("COUNTS", counts, f"{counts['insort'] / max(counts['stored'], 1):.4%}", file=sys.stderr))
sys.argv = ["lifeboatcache", *sys.argv[1:]]
runpy.run_module("lifeboatcache", run_name="__main__")
