"""Policies x tier sizes over one workload: the rows of ``bench traces`` and the curves of ``advise``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lifeboatcache_core.abc import EvictionPolicy
from lifeboatcache_core.plugins import get_registry

from lifeboatcache.sim.belady import simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import PLAIN, ReplaySetup, SimResult, simulate, split_tokens
from lifeboatcache.sim.workload import Workload

DEFAULT_POLICIES: tuple[str, ...] = ("lru", "arc", "score", "epicache")
DEFAULT_FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1)
#: engine GPU prefix cache: 4096 blocks of 64 tokens = 256 Ki tokens (32 GiB of bf16 KV for an
#: 8B model with 8 KV heads), the order of what one inference GPU leaves for the KV cache
DEFAULT_GPU_BLOCKS = 4096
BELADY = "belady"


def make_policy(name: str, seed: int = 0, options: Mapping[str, object] | None = None) -> EvictionPolicy:
    """A registered policy with its default config, or with ``options`` over it (raises the
    registry's did-you-mean error for an unknown name, pydantic's for a bad option)."""
    cls = get_registry().load("policy", name)
    config = cls.config_model(**options) if options else None
    return cls(config, seed=seed)  # type: ignore[no-any-return]


def unlimited_hit_frac(workload: Workload, gpu_hits: list[int]) -> float:
    """The ceiling: hit fraction with a tier that never evicts (only first references miss)."""
    seen: set[int] = set()
    tier_hits: list[int] = []
    for blocks, g in zip(workload.blocks, gpu_hits, strict=True):
        pos = g
        while pos < len(blocks) and blocks[pos] in seen:
            pos += 1
        tier_hits.append(pos - g)
        seen.update(blocks)
    engine, tiers, recomputed = split_tokens(workload, gpu_hits, tier_hits)
    return (engine + tiers) / (engine + tiers + recomputed) if workload.blocks else 0.0


def run_sweep(
    workload: Workload,
    policies: Sequence[str] = DEFAULT_POLICIES,
    fractions: Iterable[float] = DEFAULT_FRACTIONS,
    *,
    gpu_blocks: int = DEFAULT_GPU_BLOCKS,
    seed: int = 0,
    setup: ReplaySetup = PLAIN,
    gpu_hits: list[int] | None = None,
    on_result: Callable[[SimResult], None] | None = None,
) -> list[SimResult]:
    """Every policy (``belady`` = the offline optimum) at every tier size, fraction-major, each
    replayed with ``setup`` (``sim.replay.replay_policy``; Bélády's optimum has none)."""
    for name in policies:  # fail before hours of simulation, not after
        if name != BELADY:
            make_policy(name, seed)
    if gpu_hits is None:
        gpu_hits = gpu_prefix_hits(workload, gpu_blocks)
    results: list[SimResult] = []
    for fraction in fractions:
        capacity = workload.capacity_blocks(fraction)
        for name in policies:
            if name == BELADY:
                result = simulate_belady(workload, gpu_hits, capacity, fraction)
            else:
                result = simulate(workload, gpu_hits, make_policy(name, seed), capacity, fraction, setup=setup)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def run_option_sets(
    workload: Workload,
    policy: str,
    option_sets: Sequence[Mapping[str, object]],
    fractions: Iterable[float] = DEFAULT_FRACTIONS,
    *,
    gpu_blocks: int = DEFAULT_GPU_BLOCKS,
    seed: int = 0,
    setup: ReplaySetup = PLAIN,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One policy under several option sets in one replay of the whole workload, LRU and Bélády
    beside each size: a row per run with the share of the LRU → Bélády gap it closes.

    The folds (``sim.folds``) compare candidate options on 1/K of the sessions at a time; this
    shows how the same candidates do with every session sharing the tier (a heavier load).
    ``setup``: how the tier is replayed (``sim.replay.replay_policy``), LRU's too.
    """
    for options in option_sets:  # a bad option fails before the replays
        make_policy(policy, seed, options)
    gpu_hits = gpu_prefix_hits(workload, gpu_blocks)
    rows: list[dict[str, Any]] = []
    for fraction in fractions:
        capacity = workload.capacity_blocks(fraction)
        runs: list[tuple[str, dict[str, object] | None, SimResult]] = [
            ("lru", None, simulate(workload, gpu_hits, make_policy("lru", seed), capacity, fraction,
                                   setup=setup)),
            (BELADY, None, simulate_belady(workload, gpu_hits, capacity, fraction))]
        for options in option_sets:
            runs.append((policy, dict(options), simulate(workload, gpu_hits, make_policy(policy, seed, options),
                                                         capacity, fraction, setup=setup)))
        lru, best = runs[0][2].hit_frac, runs[1][2].hit_frac
        for name, options, result in runs:
            row = {"capacity_frac": fraction, "policy": name, "options": options,
                   "hit_frac": round(result.hit_frac, 4),
                   "gap_closed": round((result.hit_frac - lru) / (best - lru), 3) if best > lru else None,
                   "cpu_seconds": round(result.seconds, 1)}
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def gap_closed(results: Sequence[SimResult]) -> dict[str, dict[str, float]]:
    """Per size and policy: the share of the LRU → Bélády gap the policy closes."""
    by_size: dict[float | None, dict[str, float]] = {}
    for r in results:
        by_size.setdefault(r.capacity_frac, {})[r.policy] = r.hit_frac
    out: dict[str, dict[str, float]] = {}
    for fraction, rates in by_size.items():
        if "lru" not in rates or BELADY not in rates:
            continue
        gap = rates[BELADY] - rates["lru"]
        out[str(fraction)] = {
            name: round((rate - rates["lru"]) / gap, 3) if gap > 0 else 0.0
            for name, rate in rates.items() if name not in ("lru", BELADY)
        }
    return out
