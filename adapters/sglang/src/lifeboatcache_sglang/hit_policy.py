"""Per-pool hit rules of SGLang's ``batch_exists_v2`` (hybrid models), on presence booleans only.

A hybrid model's prefix is usable up to page ``p`` only when the KV pages ``[0, p)`` are
stored *and* every sidecar pool can restore its state at ``p``. What "can restore" means
depends on the pool (``PoolHitPolicy`` in ``sglang.srt.mem_cache.hicache_storage``):

- ``all_pages`` (DSA indexer): every page in ``[0, p)``;
- ``trailing_pages`` (Mamba state, sliding-window KV): only the last ``window`` pages
  before ``p``, so ``p = 5`` can be restorable while ``3`` and ``4`` are not (the state is
  kept at node boundaries). That is why the answer is a *set* of restorable prefix lengths:
  SGLang intersects the sets of all TP ranks; a per-rank maximum could pick a length that
  another rank cannot restore;
- ``block_groups`` (compressed blocks): the pages covered by the leading complete key
  groups; it is that pool's own verdict and never gates the KV hit.

Kept free of SGLang and torch so the rules are tested in the main venv, case by case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolVerdict:
    """One pool's answer: its own hit boundary (pages) and, when it gates, the prefixes it allows."""

    boundary: int
    restorable: frozenset[int] | None  # None: does not gate the KV hit


def all_pages(present: Sequence[bool], kv_pages: int) -> PoolVerdict:
    """Every page before the prefix end must be present: the leading run, cut at ``kv_pages``."""
    boundary = next((i for i in range(kv_pages) if not present[i]), kv_pages)
    return PoolVerdict(boundary, frozenset(range(1, boundary + 1)))


def trailing_pages(present: Sequence[bool], kv_pages: int, window: int) -> PoolVerdict:
    """Prefix ``p`` is restorable when pages ``[p - window, p)`` are all present."""
    window = max(1, window)
    ok = frozenset(p for p in range(1, kv_pages + 1)
                   if all(present[i] for i in range(max(0, p - window), p)))
    return PoolVerdict(max(ok, default=0), ok)


def block_groups(present: Sequence[bool], block_pages: int, group_pages: int) -> PoolVerdict:
    """``present`` is per pool key; ``group_pages`` keys form one group that covers ``block_pages``
    FULL pages. The verdict is the FULL pages the leading complete groups cover."""
    group = max(1, group_pages)
    per_block = block_pages if block_pages > 0 else group
    complete = 0
    for start in range(0, len(present) - group + 1, group):
        if not all(present[start:start + group]):
            break
        complete += 1
    return PoolVerdict(complete * per_block, None)


def fold(kv_pages: int, verdicts: Sequence[PoolVerdict]) -> list[int]:
    """The prefix lengths every gating pool can restore (ascending); its last one is the usable hit."""
    restorable = set(range(1, kv_pages + 1))
    for verdict in verdicts:
        if verdict.restorable is not None:
            restorable &= verdict.restorable
    return sorted(restorable)
