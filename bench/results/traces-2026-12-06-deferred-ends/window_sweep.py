"""All 150 traces at once, EpiCache under the option sets given, LRU and Bélády beside each size (issue 17).

The same replay as ``lifeboatcache bench traces --folds 1``; ``ends`` replays vLLM's request ends.

    .venv/bin/python bench/results/traces-2026-12-06-deferred-ends/window_sweep.py 0.02,0.05 ends \\
        '{"visit_window": 0.25}' '{"visit_window": 4.0}' > window-sweep.log
"""

from __future__ import annotations

import json
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.replay import ReplaySetup
from lifeboatcache.sim.sweep import run_option_sets
from lifeboatcache.sim.workload import load_workload

fractions = tuple(float(x) for x in sys.argv[1].split(","))
request_ends = sys.argv[2] == "ends"
option_sets = [json.loads(a) for a in sys.argv[3:]]
started = time.time()
run_option_sets(load_workload(DEFAULT_TRACES, seed=0), "epicache", option_sets, fractions,
                setup=ReplaySetup(request_ends=request_ends), on_row=lambda row: print(json.dumps(row), flush=True))
print("wall", round(time.time() - started, 1))
