"""EpiCache with patience learnt online (``patience_step``) on all 150 conversations replayed at once (the regime of
issue 17's own table, where a fixed patience of 2.0 beat the fold-chosen 1.5), beside LRU, Bélády and the fixed
patiences. Same workload, GPU cache and seed as ``lifeboatcache bench traces --folds 1``.

    .venv/bin/python bench/results/traces-2026-12-04-adaptive/all_at_once.py 'OPTIONS_JSON' ... > OUT.json

Each argument is one epicache config over the installed defaults, e.g. '{"patience_step": 0.01}'.
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.belady import simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import simulate
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import load_workload

CONFIGS = [json.loads(a) for a in sys.argv[1:]] or [{}]
FRACTIONS = (0.02, 0.05, 0.1)

started = time.time()
workload = load_workload(DEFAULT_TRACES, seed=0)
gpu_hits = gpu_prefix_hits(workload, DEFAULT_GPU_BLOCKS)
rows = []
for fraction in FRACTIONS:
    capacity = workload.capacity_blocks(fraction)
    runs = [("lru", None, simulate(workload, gpu_hits, make_policy("lru"), capacity, fraction)),
            ("belady", None, simulate_belady(workload, gpu_hits, capacity, fraction))]
    for options in CONFIGS:
        policy = make_policy("epicache", 0, options)
        runs.append(("epicache", options, simulate(workload, gpu_hits, policy, capacity, fraction)))
    lru, bel = runs[0][2].hit_frac, runs[1][2].hit_frac
    for name, options, r in runs:
        rows.append({"capacity_frac": fraction, "policy": name, "options": options, "hit_frac": round(r.hit_frac, 4),
                     "gap_closed": round((r.hit_frac - lru) / (bel - lru), 3) if bel > lru else None,
                     "cpu_seconds": round(r.seconds, 1)})
        print(json.dumps(rows[-1]), file=sys.stderr)
json.dump({"traces": str(DEFAULT_TRACES), "gpu_blocks": DEFAULT_GPU_BLOCKS, "seed": 0, "rows": rows,
           "wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()}, sys.stdout, indent=1)
