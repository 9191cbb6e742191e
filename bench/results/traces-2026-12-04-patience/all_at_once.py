"""EpiCache's patience on all 150 conversations replayed at once (the regime of issue 17's own table), beside LRU
and Bélády: the folds choose on per-fold replays (30 conversations each); this checks the choice does not lose in
the heavier regime. Same workload, GPU cache and seed as ``lifeboatcache bench traces --folds 1``.

    .venv/bin/python bench/results/traces-2026-12-04-patience/all_at_once.py [WARM_ORDER [PATIENCE ...]] > OUT.json

(all-at-once-recent.json: no arguments, i.e. warm_order recent, patience 1.0 1.25 1.5 2.0.)
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

WARM_ORDER = sys.argv[1] if len(sys.argv) > 1 else "recent"
PATIENCE = tuple(float(p) for p in sys.argv[2:]) or (1.0, 1.25, 1.5, 2.0)
FRACTIONS = (0.02, 0.05, 0.1)

started = time.time()
workload = load_workload(DEFAULT_TRACES, seed=0)
gpu_hits = gpu_prefix_hits(workload, DEFAULT_GPU_BLOCKS)
rows = []
for fraction in FRACTIONS:
    capacity = workload.capacity_blocks(fraction)
    runs = [("lru", None, simulate(workload, gpu_hits, make_policy("lru"), capacity, fraction)),
            ("belady", None, simulate_belady(workload, gpu_hits, capacity, fraction))]
    for patience in PATIENCE:
        options = {"predictor": "rhythm", "bypass": "holes", "patience": patience, "gap_smoothing": 0.05,
                   "warm_order": WARM_ORDER}
        runs.append(("epicache", patience, simulate(workload, gpu_hits, make_policy("epicache", 0, options),
                                                    capacity, fraction)))
    lru, bel = runs[0][2].hit_frac, runs[1][2].hit_frac
    for name, patience, r in runs:
        rows.append({"capacity_frac": fraction, "policy": name, "patience": patience, "hit_frac": round(r.hit_frac, 4),
                     "gap_closed": round((r.hit_frac - lru) / (bel - lru), 3) if bel > lru else None,
                     "cpu_seconds": round(r.seconds, 1)})
        print(json.dumps(rows[-1]), file=sys.stderr)
json.dump({"traces": str(DEFAULT_TRACES), "warm_order": WARM_ORDER, "gpu_blocks": DEFAULT_GPU_BLOCKS, "seed": 0,
           "rows": rows, "wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()},
          sys.stdout, indent=1)
