"""EpiCache's patience on all 150 conversations replayed at once (the regime of issue 17's own table), beside LRU
and Bélády: the folds choose on per-fold replays (30 conversations each); this checks the choice does not lose in
the heavier regime. Same workload, GPU cache and seed as ``lifeboatcache bench traces --folds 1``.

    .venv/bin/python bench/results/traces-2026-12-04-patience/all_at_once.py [WARM_ORDER [PATIENCE ...]] > OUT.json

(all-at-once-recent.json: no arguments, i.e. warm_order recent, patience 1.0 1.25 1.5 2.0.) Since the eighteenth
round the replay loop is ``lifeboatcache.sim.sweep.run_option_sets`` (the same steps), whose rows name each run's
``options``; the two JSONs here were written before, with a ``patience`` field instead.
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, run_option_sets
from lifeboatcache.sim.workload import load_workload

WARM_ORDER = sys.argv[1] if len(sys.argv) > 1 else "recent"
PATIENCE = tuple(float(p) for p in sys.argv[2:]) or (1.0, 1.25, 1.5, 2.0)
OPTIONS = [{"predictor": "rhythm", "bypass": "holes", "patience": patience, "gap_smoothing": 0.05,
            "warm_order": WARM_ORDER} for patience in PATIENCE]

started = time.time()
rows = run_option_sets(load_workload(DEFAULT_TRACES, seed=0), "epicache", OPTIONS, (0.02, 0.05, 0.1),
                       on_row=lambda row: print(json.dumps(row), file=sys.stderr))
json.dump({"traces": str(DEFAULT_TRACES), "warm_order": WARM_ORDER, "gpu_blocks": DEFAULT_GPU_BLOCKS, "seed": 0,
           "rows": rows, "wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()},
          sys.stdout, indent=1)
