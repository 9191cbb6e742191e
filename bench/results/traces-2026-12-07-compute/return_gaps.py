"""The prefix guard's return gaps from request end to request end, against from use to use, on the traces.

``PrefixGuard`` learns its idle limit from return gaps. Until this change every use of a block was
a sample, so with vLLM's request ends a visit gave two (end -> read, read -> end) and the limit fell
near the think time (grid r34: heads of live sessions evicted as idle while their requests sat in
the engine's queue). Now, once ends are reported, only end -> end gaps are samples.

Replays the 150 traces in 5 folds and all at once, as ``bench traces --request-ends --keep-prefixes``
(``sim.replay.replay_policy``, LRU), with the guard sampling each way: ``ends`` (this tree) and
``uses`` (every use a sample: the guard's ``request_done`` flag dropped). Prints one JSON row per
(set, size, sampling): hit fraction and prefill saved at D = 1000, 3000, 27000 (see guard_modes.py).

    .venv/bin/python bench/results/traces-2026-12-07-compute/return_gaps.py 0.02,0.05,0.1 > return-gaps.log

return-gaps.log was made while ``prefixes.GAP_FACTOR`` was 4 (both samplings at 4x); the folds then
chose 1.5 for end-to-end gaps (gap_factor_folds.py), the tree's default since.
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache_core.prefixes import PrefixGuard

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.replay import ReplaySetup, replay_policy
from lifeboatcache.sim.sweep import make_policy
from lifeboatcache.traces import load_traces

sys.path.insert(0, os.path.dirname(__file__))
from common import EveryUseGuard, row, trace_sets


def main() -> None:
    fractions = [float(x) for x in sys.argv[1].split(",")]
    setup = ReplaySetup(request_ends=True, keep_prefixes=True)
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions}), flush=True)
    for name, workload, gpu_hits in trace_sets(load_traces(DEFAULT_TRACES)):
        for fraction in fractions:
            capacity = workload.capacity_blocks(fraction)
            for sampling, guard in (("ends", PrefixGuard), ("uses", EveryUseGuard)):
                replay_module.PrefixGuard = guard
                started = time.process_time()
                tier_hits = replay_policy(workload, gpu_hits, make_policy("lru"), capacity, setup)
                print(json.dumps({"set": name, "frac": fraction, "sampling": sampling,
                                  **row(workload, gpu_hits, tier_hits),
                                  "cpu_s": round(time.process_time() - started, 1)}), flush=True)
    replay_module.PrefixGuard = PrefixGuard
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
