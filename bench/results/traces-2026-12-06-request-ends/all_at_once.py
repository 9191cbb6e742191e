"""EpiCache's ``request_done`` on all 150 conversations replayed at once, with vLLM's request ends (issue 17).

The folds (``bench traces --folds 5 --request-ends``) choose on replays of 30 conversations at a time; this
replays all 150 together (the heavier regime of issue 17's own table; in-sample), LRU and Bélády beside each size,
LRU under the same request ends. Same workload, GPU cache and seed as ``lifeboatcache bench traces --folds 1``.

    .venv/bin/python bench/results/traces-2026-12-06-request-ends/all_at_once.py > all-at-once.json
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.replay import ReplaySetup
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, run_option_sets
from lifeboatcache.sim.workload import load_workload

OPTIONS = [{"request_done": "idle"}, {"request_done": "visit"}]

started = time.time()
rows = run_option_sets(load_workload(DEFAULT_TRACES, seed=0), "epicache", OPTIONS, (0.02, 0.05, 0.1),
                       setup=ReplaySetup(request_ends=True),
                       on_row=lambda row: print(json.dumps(row), file=sys.stderr, flush=True))
json.dump({"traces": str(DEFAULT_TRACES), "request_ends": True, "gpu_blocks": DEFAULT_GPU_BLOCKS, "seed": 0,
           "rows": rows, "wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()},
          sys.stdout, indent=1)
