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
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, run_option_sets
from lifeboatcache.sim.workload import load_workload

CONFIGS = [json.loads(a) for a in sys.argv[1:]] or [{}]

started = time.time()
rows = run_option_sets(load_workload(DEFAULT_TRACES, seed=0), "epicache", CONFIGS, (0.02, 0.05, 0.1),
                       on_row=lambda row: print(json.dumps(row), file=sys.stderr))
json.dump({"traces": str(DEFAULT_TRACES), "gpu_blocks": DEFAULT_GPU_BLOCKS, "seed": 0, "rows": rows,
           "wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()}, sys.stdout, indent=1)
