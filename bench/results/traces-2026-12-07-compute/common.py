"""What the replays of this folder share: the trace sets, the prefill-weighted score, the guard as it was."""

from __future__ import annotations

import math

from lifeboatcache_core.prefixes import PrefixGuard

from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS
from lifeboatcache.sim.workload import Workload, workload_of
from lifeboatcache.traces import Conversation

#: recomputing position p costs 1 + p/D (guard_modes.py); inf: plain tokens
DEPTHS = (1000.0, 3000.0, 27000.0, math.inf)


class EveryUseGuard(PrefixGuard):
    """The guard before end-to-end gaps: every use a sample of the return gap (request ends unflagged)."""

    def used(self, key, now, *, request_done=False):
        super().used(key, now)


def trace_sets(conversations: list[Conversation]) -> list[tuple[str, Workload, list[int]]]:
    """The 5 folds (each alone on a tier, the engine's GPU cache scaled to it) and all 150 at once,
    each with the engine's GPU prefix hits."""
    sets = [(f"fold{f.index}", f.workload, f.gpu_blocks) for f in
            fold_workloads(conversations, 5, seed=0, gpu_blocks=DEFAULT_GPU_BLOCKS)]
    sets.append(("all150", workload_of(conversations, seed=0), DEFAULT_GPU_BLOCKS))
    return [(name, workload, gpu_prefix_hits(workload, gpu_blocks)) for name, workload, gpu_blocks in sets]


def prefill(start: int, end: int, d: float) -> float:
    """Cost of computing positions start..end-1 at 1 + p/d each."""
    n = end - start
    return n + (0.0 if math.isinf(d) else (end * (end - 1) - start * (start - 1)) / (2 * d))


def row(workload: Workload, gpu_hits: list[int], tier_hits: list[int]) -> dict[str, float]:
    """Share of the prompts' prefill saved at each D (``tokens``: plain hit fraction)."""
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
