"""``CpuTierShadow``: vLLM's CPU tier as the tier below it sees it, row by row in LRU order.

Why: vLLM writes every chunk it stores in its CPU tier through to its secondary tiers at once
(inclusive caching). While our tier has room that is right: a restart finds everything. Once
our tier is full, a chunk the CPU tier still holds takes room here that a chunk the CPU tier
has already dropped could use, and the two tiers end up holding mostly the same chunks. With
this model, a full tier keeps such a chunk only in the CPU tier and stores it here when it
nears that tier's eviction end (``LifeboatTier``): the two tiers then hold different chunks
(exclusive caching), together nearly the sum of their sizes. Only with
``engine.vllm.exclusive_when_full = true``: by default a full tier is written through, as
vLLM's own tiers are, which kept more of the next turns' prefixes on a bounded disk (the
setting's comment says what was measured).

The model follows vLLM's ``LRUCachePolicy`` (``vllm/v1/kv_offload/cpu/policies/lru.py``): a
chunk becomes the newest when it is stored into the CPU tier or promoted into it from a tier
below, and a finished request refreshes its chain tail first, so that the chain's head is the
newest. It is a prediction, fed only by what a secondary tier is told: where it is wrong, a row
is reused before we copied its chunk, and the copy's digest check
(``TieredCache.submit_put(digests=...)``) turns that into a miss, never into wrong bytes.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class CpuTierShadow(Generic[K]):
    """Which chunk key sits in which row of a ``rows``-row LRU tier, oldest first."""

    def __init__(self, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"a CPU tier of {rows} rows")
        self.rows = rows
        self._row_of: OrderedDict[K, int] = OrderedDict()  # oldest first
        self._key_at: dict[int, K] = {}

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, key: object) -> bool:
        return key in self._row_of

    def place(self, keys: Sequence[K], rows: Iterable[int]) -> list[K]:
        """``keys`` now sit in ``rows`` (a store or a promotion), each the newest in turn.

        Returns the chunks this displaced: the row's previous chunk, and the oldest ones
        beyond the tier's size. The tier has dropped them (or is about to).
        """
        gone: list[K] = []
        for key, row in zip(keys, rows, strict=True):
            row = int(row)
            old = self._key_at.get(row)
            if old is not None and old != key:
                del self._row_of[old]
                gone.append(old)
            moved_from = self._row_of.pop(key, None)
            if moved_from is not None and moved_from != row:
                del self._key_at[moved_from]
            self._row_of[key] = row
            self._key_at[row] = key
        while len(self._row_of) > self.rows:
            old, row = self._row_of.popitem(last=False)
            del self._key_at[row]
            gone.append(old)
        return gone

    def use(self, keys_tail_first: Iterable[K]) -> None:
        """A request used these chunks; the last one given becomes the newest (vLLM's order)."""
        order = self._row_of
        for key in keys_tail_first:
            if key in order:
                order.move_to_end(key)

    def row_of(self, key: K) -> int | None:
        return self._row_of.get(key)

    def newest(self) -> Iterator[K]:
        """Chunks from the one the tier would drop last."""
        return reversed(self._row_of)

    def coldest(self, n: int) -> list[K]:
        """The ``n`` chunks the tier would drop first."""
        return list(itertools.islice(self._row_of, n))
