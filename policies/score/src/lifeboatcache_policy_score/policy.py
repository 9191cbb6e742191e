"""Evict the block with the lowest score: recency, plus reuse, minus prefix depth.

``score = last_access + reuse_weight * min(hits, max_hits) * reuse_gap - depth_weight * depth``

* ``last_access`` is a logical clock (one tick per insert or touch), so the policy is
  deterministic and needs no wall time.
* Reuse: a block read ``hits`` times is kept ``reuse_weight * reuse_gap`` ticks longer per hit,
  where ``reuse_gap`` is the running mean of the clock ticks between two reads of one block. So
  the bonus scales with the traffic: a system prompt or the prefix of a long, active session
  (read at every turn) outlives a block that was written once and never read.
* Depth: a prompt hits only as long as its *leading* blocks are cached, so the deeper blocks of
  a chain must go before its shallower ones. ``depth_weight`` > 1 makes the blocks of one
  prompt (stored in prompt order, a tick apart) leave tail first.

Blocks sit in a binary heap keyed by score with lazy deletion (a stale entry is skipped when it
reaches the top); the heap is rebuilt when stale entries outnumber live ones, so memory stays
proportional to the blocks tracked. Every operation is O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable

from lifeboatcache_core.abc import BlockHint, EvictionPolicy, PluginConfig
from lifeboatcache_core.keys import BlockKey
from pydantic import Field


class ScoreConfig(PluginConfig):
    reuse_weight: float = Field(0.5, ge=0.0, description="bonus per read, in mean reuse gaps")
    max_hits: int = Field(8, ge=0, description="reads beyond this count earn no more bonus")
    depth_weight: float = Field(2.0, ge=0.0, description="clock ticks a block loses per prefix depth")
    gap_smoothing: float = Field(0.01, gt=0.0, le=1.0, description="EWMA weight of a new reuse gap")


class ScorePolicy(EvictionPolicy):
    name = "score"
    config_model = ScoreConfig

    def __init__(self, config: PluginConfig | None = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        cfg: ScoreConfig = self.config  # type: ignore[assignment]
        self._reuse_weight = cfg.reuse_weight
        self._max_hits = cfg.max_hits
        self._depth_weight = cfg.depth_weight
        self._alpha = cfg.gap_smoothing
        self._clock = 0
        self._reuse_gap = 0.0  # running mean of ticks between two reads of a block
        # key -> [score, seq, hits, depth, last_access]; seq identifies the live heap entry
        self._blocks: dict[Hashable, list[float]] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0

    def _push(self, key: Hashable, entry: list[float]) -> None:
        hits = entry[2] if entry[2] < self._max_hits else self._max_hits
        score = entry[4] + self._reuse_weight * hits * self._reuse_gap - self._depth_weight * entry[3]
        self._seq += 1
        entry[0] = score
        entry[1] = self._seq
        heapq.heappush(self._heap, (score, self._seq, key))
        if len(self._heap) > 2 * len(self._blocks) + 64:
            self._heap = [(e[0], int(e[1]), k) for k, e in self._blocks.items()]
            heapq.heapify(self._heap)

    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        self._clock += 1
        entry = self._blocks.get(key)
        if entry is not None:  # re-stored: counts as a read
            self._read(key, entry)
            return
        depth = hint.depth if hint is not None and hint.depth is not None else 0
        entry = [0.0, 0, 0, depth, self._clock]
        self._blocks[key] = entry
        self._push(key, entry)

    def touch(self, key: BlockKey) -> None:
        entry = self._blocks.get(key)
        if entry is not None:
            self._clock += 1
            self._read(key, entry)

    def _read(self, key: Hashable, entry: list[float]) -> None:
        self._reuse_gap += self._alpha * ((self._clock - entry[4]) - self._reuse_gap)
        entry[2] += 1
        entry[4] = self._clock
        self._push(key, entry)

    def remove(self, key: BlockKey) -> None:
        self._blocks.pop(key, None)

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        heap, blocks = self._heap, self._blocks
        while heap:
            _, seq, key = heap[0]
            entry = blocks.get(key)
            if entry is not None and entry[1] == seq:
                return key  # type: ignore[return-value]
            heapq.heappop(heap)
        return None

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: object) -> bool:
        return key in self._blocks
