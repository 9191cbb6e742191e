"""All 150 traces at once, EpiCache under the option sets given, LRU and Bélády beside each size (issue 17),
replayed with or without vLLM's request ends and the tier's ``keep_prefixes`` guard.

The same replay as ``lifeboatcache bench traces --folds 1 [--request-ends] [--keep-prefixes]``:

    .venv/bin/python bench/results/traces-2026-12-07-keep-prefixes/all_at_once.py 0.02,0.05,0.1 ends guard \\
        '{}' '{"stale_first": false}' > all-at-once-ends-guard.log
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.replay import ReplaySetup
from lifeboatcache.sim.sweep import run_option_sets
from lifeboatcache.sim.workload import load_workload

fractions = tuple(float(x) for x in sys.argv[1].split(","))
setup = ReplaySetup(request_ends=sys.argv[2] == "ends", keep_prefixes=sys.argv[3] == "guard")
option_sets = [json.loads(a) for a in sys.argv[4:]]
started = time.time()
print(json.dumps({"setup": sys.argv[2:4], "load_avg_start": os.getloadavg()}), flush=True)
run_option_sets(load_workload(DEFAULT_TRACES, seed=0), "epicache", option_sets, fractions, setup=setup,
                on_row=lambda row: print(json.dumps(row), flush=True))
print(json.dumps({"wall_s": round(time.time() - started, 1), "load_avg_end": os.getloadavg()}), flush=True)
