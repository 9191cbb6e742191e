"""The guard's GAP_FACTOR once return gaps run from request end to request end, chosen on held-out folds.

With gaps sampled end to end (return_gaps.py) a session's return gap includes its request's own
time, so the factor chosen for gaps sampled use to use (4) need not be the right one. Every
candidate (a sampling, ``ends`` or ``uses``, and a factor) is replayed on each of the 5 folds at the
sizes given, one JSON row each; then, for each fold, the candidate with the most prompt tokens from
cache pooled over the other 4 folds and the sizes is picked and scored on the held-out fold against
the guard as it was (``uses x4``: every use a sample, factor 4), over every candidate in the logs
given (``held_out`` below; this file's own run is one of them). Replays as ``bench traces
--request-ends --keep-prefixes`` (LRU).

    .venv/bin/python bench/results/traces-2026-12-07-compute/gap_factor_folds.py 0.02,0.05,0.1 1.5,2,3,4 \\
        > gap-factor-folds.log
    .venv/bin/python bench/results/traces-2026-12-07-compute/gap_factor_folds.py 0.02,0.05,0.1 1.5,2,3 uses \\
        > gap-factor-folds-uses.log
    .venv/bin/python bench/results/traces-2026-12-07-compute/gap_factor_folds.py --pick gap-factor-folds*.log
"""

from __future__ import annotations

import json
import os
import sys

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim import replay as replay_module
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads
from lifeboatcache.sim.replay import ReplaySetup, replay_policy, split_tokens
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.traces import load_traces
from lifeboatcache_core import prefixes

sys.path.insert(0, os.path.dirname(__file__))
from common import EveryUseGuard


def held_out(logs: list[str]) -> None:
    """Per fold, the candidate best on the other folds (pooled over sizes), scored on it against ``uses x4``."""
    hits: dict[tuple[str, int, float], float] = {}
    for path in logs:
        for line in open(path):
            row = json.loads(line)
            if "candidate" in row:
                hits[row["candidate"], row["fold"], row["frac"]] = row["hit_frac"]
    folds = sorted({f for _, f, _ in hits})
    sizes = sorted({s for _, _, s in hits})
    names = sorted({n for n, _, _ in hits})
    gains = []
    for fold in folds:
        pick = max(names, key=lambda n: sum(hits[n, o, s] for o in folds if o != fold for s in sizes))
        picked = [hits[pick, fold, s] for s in sizes]
        base = [hits["uses x4", fold, s] for s in sizes]
        gains.append(sum(picked) / sum(base) - 1)
        print(json.dumps({"held_out": fold, "picked": pick, "hit_frac_by_size": picked, "uses_x4": base,
                          "gain": round(gains[-1], 4)}))
    print(json.dumps({"mean_gain": round(sum(gains) / len(gains), 4),
                      "pooled_by_candidate": {n: round(sum(hits[n, f, s] for f in folds for s in sizes)
                                                       / (len(folds) * len(sizes)), 4) for n in names}}))


def main() -> None:
    if sys.argv[1] == "--pick":
        held_out(sys.argv[2:])
        return
    fractions = [float(x) for x in sys.argv[1].split(",")]
    factors = [float(x) for x in sys.argv[2].split(",")]
    samplings = sys.argv[3].split(",") if len(sys.argv) > 3 else ["uses x4", "ends"]
    folds = fold_workloads(load_traces(DEFAULT_TRACES), 5, seed=0, gpu_blocks=DEFAULT_GPU_BLOCKS)
    setup = ReplaySetup(request_ends=True, keep_prefixes=True)
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions, "factors": factors}), flush=True)
    candidates = [("uses x4", EveryUseGuard, 4.0)] if "uses x4" in samplings else []
    for sampling in ("uses", "ends"):
        if sampling in samplings:
            guard = EveryUseGuard if sampling == "uses" else prefixes.PrefixGuard
            candidates += [(f"{sampling} x{f:g}", guard, f) for f in factors]
    for fold in folds:
        gpu_hits = gpu_prefix_hits(fold.workload, fold.gpu_blocks)
        for fraction in fractions:
            capacity = fold.workload.capacity_blocks(fraction)
            for name, guard, factor in candidates:
                replay_module.PrefixGuard = guard
                prefixes.GAP_FACTOR = factor
                tier_hits = replay_policy(fold.workload, gpu_hits, make_policy("lru"), capacity, setup)
                engine, tiers, recomputed = split_tokens(fold.workload, gpu_hits, tier_hits)
                print(json.dumps({"fold": fold.index, "frac": fraction, "candidate": name,
                                  "hit_frac": round((engine + tiers) / (engine + tiers + recomputed), 4)}),
                      flush=True)
    replay_module.PrefixGuard, prefixes.GAP_FACTOR = prefixes.PrefixGuard, 4.0
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)

if __name__ == "__main__":
    main()
