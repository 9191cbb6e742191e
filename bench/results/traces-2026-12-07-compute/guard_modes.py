"""What a full tier keeps, weighed by the prefill it saves (issue 15's bounded cell, 2026-12-07 evening).

The grid's bounded 8-agent cell (grid-2026-12-07-r33) served as many prompt tokens from cache with
lifeboatcache as with vLLM's fs tier (49.4 against 50.5 %), yet was slower: the longest session kept
its whole 4,448-token head on vLLM's disk (which keeps what it wrote first), while our tier's
``keep_prefixes`` guard let shallower blocks of other sessions evict that head's deeper half. A token
hit saves the prefill of that token, which costs more the deeper it sits (attention reads every token
before it): with D the position where a token's attention FLOPs equal the rest of its forward pass,
recomputing position p costs 1 + p/D (SmolLM2-135M: D ~ 3,000 in FLOPs, nearer 1,000 in time on vLLM's CPU
engine; an 8B Llama ~ 27,000; D = inf: tokens).

Replays the 150 traces in 5 folds (each fold's sessions alone on a tier, the engine's GPU cache
scaled to the fold) and all 150 at once, as ``bench traces --request-ends --keep-prefixes`` does
(``sim.replay.replay_policy``, LRU), with four ways a full tier chooses:

- ``lru``: plain LRU, no guard;
- ``guard``: the tier's default (``keep_prefixes``): a victim no deeper than the new block and used
  within the learnt idle limit declines the new block;
- ``active``: every block used within the idle limit declines the new block, whatever its depth
  (first come, first kept, among live sessions; idle ones make room);
- ``noevict``: nothing is ever evicted (vLLM's fs tier).

Prints one JSON row per (set, size, mode): hit fraction and prefill saved at D = 1000, 3000, 27000, inf.
The guard here learns its idle limit from every use (request ends not flagged), as the tier did when
guard-modes.log was made (686ea1b's core, ``GAP_FACTOR`` 4); return_gaps.py compares that with
sampling end to end.

    .venv/bin/python bench/results/traces-2026-12-07-compute/guard_modes.py 0.02,0.05,0.1,0.33 > guard-modes.log
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from lifeboatcache_core.builtin.lru import LRUPolicy

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.replay import ReplaySetup, replay_policy
from lifeboatcache.sim.sweep import make_policy
from lifeboatcache.traces import load_traces
from lifeboatcache_core import prefixes

sys.path.insert(0, os.path.dirname(__file__))
from common import EveryUseGuard, row, trace_sets

MODES = ("lru", "guard", "active", "noevict")


class ActiveGuard(EveryUseGuard):
    """``active``: a victim used within the idle limit is kept whatever its depth."""

    def protects(self, victim, depth, now):
        return super().protects(victim, math.inf, now)


class NoEviction(LRUPolicy):
    """``noevict``: offers no victim, so a full tier stores nothing more (vLLM's fs tier)."""

    def victim(self, incoming=None):
        return None


def replay(workload, gpu_hits: list[int], capacity: int, mode: str) -> list[int]:
    """``sim.replay.replay_policy`` with request ends, LRU, and the guard in ``mode``."""
    replay_module.PrefixGuard = ActiveGuard if mode == "active" else EveryUseGuard
    setup = ReplaySetup(request_ends=True, keep_prefixes=mode in ("guard", "active"))
    policy = NoEviction() if mode == "noevict" else make_policy("lru")
    try:
        return replay_policy(workload, gpu_hits, policy, capacity, setup)
    finally:
        replay_module.PrefixGuard = prefixes.PrefixGuard


def main() -> None:
    fractions = [float(x) for x in sys.argv[1].split(",")]
    prefixes.GAP_FACTOR = 4.0  # the guard's factor when guard-modes.log was made
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions}), flush=True)
    for name, workload, gpu_hits in trace_sets(load_traces(DEFAULT_TRACES)):
        for fraction in fractions:
            capacity = workload.capacity_blocks(fraction)
            for mode in MODES:
                started = time.process_time()
                tier_hits = replay(workload, gpu_hits, capacity, mode)
                print(json.dumps({"set": name, "frac": fraction, "mode": mode,
                                  **row(workload, gpu_hits, tier_hits),
                                  "cpu_s": round(time.process_time() - started, 1)}), flush=True)
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
