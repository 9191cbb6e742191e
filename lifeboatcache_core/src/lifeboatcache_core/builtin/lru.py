"""Least-recently-used eviction: an ordered dict, O(1) per operation."""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice

from lifeboatcache_core.abc import BlockHint, EvictionPolicy
from lifeboatcache_core.keys import BlockKey


class LRUPolicy(EvictionPolicy):
    name = "lru"

    def __init__(self, config: object = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)  # type: ignore[arg-type]
        self._order: OrderedDict[BlockKey, None] = OrderedDict()

    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def touch(self, key: BlockKey) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def expect(self, key: BlockKey) -> None:
        self.touch(key)  # as recent as the block a stager would have staged

    def remove(self, key: BlockKey) -> None:
        self._order.pop(key, None)

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        return next(iter(self._order), None)

    def victims(self, incoming: BlockKey | None, limit: int) -> list[BlockKey]:
        return list(islice(self._order, limit))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order
