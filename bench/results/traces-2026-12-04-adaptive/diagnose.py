"""Where ``patience_step`` takes patience: the first 30 conversations at 2 %, fixed against learnt (step 0.01),
counting the evicted blocks that came back by how they went (cold or warm episode). Needs commit d4a83ae's policy.

    .venv/bin/python bench/results/traces-2026-12-04-adaptive/diagnose.py
"""

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import simulate
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import load_workload

wl = load_workload(DEFAULT_TRACES, seed=0, limit=30)
g = gpu_prefix_hits(wl, DEFAULT_GPU_BLOCKS)
cap = wl.capacity_blocks(0.02)
for opts in ({}, {"patience_step": 0.01}):
    p = make_policy("epicache", 0, opts)
    cold = {True: 0, False: 0}
    orig = p._learn_patience

    def learn(c: bool, orig=orig, cold=cold) -> None:
        cold[c] += 1
        orig(c)
    p._learn_patience = learn
    r = simulate(wl, g, p, cap, 0.02)
    print(opts, round(r.hit_frac, 4), "final patience", round(p._patience, 3), "returns of cold/warm-evicted", cold)
