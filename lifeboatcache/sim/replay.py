"""Replay a workload through the GPU prefix cache and one tier run by an ``EvictionPolicy``.

The tier is driven exactly as ``lifeboatcache_core.tier.Tier`` drives its policy: a lookup
reads the leading run of the prompt's blocks that the tier holds (``touch`` each), the engine
recomputes the rest and stores them (``insert`` with a ``BlockHint`` of parent and depth), and
a store into a full tier first evicts ``victim(incoming)`` and calls ``remove``. Blocks the GPU
cache served never reach the tier, as with vLLM's offloading connector.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from lifeboatcache_core.abc import BlockHint, EvictionPolicy

from lifeboatcache.sim.workload import Workload


@dataclass(frozen=True)
class SimResult:
    """Prompt tokens of one run, split by where they came from."""

    policy: str
    capacity_frac: float | None
    capacity_blocks: int
    tokens_from_engine: int
    tokens_from_tiers: int
    tokens_recomputed: int
    seconds: float

    @property
    def tokens_total(self) -> int:
        return self.tokens_from_engine + self.tokens_from_tiers + self.tokens_recomputed

    @property
    def hit_frac(self) -> float:
        """Prompt tokens not recomputed ÷ all prompt tokens."""
        total = self.tokens_total
        return (self.tokens_from_engine + self.tokens_from_tiers) / total if total else 0.0

    def row(self) -> dict[str, object]:
        row = asdict(self)
        row["hit_frac"] = round(self.hit_frac, 4)
        row["seconds"] = round(self.seconds, 2)
        return row


def split_tokens(workload: Workload, gpu_hits: list[int], tier_hits: list[int]) -> tuple[int, int, int]:
    """(from engine, from tiers, recomputed) prompt tokens, given per-request hit blocks."""
    bt = workload.block_tokens
    engine = tiers = recomputed = 0
    for tokens, g, t in zip(workload.input_tokens, gpu_hits, tier_hits, strict=True):
        from_engine = min(g * bt, tokens)
        from_tiers = min(t * bt, tokens - from_engine)
        engine += from_engine
        tiers += from_tiers
        recomputed += tokens - from_engine - from_tiers
    return engine, tiers, recomputed


def replay_policy(workload: Workload, gpu_hits: list[int], policy: EvictionPolicy,
                  capacity_blocks: int, session_tags: bool = True) -> list[int]:
    """Run the tier; return each request's tier hit (leading run of blocks after the GPU hit).

    With ``session_tags`` each stored block's hint names its session (as an adapter that knows
    the conversation does); without, policies see only the prefix chain (parent, depth).
    """
    if capacity_blocks < 1:
        raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
    present: set[int] = set()
    insert, touch, remove, victim = policy.insert, policy.touch, policy.remove, policy.victim
    add, discard = present.add, present.discard
    tier_hits: list[int] = []
    tags = workload.streams if session_tags else [None] * len(workload.blocks)
    now = [0.0]
    if hasattr(policy, "clock"):  # policies that reason about time see the replay's clock
        policy.clock = lambda: now[0]
    for blocks, g, tag, t in zip(workload.blocks, gpu_hits, tags, workload.times, strict=True):
        now[0] = t
        end = len(blocks)
        pos = g
        while pos < end and blocks[pos] in present:
            touch(blocks[pos])  # type: ignore[arg-type]
            pos += 1
        tier_hits.append(pos - g)
        parent = blocks[pos - 1] if pos else None
        for depth in range(pos, end):
            block = blocks[depth]
            if block not in present:
                while len(present) >= capacity_blocks:
                    evicted = victim(block)  # type: ignore[arg-type]
                    if evicted is None:
                        raise RuntimeError(f"{policy.name}: victim() gave None with {len(present)} blocks stored")
                    remove(evicted)
                    discard(evicted)  # type: ignore[arg-type]
                add(block)
            insert(block, 1, BlockHint(tag, parent, depth))  # type: ignore[arg-type]
            parent = block
    return tier_hits


def simulate(workload: Workload, gpu_hits: list[int], policy: EvictionPolicy, capacity_blocks: int,
             capacity_frac: float | None = None, label: str | None = None,
             session_tags: bool = True) -> SimResult:
    """One policy at one size: token split and CPU seconds (one core, immune to other load)."""
    started = time.process_time()
    tier_hits = replay_policy(workload, gpu_hits, policy, capacity_blocks, session_tags)
    engine, tiers, recomputed = split_tokens(workload, gpu_hits, tier_hits)
    return SimResult(label or policy.name, capacity_frac, capacity_blocks, engine, tiers, recomputed,
                     time.process_time() - started)
