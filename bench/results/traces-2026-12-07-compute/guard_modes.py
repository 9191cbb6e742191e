"""What a full tier keeps, weighed by the prefill it saves (issue 15's bounded cell, 2026-12-07 evening).

The grid's bounded 8-agent cell (grid-2026-12-07-r33) served as many prompt tokens from cache with
lifeboatcache as with vLLM's fs tier (49.4 against 50.5 %), yet was slower: the longest session kept
its whole 4,448-token head on vLLM's disk (which keeps what it wrote first), while our tier's
``keep_prefixes`` guard let shallower blocks of other sessions evict that head's deeper half. A token
hit saves the prefill of that token, which costs more the deeper it sits (attention reads every token
before it): with D the position where a token's attention FLOPs equal the rest of its forward pass,
recomputing position p costs 1 + p/D (SmolLM2-135M: D ~ 3,000 in FLOPs, nearer 1,000 in time on vLLM's CPU
engine; an 8B Llama ~ 27,000; D = inf: tokens).

Replays the 150 traces in 5 folds (each fold's sessions alone on a tier, the engine's GPU cache
scaled to the fold) and all 150 at once, as ``bench traces --request-ends --keep-prefixes`` does
(``sim.replay.replay_policy``, LRU), with four ways a full tier chooses:

- ``lru``: plain LRU, no guard;
- ``guard``: the tier's default (``keep_prefixes``): a victim no deeper than the new block and used
  within the learnt idle limit declines the new block;
- ``active``: every block used within the idle limit declines the new block, whatever its depth
  (first come, first kept, among live sessions; idle ones make room);
- ``noevict``: nothing is ever evicted (vLLM's fs tier).

Prints one JSON row per (set, size, mode): hit fraction and prefill saved at D = 1000, 3000, 27000, inf.
The guard here learns its idle limit from every use (request ends not flagged), as the tier did when
guard-modes.log was made (686ea1b's core, ``GAP_FACTOR`` 4); return_gaps.py compares that with
sampling end to end.

    .venv/bin/python bench/results/traces-2026-12-07-compute/guard_modes.py 0.02,0.05,0.1,0.33 > guard-modes.log
"""

from __future__ import annotations

import heapq
import json
import math
import os
import sys
import time

from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.prefixes import PrefixGuard

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import Workload, workload_of
from lifeboatcache.traces import load_traces

MODES = ("lru", "guard", "active", "noevict")
DEPTHS = (1000.0, 3000.0, 27000.0, math.inf)


def replay(workload: Workload, gpu_hits: list[int], capacity: int, mode: str) -> list[int]:
    """``sim.replay.replay_policy`` with request ends and the guard in ``mode`` (LRU throughout)."""
    policy = make_policy("lru")
    present: set[int] = set()
    guard = PrefixGuard() if mode in ("guard", "active") else None
    tier_hits: list[int] = []
    ends: list[tuple[float, int]] = []
    ended: list[tuple[float, int]] = []

    def apply_ends() -> None:
        for at, n in ended:
            for block in reversed(workload.blocks[n]):
                if block in present:
                    policy.request_done(block)
                    if guard is not None:
                        guard.used(block, at)
        ended.clear()

    for n, (blocks, g, tag, t) in enumerate(zip(workload.blocks, gpu_hits, workload.streams, workload.times,
                                                strict=True)):
        while ends and ends[0][0] <= t:
            ended.append(heapq.heappop(ends))
        heapq.heappush(ends, (workload.ends[n], n))
        pos = g
        while pos < len(blocks) and blocks[pos] in present:
            policy.touch(blocks[pos])
            if guard is not None:
                guard.used(blocks[pos], t)
            pos += 1
        tier_hits.append(pos - g)
        parent = blocks[pos - 1] if pos else None
        for depth in range(pos, len(blocks)):
            block = blocks[depth]
            if block in present:
                policy.touch(block)
            else:
                if ended:
                    apply_ends()
                while len(present) >= capacity and mode != "noevict":
                    victim = policy.victim(block)
                    if victim is None:
                        break
                    if guard is not None:
                        against = depth if mode == "guard" else math.inf
                        if guard.protects(victim, against, t) and not policy.abandoned(victim):
                            break
                        guard.forget(victim)
                    policy.remove(victim)
                    present.discard(victim)
                if len(present) < capacity:
                    present.add(block)
                    if guard is not None:
                        guard.stored(block, depth, t)
                    policy.insert(block, 1, BlockHint(tag, parent, depth))
            parent = block
    return tier_hits


def prefill(start: int, end: int, d: float) -> float:
    """Cost of computing positions start..end-1 at 1 + p/d each."""
    n = end - start
    return n + (0.0 if math.isinf(d) else (end * (end - 1) - start * (start - 1)) / (2 * d))


def row(workload: Workload, gpu_hits: list[int], tier_hits: list[int]) -> dict[str, float]:
    bt = workload.block_tokens
    out: dict[str, float] = {}
    for d in DEPTHS:
        full = saved = 0.0
        for tokens, g, t in zip(workload.input_tokens, gpu_hits, tier_hits, strict=True):
            hit = min((g + t) * bt, tokens)
            full += prefill(0, tokens, d)
            saved += prefill(0, hit, d)
        out["tokens" if math.isinf(d) else f"saved_D{int(d)}"] = round(saved / full, 4)
    return out


def main() -> None:
    fractions = [float(x) for x in sys.argv[1].split(",")]
    conversations = load_traces(DEFAULT_TRACES)
    sets = [(f"fold{f.index}", f.workload, f.gpu_blocks) for f in
            fold_workloads(conversations, 5, seed=0, gpu_blocks=DEFAULT_GPU_BLOCKS)]
    sets.append(("all150", workload_of(conversations, seed=0), DEFAULT_GPU_BLOCKS))
    print(json.dumps({"load_avg_start": os.getloadavg(), "fractions": fractions}), flush=True)
    for name, workload, gpu_blocks in sets:
        gpu_hits = gpu_prefix_hits(workload, gpu_blocks)
        for fraction in fractions:
            capacity = workload.capacity_blocks(fraction)
            for mode in MODES:
                started = time.process_time()
                tier_hits = replay(workload, gpu_hits, capacity, mode)
                print(json.dumps({"set": name, "frac": fraction, "mode": mode,
                                  **row(workload, gpu_hits, tier_hits),
                                  "cpu_s": round(time.process_time() - started, 1)}), flush=True)
    print(json.dumps({"load_avg_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
