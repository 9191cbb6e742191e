"""Should a full tier give a live session's tail to a deeper newcomer (concentrate) rather than the reverse?

The grid's bounded 8-agent cell (grid-2026-12-07-r35) serves as many prompt tokens from cache as vllm-fs and is
slower because our misses sit deeper (a token at position p costs 1 + p/D to recompute). The tier's guard
(``keep_prefixes``) lets a newcomer at depth d evict a live victim only if the victim is deeper, which levels every
session's head to a common depth; vLLM's fs tier keeps whole heads it wrote first. Replays the 5 folds of the 150
traces (request ends, the chain marked when a request comes in, LRU, ``GAP_FACTOR`` 1.5) with:

- ``guard``: the tier's default: a live victim no deeper than the newcomer declines it;
- ``active``: every live victim declines the newcomer (first come, first kept among live sessions);
- ``deeper``: a live victim at least as deep as the newcomer declines it: a newcomer evicts only shallower (shorter
  sessions') tails, so capacity flows to the longest live heads.

One JSON row per (fold, size, mode): prompt tokens from cache and prefill saved at D = 1000, 3000, 27000.

    .venv/bin/python bench/results/traces-2026-12-07-asked/deeper_wins.py 0.02,0.05,0.1 > deeper-wins.log
    .venv/bin/python bench/results/traces-2026-12-07-asked/deeper_wins.py 0.02,0.05,0.1 all150 guard,active \
        > all-at-once.log  # the 150 at once (not used to choose)
"""

from __future__ import annotations

import json
import math
import os
import sys

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.replay import ReplaySetup, replay_policy
from lifeboatcache.sim.sweep import make_policy
from lifeboatcache.traces import load_traces
from lifeboatcache_core import prefixes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "traces-2026-12-07-compute"))
from common import row, trace_sets


class ActiveGuard(prefixes.PrefixGuard):
    def protects(self, victim, depth, now):
        return super().protects(victim, math.inf, now)


class DeeperGuard(prefixes.PrefixGuard):
    def protects(self, victim, depth, now):
        victim_depth = self._depth.get(victim)
        if victim_depth is None or victim_depth < depth:
            return False
        return super().protects(victim, math.inf, now)


GUARDS = {"guard": prefixes.PrefixGuard, "active": ActiveGuard, "deeper": DeeperGuard}


def main() -> None:
    fractions = [float(x) for x in sys.argv[1].split(",")]
    sets = sys.argv[2] if len(sys.argv) > 2 else "fold"
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else list(GUARDS)
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions}), flush=True)
    setup = ReplaySetup(request_ends=True, keep_prefixes=True)
    for name, workload, gpu_hits in trace_sets(load_traces(DEFAULT_TRACES)):
        if not name.startswith(sets):
            continue
        for fraction in fractions:
            capacity = workload.capacity_blocks(fraction)
            for mode in modes:
                replay_module.PrefixGuard = GUARDS[mode]
                try:
                    tier_hits = replay_policy(workload, gpu_hits, make_policy("lru"), capacity, setup)
                finally:
                    replay_module.PrefixGuard = prefixes.PrefixGuard
                print(json.dumps({"set": name, "frac": fraction, "mode": mode, **row(workload, gpu_hits, tier_hits)}),
                      flush=True)
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
