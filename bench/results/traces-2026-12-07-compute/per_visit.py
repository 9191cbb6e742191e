"""A prototype for the next step (not in the tree): one return-gap sample per request end, not per block.

r34b showed the guard's limit learnt from per-block samples of the first fast returns. Here a guard
(a ``PrefixGuard`` subclass, the replay's calls unchanged) collects the end-to-end gaps of the blocks
of one request end (calls with the same time) and samples their median once, and the 32 samples it
waits for are then 32 visits. Scored like gap_factor_folds.py (same folds and sizes, rows with the
candidate names ``visit xF``), so ``gap_factor_folds.py --pick`` can set it beside the others.

    .venv/bin/python bench/results/traces-2026-12-07-compute/per_visit.py 0.02,0.05,0.1 1.5,2,4 > per-visit.log
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads
from lifeboatcache.sim.replay import ReplaySetup, replay_policy, split_tokens
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.traces import load_traces
from lifeboatcache_core import prefixes


class PerVisitGuard(prefixes.PrefixGuard):
    """End-to-end gaps, one sample (the median) per request end."""

    def __init__(self, idle_s=None):
        super().__init__(idle_s)
        self._visit_at = None
        self._visit_gaps = []

    def used(self, key, now, *, request_done=False):
        if not request_done:  # as the tree's guard: restarts the idle time, samples only before any end
            super().used(key, now)
            return
        if now != self._visit_at:
            self._close_visit()
            self._visit_at = now
        self._ends_reported = True
        if key not in self._used_at:
            return
        self._used_at[key] = now
        last = self._ended_at.get(key)
        self._ended_at[key] = now
        if key in self._fresh:
            self._fresh.discard(key)
        elif last is not None:
            self._visit_gaps.append(now - last)

    def _close_visit(self):
        if self._visit_gaps:
            self._gaps.append(statistics.median(self._visit_gaps))
            self._visit_gaps = []
            self._new_gaps += 1
            if self._new_gaps >= prefixes.MIN_SAMPLES // 2 and len(self._gaps) >= prefixes.MIN_SAMPLES:
                self._new_gaps = 0
                ordered = sorted(self._gaps)
                self._learnt_idle_s = max(prefixes.MIN_IDLE_S,
                                          prefixes.GAP_FACTOR * ordered[int(0.9 * (len(ordered) - 1))])

    def protects(self, victim, depth, now):
        self._close_visit()
        return super().protects(victim, depth, now)


def main() -> None:
    fractions = [float(x) for x in sys.argv[1].split(",")]
    factors = [float(x) for x in sys.argv[2].split(",")]
    folds = fold_workloads(load_traces(DEFAULT_TRACES), 5, seed=0, gpu_blocks=DEFAULT_GPU_BLOCKS)
    setup = ReplaySetup(request_ends=True, keep_prefixes=True)
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions, "factors": factors}), flush=True)
    replay_module.PrefixGuard = PerVisitGuard
    for fold in folds:
        gpu_hits = gpu_prefix_hits(fold.workload, fold.gpu_blocks)
        for fraction in fractions:
            capacity = fold.workload.capacity_blocks(fraction)
            for factor in factors:
                prefixes.GAP_FACTOR = factor
                tier_hits = replay_policy(fold.workload, gpu_hits, make_policy("lru"), capacity, setup)
                engine, tiers, recomputed = split_tokens(fold.workload, gpu_hits, tier_hits)
                print(json.dumps({"fold": fold.index, "frac": fraction, "candidate": f"visit x{factor:g}",
                                  "hit_frac": round((engine + tiers) / (engine + tiers + recomputed), 4)}),
                      flush=True)
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
