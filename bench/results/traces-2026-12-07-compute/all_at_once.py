"""All 150 traces at once: the guard as it was (``uses x4``) against the default the folds picked (``ends x1.5``).

Not used to choose (gap_factor_folds.py chose on held-out folds); a heavier load as a check. Rows
as return_gaps.py (hit fraction, prefill saved at D = 1000, 3000, 27000).

    .venv/bin/python bench/results/traces-2026-12-07-compute/all_at_once.py 0.02,0.05,0.1 > all-at-once.log
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import ReplaySetup, replay_policy
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import load_workload
from lifeboatcache_core import prefixes

sys.path.insert(0, os.path.dirname(__file__))
from common import EveryUseGuard, row

fractions = [float(x) for x in sys.argv[1].split(",")]
workload = load_workload(DEFAULT_TRACES, seed=0)
gpu_hits = gpu_prefix_hits(workload, DEFAULT_GPU_BLOCKS)
setup = ReplaySetup(request_ends=True, keep_prefixes=True)
print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions}), flush=True)
for fraction in fractions:
    for name, guard, factor in (("uses x4", EveryUseGuard, 4.0), ("ends x1.5", prefixes.PrefixGuard, 1.5)):
        replay_module.PrefixGuard, prefixes.GAP_FACTOR = guard, factor
        started = time.process_time()
        hits = replay_policy(workload, gpu_hits, make_policy("lru"), workload.capacity_blocks(fraction), setup)
        print(json.dumps({"frac": fraction, "candidate": name, **row(workload, gpu_hits, hits),
                          "cpu_s": round(time.process_time() - started, 1)}), flush=True)
print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)
