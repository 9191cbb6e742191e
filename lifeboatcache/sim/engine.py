"""The engine's own GPU prefix cache, in front of our tiers.

vLLM and SGLang keep recently used KV blocks in GPU memory and evict the least recently used
free block; a request reuses the leading run of its blocks found there. This cache does not
depend on our tiers (every computed block enters it), so its per-request hits are computed once
per workload and shared by every policy and size.
"""

from __future__ import annotations

from collections import OrderedDict

from lifeboatcache.sim.workload import Workload, leading_run


def gpu_prefix_hits(workload: Workload, gpu_blocks: int) -> list[int]:
    """For each request, how many leading blocks the engine's LRU GPU cache of ``gpu_blocks`` holds."""
    hits: list[int] = []
    if gpu_blocks <= 0:
        return [0] * len(workload.blocks)
    cache: OrderedDict[int, None] = OrderedDict()
    move_to_end, popitem = cache.move_to_end, cache.popitem
    for blocks in workload.blocks:
        hits.append(leading_run(blocks, cache))
        for block in blocks:
            if block in cache:
                move_to_end(block)
            else:
                cache[block] = None
        while len(cache) > gpu_blocks:
            popitem(last=False)
    return hits
