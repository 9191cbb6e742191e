"""Bélády's offline optimum (MIN with bypass) on the tier: the upper bound for any policy.

It sees the future: every block reference in the tier's stream (the blocks after each
request's GPU hit) knows when its block is referenced next. A store into a full tier evicts
the block referenced farthest in the future, or skips the store when that block is the
incoming one. Next-use positions are computed for the whole stream at once with numpy (a
stable argsort groups the references of each block); the replay keeps a max-heap with lazy
deletion, rebuilt when stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from lifeboatcache.sim.replay import SimResult, split_tokens
from lifeboatcache.sim.workload import Workload, leading_run

NEVER = 1 << 62


def next_use(stream: np.ndarray) -> np.ndarray:
    """For each position, the position of the next reference to the same block (``NEVER``)."""
    order = np.argsort(stream, kind="stable")
    ordered = stream[order]
    nxt = np.full(stream.size, NEVER, dtype=np.int64)
    same = ordered[1:] == ordered[:-1]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def replay_belady(workload: Workload, gpu_hits: list[int], capacity_blocks: int) -> list[int]:
    """Each request's tier hit under the offline optimum."""
    tails = [blocks[g:] for blocks, g in zip(workload.blocks, gpu_hits, strict=True)]
    stream = np.fromiter((b for tail in tails for b in tail), dtype=np.int64)
    nxt = next_use(stream).tolist()
    cache: dict[int, int] = {}  # block -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, block)
    push, pop = heapq.heappush, heapq.heappop
    tier_hits: list[int] = []
    i = 0
    for tail in tails:
        tier_hits.append(leading_run(tail, cache))
        for block in tail:
            use = nxt[i]
            i += 1
            if block not in cache and len(cache) >= capacity_blocks:
                while cache.get(heap[0][1]) != -heap[0][0]:
                    pop(heap)
                if -heap[0][0] <= use:
                    continue  # the incoming block is the one needed last: do not store it
                del cache[pop(heap)[1]]
            cache[block] = use
            push(heap, (-use, block))
        if len(heap) > 2 * capacity_blocks + 4096:
            heap = [(-u, b) for b, u in cache.items()]
            heapq.heapify(heap)
    return tier_hits


def simulate_belady(workload: Workload, gpu_hits: list[int], capacity_blocks: int,
                    capacity_frac: float | None = None) -> SimResult:
    started = time.process_time()
    tier_hits = replay_belady(workload, gpu_hits, capacity_blocks)
    engine, tiers, recomputed = split_tokens(workload, gpu_hits, tier_hits)
    return SimResult("belady", capacity_frac, capacity_blocks, engine, tiers, recomputed,
                     time.process_time() - started)
