"""EpiCache for stored blocks: evict whole cold episodes first, and an episode's tail before its head.

Episodes. A block belongs to the episode of its ``hint.tag`` when the adapter knows the
session (or derived a topic tag, e.g. with :class:`~lifeboatcache_policy_epicache.clusters.EpisodeClusters`
from embeddings); otherwise to the episode of its ``hint.parent``: blocks that share a prefix
chain belong together, and a chain whose root is new starts a new episode. Recently evicted
keys remember their episode (a bounded ghost map), so a session whose tail was evicted rejoins
its episode when it comes back.

Which episode. Every episode learns its own rhythm: the (log-mean) clock gap between its visits
(a visit = a run of operations on the episode with no other operation in between). Its
*deadline* is ``last_visit + patience * gap``. An episode past its deadline is cold (the
session paused: the user reads, a tool runs long, the session ended) and goes first, most
overdue first. While no episode is cold, the warm episode visited most recently goes
(``warm_order="recent"``): gaps vary so much within a session that its learned rhythm says
little about *which* warm session comes back next, but its age does -- a session that has
been away for part of its gap is closer to its next request than the one just served.
(``"farthest"``, ``last_visit + gap`` farthest ahead, and ``"lru"`` remain options.)

Which block. Within the chosen episode the deepest block goes first, so an episode shrinks
from its tail and a returning session still hits its leading blocks (a prompt hits only as
long as its leading blocks are cached).

Time is ``time.monotonic`` seconds by default (``clock="monotonic"``, what a tier uses; a
simulation sets the ``clock`` attribute to its replay time); ``clock="operations"`` counts
inserts and touches instead (deterministic, load-relative). An episode's first gap is the
running mean over all episodes (a plain mean over the first 100 gaps, then an EWMA), so
the scale of the clock is learnt, not assumed. Heaps use lazy deletion and are rebuilt when
stale entries outnumber live ones, so every operation is O(log n) and memory stays
proportional to the blocks tracked plus the ghost map (at most as many keys as blocks tracked).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Literal

from lifeboatcache_core.abc import BlockHint, EvictionPolicy, PluginConfig
from lifeboatcache_core.keys import BlockKey
from pydantic import Field


class EpiCacheConfig(PluginConfig):
    patience: float = Field(2.0, gt=0.0, description="an episode is cold after this many of its usual gaps")
    gap_smoothing: float = Field(0.05, gt=0.0, le=1.0, description="EWMA weight of a new visit gap (log scale)")
    warm_order: Literal["recent", "farthest", "lru"] = Field(
        "recent", description="among warm episodes evict the most recently visited, the one expected back "
        "last (last visit + its gap), or the least recently visited")
    clock: Literal["monotonic", "operations"] = Field(
        "monotonic", description="measure gaps in time.monotonic seconds, or in operations (inserts and touches)")


class _Episode:
    __slots__ = ("blocks", "deadline", "heap", "last", "last_op", "log_gap", "warm_key")

    def __init__(self, op: int, now: float, log_gap: float) -> None:
        self.last = now  # start of the latest visit
        self.last_op = op
        self.log_gap = log_gap
        self.deadline = 0.0  # cold after this clock
        self.warm_key = 0.0  # order among warm episodes (min goes first)
        self.blocks = 0
        self.heap: list[tuple[int, int, Hashable]] = []  # (-depth, seq, key)


class EpiCachePolicy(EvictionPolicy):
    name = "epicache"
    config_model = EpiCacheConfig

    def __init__(self, config: PluginConfig | None = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        cfg: EpiCacheConfig = self.config  # type: ignore[assignment]
        self._patience = cfg.patience
        self._alpha = cfg.gap_smoothing
        self._warm_order = cfg.warm_order
        self._clock = 0
        #: seconds for gaps and deadlines (``time.monotonic`` in a tier, the replay's clock in a
        #: simulation); ``None``: count operations instead (deterministic, load-relative)
        self.clock: Callable[[], float] | None = time.monotonic if cfg.clock == "monotonic" else None
        self._seq = 0
        self._global_log_gap = 0.0
        self._global_gaps = 0  # gaps seen over all episodes (the prior's weight, capped)
        self._blocks: dict[Hashable, tuple[Hashable, int]] = {}  # key -> (episode id, seq)
        self._episodes: dict[Hashable, _Episode] = {}
        self._ghosts: OrderedDict[Hashable, Hashable] = OrderedDict()  # evicted key -> episode id
        self._by_deadline: list[tuple[float, int, Hashable]] = []  # min-heap: coldest first
        self._by_return: list[tuple[float, int, Hashable]] = []  # max-heap (negated deadline)

    # -------------------------------------------------------------------- tier calls

    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        self._clock += 1
        if key in self._blocks:
            self._visit(self._blocks[key][0])
            return
        episode_id = self._episode_for(key, hint)
        episode = self._visit(episode_id)
        depth = hint.depth if hint is not None and hint.depth is not None else 0
        self._seq += 1
        self._blocks[key] = (episode_id, self._seq)
        episode.blocks += 1
        heapq.heappush(episode.heap, (-depth, self._seq, key))
        if len(episode.heap) > 2 * episode.blocks + 16:
            episode.heap = [e for e in episode.heap if self._blocks.get(e[2], (None, -1))[1] == e[1]]
            heapq.heapify(episode.heap)

    def touch(self, key: BlockKey) -> None:
        found = self._blocks.get(key)
        if found is not None:
            self._clock += 1
            self._visit(found[0])

    def remove(self, key: BlockKey) -> None:
        found = self._blocks.pop(key, None)
        if found is None:
            return
        episode_id = found[0]
        episode = self._episodes[episode_id]
        episode.blocks -= 1
        if episode.blocks == 0:
            del self._episodes[episode_id]
        self._ghosts[key] = episode_id
        while len(self._ghosts) > len(self._blocks) + 16:
            self._ghosts.popitem(last=False)

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        episode = self._coldest_episode()
        if episode is None:
            return None
        heap, blocks = episode.heap, self._blocks
        while heap:
            _, seq, key = heap[0]
            found = blocks.get(key)
            if found is not None and found[1] == seq:
                return key  # type: ignore[return-value]
            heapq.heappop(heap)
        raise AssertionError("an episode with blocks has an empty heap")  # pragma: no cover

    def expected_return(self, tag: str) -> float | None:
        """When session ``tag`` (its blocks' ``BlockHint.tag``) is expected back: its last visit plus its
        learnt gap, on the policy's clock; None for a session it does not hold or an operations clock.

        Predictive staging (``lifeboatcache_core.staging.ReturnEstimator``) stages the session's
        blocks into the fastest tier ahead of this time.
        """
        if self.clock is None:
            return None
        episode = self._episodes.get(("tag", tag))
        if episode is None:
            return None
        return episode.last + 2.0 ** episode.log_gap

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: object) -> bool:
        return key in self._blocks

    # -------------------------------------------------------------------- episodes

    def _episode_for(self, key: Hashable, hint: BlockHint | None) -> Hashable:
        if hint is not None:
            if hint.tag is not None:
                return ("tag", hint.tag)
            parent = hint.parent
            if parent is not None:
                found = self._blocks.get(parent)
                if found is not None:
                    return found[0]
                ghost = self._ghosts.get(parent)
                if ghost is not None:
                    return ghost
        ghost = self._ghosts.pop(key, None)
        return ghost if ghost is not None else ("root", key)

    def _now(self) -> float:
        return self.clock() if self.clock is not None else float(self._clock)

    def _visit(self, episode_id: Hashable) -> _Episode:
        """Record an operation on the episode; a new visit updates its rhythm and deadline."""
        op = self._clock
        episode = self._episodes.get(episode_id)
        if episode is not None and op - episode.last_op <= 1:  # same visit: operations back to back
            episode.last_op = op
            return episode
        now = self._now()
        if episode is None:
            episode = self._episodes[episode_id] = _Episode(op, now, self._global_log_gap)
        else:
            log_gap = math.log2(max(now - episode.last, 1e-3))
            episode.log_gap += self._alpha * (log_gap - episode.log_gap)
            if self._global_gaps < 100:
                self._global_gaps += 1
            self._global_log_gap += (log_gap - self._global_log_gap) / self._global_gaps
            episode.last, episode.last_op = now, op
        gap = 2.0 ** episode.log_gap
        episode.deadline = now + gap * self._patience
        order = self._warm_order
        episode.warm_key = -now if order == "recent" else -(now + gap) if order == "farthest" else now
        self._seq += 1
        heapq.heappush(self._by_deadline, (episode.deadline, self._seq, episode_id))
        heapq.heappush(self._by_return, (episode.warm_key, self._seq, episode_id))
        if len(self._by_deadline) > 2 * len(self._episodes) + 64:
            self._rebuild_episode_heaps()
        return episode

    def _live_top(self, heap: list[tuple[float, int, Hashable]], field: str) -> _Episode | None:
        """The top episode of ``heap`` whose ``field`` still equals its entry (others are stale)."""
        episodes = self._episodes
        while heap:
            value, _, episode_id = heap[0]
            episode = episodes.get(episode_id)
            if episode is not None and getattr(episode, field) == value:
                return episode
            heapq.heappop(heap)
        return None

    def _coldest_episode(self) -> _Episode | None:
        overdue = self._live_top(self._by_deadline, "deadline")
        if overdue is None:
            return None
        if overdue.deadline < self._now():
            return overdue
        return self._live_top(self._by_return, "warm_key")

    def _rebuild_episode_heaps(self) -> None:
        # a unique seq per entry: ties never compare episode ids (of mixed types)
        items = list(self._episodes.items())
        self._by_deadline = [(e.deadline, n, i) for n, (i, e) in enumerate(items)]
        self._by_return = [(e.warm_key, n, i) for n, (i, e) in enumerate(items)]
        heapq.heapify(self._by_deadline)
        heapq.heapify(self._by_return)
