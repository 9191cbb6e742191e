"""EpiCache for stored blocks: evict whole cold episodes first, and an episode's tail before its head.

Episodes. A block belongs to the episode of its ``hint.tag`` when the adapter knows the
session (or derived a topic tag, e.g. with :class:`~lifeboatcache_policy_epicache.clusters.EpisodeClusters`
from embeddings); otherwise to the episode of its ``hint.parent``: blocks that share a prefix
chain belong together, and a chain whose root is new starts a new episode. Recently evicted
keys remember their episode (a bounded ghost map), so a session whose tail was evicted rejoins
its episode when it comes back.

Which episode (``predictor="returns"``). Bélády would evict the episode needed
farthest in the future; an online policy can only estimate who comes back when. A small online
model (:mod:`~lifeboatcache_policy_epicache.returns`) counts the return gaps of all episodes in
log-spaced bins, per class of the episode's previous gap, and scores an episode idle for ``age``
seconds by ``P(back within H | away for age)``, ``H`` being the tier's turnover time (blocks held
over blocks inserted per clock second) times ``horizon``. The episode with the lowest score
goes first (oldest on ties): one idle far past every gap seen (the session ended) scores 0; one
a few seconds into a tool call scores high. Episodes are listed by (class, age bin) and a timer
heap moves each one bin on when its age crosses the bin's edge, so the victim's bucket is a
scan of at most classes x bins (148) buckets, cached until a visit, a move or a new score table.

Which episode (``predictor="rhythm"``, the default: ``bench traces --folds 5`` chose it over the
returns model on every held fold, issue 17). Every episode learns its own
rhythm: the (log-mean) clock gap between its visits (a visit = a run of operations on the
episode with no other operation in between, or less than ``visit_window`` after its previous one:
a tier's write threads store several sessions' blocks at once, and it applies the uses it kept
between a store's ``admit`` and ``insert``; taken as visits, those interleavings taught gaps
of milliseconds: at 2 % of the working set, all 150 traces at once with vLLM's request ends,
EpiCache closed 5 % of the LRU-Bélády gap instead of 37 %, bench/results 2026-12-06). Its
*deadline* is ``last_visit + patience * gap``.
An episode past its deadline is cold and goes first, most overdue first. While no episode is
cold, the warm episode expected back last goes (``warm_order="farthest"``: ``last_visit + gap``
farthest ahead; ``"recent"``, the episode visited most recently, and ``"lru"`` remain options).
``patience`` 1.5 and ``"farthest"`` were chosen by ``bench traces --folds 5`` on every held fold
(2026-12-04); in one replay of all 150 traces at once 2.0 and ``"recent"`` do better (issue 17).

Where a session's idle time starts (``request_done="idle"``, the default). An engine that
reports finished requests (vLLM's tier: ``EvictionPolicy.request_done`` for the request's chain)
tells the rhythm when a response ended: the session's clock restarts there, the gap it learns at
its next request is the time from that end (a tool call, a user's reply) and not the generation
before it, and its deadline and ``expected_return`` count from the end. Without such reports
nothing changes. ``"visit"`` counts an end as one more visit.

Bypass (``admit``, Bélády's bypass). Once the tier is full, a new block is not stored when its
parent was evicted or bypassed (a prompt hits only its leading run, so a block after a hole is
never read) and, with ``bypass="unlikely"`` and the returns predictor, when its episode is less
likely to return within the horizon than the episode the next victim would come from.

Blocks left behind (``stale_first``, the default). Before any episode, the blocks a session
left go: those its latest visit did not use while it used blocks as deep (agents re-send their
whole context, so such a block is on a context the session compacted or rewrote; 3 % come
back in the traces). Found once per use when the session's next visit begins (``_left_behind``).

Which block. Within the chosen episode the deepest block goes first, so an episode shrinks
from its tail and a returning session still hits its leading blocks (a prompt hits only as
long as its leading blocks are cached).

Time is ``time.monotonic`` seconds by default (``clock="monotonic"``, what a tier uses; a
simulation sets the ``clock`` attribute to its replay time); ``clock="operations"`` counts
inserts and touches instead (deterministic, load-relative). An episode's first gap is the
running mean over all episodes (a plain mean over the first 100 gaps, then an EWMA), so
the scale of the clock is learnt, not assumed.

Cost. Per block (a tier's hot path: ``admit``, ``insert``, ``touch``, ``request_done``,
``victim``, ``remove``) O(1) amortised: dict operations; an episode's blocks are kept by depth
(``_Episode.by_depth``, each depth's in insertion order, the depths in a sorted list whose last
entry is the deepest held), so the victim is the first block of the deepest depth and a new
block deeper than all its episode holds (a prefix chain's new tail) is an append; a depth the
episode lacks below its deepest costs a bisect and a list insert (O(log d) compares and a memmove
of up to 2d + 16 entries): 0.074 % of the stores in a replay of all 150 traces at 2 and 5 %
(the heap this replaced cost O(log b) per store and per victim, b the episode's blocks;
bench/results 2026-12-07, EpiCache per block in O(1)). ``stale_first`` looks at each block
once per use. Per visit (an episode's first operation after a pause, not per block) the
rhythm's deadline goes on two episode heaps: O(log E) in the episodes held; heaps use lazy
deletion and are rebuilt when stale entries outnumber live ones. With the returns predictor,
at most one 148-bucket scan after each visit or bin move, and a 148-entry score table rebuilt
every 64 gaps. Memory stays proportional to the blocks tracked plus the ghost and bypass maps
(bounded by the blocks tracked).
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from itertools import islice
from typing import Any, Literal

from lifeboatcache_core.abc import BlockHint, EvictionPolicy, PluginConfig
from lifeboatcache_core.keys import BlockKey
from pydantic import Field

from lifeboatcache_policy_epicache.returns import BINS, EDGES, ReturnModel, age_bin, gap_class


class EpiCacheConfig(PluginConfig):
    predictor: Literal["returns", "rhythm"] = Field(
        "rhythm", description="rank episodes by the learnt chance that they return within the tier's "
        "horizon (returns.ReturnModel), or by their own rhythm's deadline and warm_order (rhythm)")
    horizon: float = Field(1.0, gt=0.0, description="returns: the horizon in tier turnover times (blocks held "
                           "over blocks inserted per second) within which a return counts")
    bypass: Literal["unlikely", "holes", "off"] = Field(
        "holes", description="once the tier is full, do not store a block after a hole (its parent was "
        "evicted or bypassed) and, with predictor returns, a block of an episode less likely to return within "
        "the horizon than the next victim's (unlikely); only the first (holes); or store everything (off)")
    patience: float = Field(1.5, gt=0.0, description="an episode is cold after this many of its usual gaps")
    gap_smoothing: float = Field(0.05, gt=0.0, le=1.0, description="EWMA weight of a new visit gap (log scale)")
    warm_order: Literal["recent", "farthest", "lru"] = Field(
        "farthest", description="among warm episodes evict the most recently visited, the one expected back "
        "last (last visit + its gap), or the least recently visited")
    request_done: Literal["idle", "visit"] = Field(
        "idle", description="rhythm: a finished request (an engine that reports them, vLLM) starts its session's "
        "idle time, so gaps run from a response's end to the next request (idle), or counts as one more visit (visit)")
    visit_window: float = Field(
        1.0, ge=0.0, description="an operation on an episode less than this many clock units after its previous "
        "one belongs to the same visit even when other episodes' operations came in between (a tier's concurrent "
        "stores, and the uses it applies late, interleave them); 0: only operations back to back")
    stale_first: bool = Field(
        True, description="a block its session's latest visit did not use, though that visit used blocks as deep "
        "(a branch the session left: a compacted or rewritten context), goes before any episode; blocks of "
        "unknown depth never count as left")
    clock: Literal["monotonic", "operations"] = Field(
        "monotonic", description="measure gaps in time.monotonic seconds, or in operations (inserts and touches)")


#: ``_Episode.last_op`` of a session whose latest operation was the end of a request (``request_done``)
_SINCE_END = -2
#: ``_Episode.min_depth`` of a visit that used no block of known depth (yet)
_NO_DEPTH = 1 << 62


class _Episode:
    __slots__ = ("age_bin", "blocks", "bucket", "by_depth", "deadline", "depths", "done_op", "klass", "last",
                 "last_op", "log_gap", "min_depth", "move_seq", "seen", "used", "visits", "warm_key")

    def __init__(self, op: int, now: float, log_gap: float) -> None:
        self.last = now  # start of the latest visit
        self.seen = now  # its latest operation (visit_window counts from it)
        self.last_op = op
        self.done_op = -2  # rhythm: the operation of the latest finished request's latest touch
        self.log_gap = log_gap
        self.deadline = 0.0  # cold after this clock
        self.warm_key = 0.0  # order among warm episodes (min goes first)
        self.blocks = 0
        # its blocks by depth, each depth's in insertion order (no empty bucket), and the depths,
        # ascending; the last is always held, the others may have lost their bucket (compacted
        # once they outnumber the held ones: the list stays proportional to the blocks held)
        self.by_depth: dict[int, dict[Hashable, None]] = {}
        self.depths: list[int] = []
        self.klass = 0  # returns: class of the previous gap (0: none yet)
        self.age_bin = 0
        self.bucket: tuple[int, int] | None = None  # returns: (class, age bin) it is listed in
        self.move_seq = 0  # returns: the live entry of the age-bin timer heap
        # stale_first: visits so far, the shallowest known depth the current one used, and the
        # blocks not yet found left behind, least recently used first (key -> visit of its last use)
        self.visits = 0
        self.min_depth = _NO_DEPTH
        self.used: OrderedDict[Hashable, int] = OrderedDict()


class EpiCachePolicy(EvictionPolicy):
    name = "epicache"
    config_model = EpiCacheConfig

    def __init__(self, config: PluginConfig | None = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        cfg: EpiCacheConfig = self.config  # type: ignore[assignment]
        self._patience = cfg.patience
        self._alpha = cfg.gap_smoothing
        self._warm_order = cfg.warm_order
        self._visit_window = cfg.visit_window
        self._stale_first = cfg.stale_first
        #: stale_first: blocks their sessions left behind, in the order they were found (evicted first)
        self._left: OrderedDict[Hashable, None] = OrderedDict()
        self._late = False  # the latest operation was a use applied late, older than its episode's visit
        self._idle_from_done = cfg.request_done == "idle" and cfg.predictor == "rhythm"
        self._clock = 0
        #: seconds for gaps and deadlines (``time.monotonic`` in a tier, the replay's clock in a
        #: simulation); ``None``: count operations instead (deterministic, load-relative)
        self.clock: Callable[[], float] | None = time.monotonic if cfg.clock == "monotonic" else None
        self._seq = 0
        self._global_log_gap = 0.0
        self._global_gaps = 0  # gaps seen over all episodes (the prior's weight, capped)
        self._blocks: dict[Hashable, tuple[Hashable, int]] = {}  # key -> (episode id, depth or -1)
        self._episodes: dict[Hashable, _Episode] = {}
        self._ghosts: OrderedDict[Hashable, Hashable] = OrderedDict()  # evicted key -> episode id
        self._by_deadline: list[tuple[float, int, Hashable]] = []  # min-heap: coldest first
        self._by_return: list[tuple[float, int, Hashable]] = []  # max-heap (negated deadline)
        # predictor = "returns": episodes listed by (gap class, age bin), oldest first in each; a
        # timer heap moves an episode to its next age bin when its age crosses the bin's edge
        self._returns = cfg.predictor == "returns"
        self._horizon = cfg.horizon
        self._bypass = cfg.bypass
        self._model = ReturnModel()
        self._buckets: dict[tuple[int, int], OrderedDict[Hashable, None]] = {}
        self._moves: list[tuple[float, int, Hashable]] = []
        self._victim_bucket: tuple[int, int] | None = None  # cached argmin; None: recompute
        self._empty: OrderedDict[Hashable, None] = OrderedDict()  # bypassed episodes that hold no block
        self._refused: OrderedDict[Hashable, None] = OrderedDict()  # recently bypassed keys (bounded)
        self._full = False  # a victim was asked for: the tier is at its capacity
        self._inserts = 0
        self._rate_mark: tuple[float, int] | None = None  # (clock, inserts) at the last rate sample
        self._insert_rate = 0.0  # blocks inserted per clock second (EWMA over samples)

    # -------------------------------------------------------------------- tier calls

    def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
        """Bélády's bypass (``bypass``), once the tier is full (a victim has been asked for).

        A new block is not stored when its parent was evicted or bypassed (a prompt hits only its
        leading run: a block after a hole is never read), or when its episode is, right now, less
        likely to return within the horizon than the episode the next victim would come from (it
        would be the next victim itself). The store still counts as a visit of its episode.
        """
        if key in self._blocks:
            return True
        if self._bypass == "off" or not self._full:
            return True
        self._clock += 1
        episode_id = self._episode_for(key, hint, peek=True)
        episode = self._visit(episode_id)
        parent = hint.parent if hint is not None else None
        refused = parent is not None and parent not in self._blocks and (
            parent in self._ghosts or parent in self._refused)
        if not refused and self._returns and self._bypass == "unlikely":
            table = self._table()
            target = None if table is None else self._victim_target(table)
            refused = target is not None and table is not None and \
                table[episode.klass][0] < table[target[0]][target[1]]
        if not refused:
            return True
        self._refused[key] = None
        while len(self._refused) > 1024 + len(self._blocks) // 8:
            self._refused.popitem(last=False)
        if episode.blocks == 0:  # remember its rhythm, boundedly, though it holds nothing
            self._empty[episode_id] = None
            self._empty.move_to_end(episode_id)
            while len(self._empty) > 64 + len(self._blocks) // 8:
                gone, _ = self._empty.popitem(last=False)
                if gone in self._episodes and self._episodes[gone].blocks == 0:
                    del self._episodes[gone]
        return False

    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        self._clock += 1
        found = self._blocks.get(key)
        if found is not None:
            episode = self._visit(found[0])
            if self._stale_first:
                self._used(key, episode, found[1], self._late)
            return
        episode_id = self._episode_for(key, hint)
        episode = self._visit(episode_id)
        known = hint.depth if hint is not None and hint.depth is not None else -1
        self._blocks[key] = (episode_id, known)
        if self._stale_first:
            self._used(key, episode, known, False)
        episode.blocks += 1
        if episode.blocks == 1:
            self._empty.pop(episode_id, None)
        if self._returns:
            self._inserts += 1
            if episode.bucket is None:
                self._list(episode_id, episode)
        elif episode.blocks == 1:  # held nothing (bypassed): its heap entries may be gone
            self._push_rhythm(episode_id, episode)
        depth = max(known, 0)
        bucket = episode.by_depth.get(depth)
        if bucket is None:
            bucket = episode.by_depth[depth] = {}
            depths = episode.depths
            if not depths or depth > depths[-1]:
                depths.append(depth)  # deeper than all it holds: a prefix chain's new tail, O(1)
            else:  # a depth it does not hold, shallower than its deepest (it may still be listed)
                at = bisect_left(depths, depth)
                if depths[at] != depth:
                    depths.insert(at, depth)
        bucket[key] = None

    def touch(self, key: BlockKey) -> None:
        found = self._blocks.get(key)
        if found is not None:
            self._clock += 1
            episode = self._visit(found[0])
            if self._stale_first:
                self._used(key, episode, found[1], self._late)

    def request_done(self, key: BlockKey) -> None:
        """A request of the block's session finished: with the rhythm predictor its idle time starts now.

        The session's clock restarts here without learning the time since its request began as
        a gap (that was generation, not idleness), so the gaps it learns are the ones from a
        response's end to the next request (a tool call, a user's reply) and its deadline and
        expected return count from the end. ``bench traces --request-ends`` (the replay with
        the ends vLLM's tier reports) chose it on every held fold (2026-12-06, issue 17). The
        rest of the finished request's chain (touched key after key) is the same end. A
        session whose requests reach us only at their end (served from vLLM's CPU tier above
        us) learns its gap from end to end, as before. With
        ``request_done = "visit"``, and with the returns model, it is a visit (``touch``).
        """
        found = self._blocks.get(key)
        if found is None:
            return
        self._clock += 1
        episode = self._request_end(found[0])
        if self._stale_first:
            self._used(key, episode, found[1], self._late)

    def _request_end(self, episode_id: Hashable) -> _Episode:
        """``request_done``'s effect on the block's episode (returned)."""
        if not self._idle_from_done:
            return self._visit(episode_id)
        episode = self._episodes[episode_id]
        op = self._clock
        if episode.done_op == op - 1:  # the same finished request's chain, key after key (as late)
            episode.done_op = op
            return episode
        if episode.last_op == _SINCE_END:  # nothing since its last end: served above us (vLLM's CPU
            self._visit(episode_id)  # tier), so this end is all we see of the request: learn it
        now = self._now()
        if now < episode.last:  # an end a tier applied late, older than a visit seen since
            self._late = True
            return episode
        self._late = False
        episode.done_op = op
        episode.last = episode.seen = now
        episode.last_op = _SINCE_END  # the session's next operation is a new visit, its gap counted from now
        self._schedule(episode_id, episode, now)
        return episode

    def remove(self, key: BlockKey) -> None:
        found = self._blocks.pop(key, None)
        if found is None:
            return
        episode_id = found[0]
        episode = self._episodes[episode_id]
        if self._stale_first:
            episode.used.pop(key, None)
            self._left.pop(key, None)
        # out of its depth bucket; an emptied bucket goes at once, and its depth leaves the list when
        # it is the deepest (the last listed depth is always held: the victim's) or when the listed
        # depths outnumber the held ones by 2x + 16 (one pass, paid for by the removals that emptied
        # them): amortised O(1)
        by_depth, depth = episode.by_depth, max(found[1], 0)
        bucket = by_depth[depth]
        del bucket[key]
        if not bucket:
            del by_depth[depth]
            depths = episode.depths
            if depth == depths[-1]:  # the deepest (a victim): it and the unheld depths above the next held go
                depths.pop()
                while depths and depths[-1] not in by_depth:
                    depths.pop()
            elif len(depths) > 2 * len(by_depth) + 16:
                episode.depths = [listed for listed in depths if listed in by_depth]
        episode.blocks -= 1
        if episode.blocks == 0:
            if episode.bucket is not None:
                self._unlist(episode_id, episode)
            del self._episodes[episode_id]
        self._ghosts[key] = episode_id
        while len(self._ghosts) > len(self._blocks) + 16:
            self._ghosts.popitem(last=False)

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        self._full = True
        if self._left:
            return next(iter(self._left))  # type: ignore[no-any-return]
        episode = self._returns_victim() if self._returns else self._coldest_episode()
        if episode is None:
            return None
        return next(iter(episode.by_depth[episode.depths[-1]]))  # type: ignore[return-value]

    def victims(self, incoming: BlockKey | None, limit: int) -> list[BlockKey]:
        """The next ``limit`` victims in order, state unchanged (rhythm predictor; returns: the victim only).

        The order ``victim`` then ``remove`` would take: blocks left behind (``stale_first``),
        overdue episodes by deadline, then the rest by ``warm_order``, each deepest block first.
        The episode heaps are read in order without popping (``_in_order``) and each episode's
        depths deepest first, so this costs O(limit) plus O(log E) per episode entry passed
        (stale ones included). A ``limit`` above the blocks held (a tier asks for 256 after a guard
        veto) stops at the last block rather than walking the heaps' remaining entries.
        """
        first = self.victim(incoming)  # also drops stale tops of the episode heaps, as a victim choice does
        if first is None or self._returns:
            return [] if first is None else [first]
        limit = min(limit, len(self._blocks))
        now, episodes, left = self._now(), self._episodes, self._left
        out: list[BlockKey] = list(islice(left, limit))  # type: ignore[arg-type]
        if len(out) >= limit:
            return out
        listed: set[Hashable] = set()

        def take(order: Iterator[tuple[float, int, Hashable]], field: str, overdue: bool) -> bool:
            for value, _, episode_id in order:
                episode = episodes.get(episode_id)
                if (episode is None or not episode.blocks or getattr(episode, field) != value
                        or episode_id in listed):
                    continue
                if overdue and value >= now:
                    return False
                listed.add(episode_id)
                by_depth = episode.by_depth
                for depth in reversed(episode.depths):
                    for key in by_depth.get(depth, ()):
                        if key not in left:
                            out.append(key)  # type: ignore[arg-type]
                            if len(out) >= limit:
                                return True
            return False
        if not take(_in_order(self._by_deadline), "deadline", True):
            take(_in_order(self._by_return), "warm_key", False)
        return out

    def abandoned(self, key: BlockKey) -> bool:
        """A block its session left behind (``stale_first``), or one of a cold episode (rhythm:
        past its deadline): no head in use, whatever a tier's ``keep_prefixes`` would say of its
        depth and last use.

        The guard's idle limit is one for all sessions (``prefixes.GAP_FACTOR`` times the 90th
        percentile of return gaps); the episode's deadline is its own rhythm's. Without this the guard vetoed the cold
        episodes EpiCache gives up first and declined the new block instead: all 150 traces at
        once without request ends, 2 % of the working set, EpiCache in a guarded tier hit 0.542
        of prompt tokens, 0.561 unguarded, 0.567 with the guard deferring to cold episodes
        (bench/results 2026-12-07).
        """
        if key in self._left:
            return True
        found = self._blocks.get(key)
        if found is None or self._returns:
            return False
        return self._episodes[found[0]].deadline < self._now()

    def expected_return(self, tag: str) -> float | None:
        """When session ``tag`` (its blocks' ``BlockHint.tag``) is expected back: its last visit (the end of
        its last request, where the engine reports ends: ``request_done``) plus its learnt gap, on the
        policy's clock; None for a session it does not hold or an operations clock.

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

    def _episode_for(self, key: Hashable, hint: BlockHint | None, *, peek: bool = False) -> Hashable:
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
        ghost = self._ghosts.get(key) if peek else self._ghosts.pop(key, None)
        return ghost if ghost is not None else ("root", key)

    def _now(self) -> float:
        return self.clock() if self.clock is not None else float(self._clock)

    def _visit(self, episode_id: Hashable) -> _Episode:
        """Record an operation on the episode; a new visit updates its rhythm and deadline."""
        op = self._clock
        episode = self._episodes.get(episode_id)
        if episode is not None and op - episode.last_op <= 1:  # same visit: operations back to back
            episode.last_op = op
            if self._visit_window:  # (without, as late as the operation before it: ``_late`` stays)
                now = self._now()
                self._late = now < episode.last  # a kept use applied right after the session's own ops
                if now > episode.seen:
                    episode.seen = now
            return episode
        now = self._now()
        self._late = False
        if episode is not None:
            if now < episode.last:  # a use a tier kept and applied late, older than a visit seen
                self._late = True  # since (a store applied at once): part of a visit already counted
                return episode
            if now - episode.seen < self._visit_window and episode.last_op != _SINCE_END:
                episode.last_op = op  # the same visit, others' operations in between
                episode.seen = max(episode.seen, now)  # (a use applied late keeps its older time)
                return episode
            if self._stale_first:
                self._left_behind(episode)
        if episode is None:
            episode = self._episodes[episode_id] = _Episode(op, now, self._global_log_gap)
        elif self._returns:
            gap = now - episode.last
            self._model.observe(episode.klass, gap)
            episode.klass = gap_class(gap)
            episode.log_gap += self._alpha * (math.log2(max(gap, 1e-3)) - episode.log_gap)
            episode.last = episode.seen = now
            episode.last_op = op
        else:
            log_gap = math.log2(max(now - episode.last, 1e-3))
            episode.log_gap += self._alpha * (log_gap - episode.log_gap)
            if self._global_gaps < 100:
                self._global_gaps += 1
            self._global_log_gap += (log_gap - self._global_log_gap) / self._global_gaps
            episode.last = episode.seen = now
            episode.last_op = op
        if self._returns:
            episode.age_bin = 0
            if episode.bucket is not None:
                self._unlist(episode_id, episode)
                self._list(episode_id, episode)
            return episode
        self._schedule(episode_id, episode, now)
        return episode

    def _used(self, key: Hashable, episode: _Episode, depth: int, late: bool) -> None:
        """stale_first: the block was used in the episode's current visit (O(1)).

        ``late``: a use a tier kept and applied after the session's next visit began (a request
        end, a read from above): it was used in the visit before, which says nothing of the
        current one. It keeps its place (or, if already found left behind, comes back last).
        """
        used = episode.used
        if late:
            visit = episode.visits - 1
            if used.get(key, visit) <= visit:
                used[key] = visit
        else:
            used[key] = episode.visits
            used.move_to_end(key)
            if 0 <= depth < episode.min_depth:
                episode.min_depth = depth
        if self._left:
            self._left.pop(key, None)

    def _left_behind(self, episode: _Episode) -> None:
        """stale_first: a new visit begins; the blocks the visit that ended did not use are left behind.

        Agents re-send their whole context every request, so a block of the session's context
        that the previous request did not use, while it used blocks as deep or deeper, is on a
        branch the session left (a compacted or rewritten context): in the 150 kv-cache-tester
        traces 97 % of such blocks never come back (bench/results 2026-12-06, left behind). A block
        shallower than anything the visit used may have been served above us (the engine's
        device KV or vLLM's CPU tier hit the prompt's head) and is not judged; it leaves
        ``used`` until its next use, so each block is looked at once per use (amortised O(1)).
        """
        visit, floor, used, left = episode.visits, episode.min_depth, episode.used, self._left
        if floor == _NO_DEPTH:  # it used no block of known depth: nothing to judge by, it joins the next
            return
        blocks = self._blocks
        while used:
            key = next(iter(used))
            if used[key] >= visit:
                break
            del used[key]
            if blocks[key][1] >= floor:
                left[key] = None
        episode.visits = visit + 1
        episode.min_depth = _NO_DEPTH

    def _schedule(self, episode_id: Hashable, episode: _Episode, now: float) -> None:
        """The rhythm's deadline and warm order of an episode last seen ``now``, pushed on the heaps."""
        gap = 2.0 ** episode.log_gap
        episode.deadline = now + gap * self._patience
        order = self._warm_order
        episode.warm_key = -now if order == "recent" else -(now + gap) if order == "farthest" else now
        self._push_rhythm(episode_id, episode)

    def _push_rhythm(self, episode_id: Hashable, episode: _Episode) -> None:
        self._seq += 1
        heapq.heappush(self._by_deadline, (episode.deadline, self._seq, episode_id))
        heapq.heappush(self._by_return, (episode.warm_key, self._seq, episode_id))
        if len(self._by_deadline) > 2 * len(self._episodes) + 64:
            self._rebuild_episode_heaps()

    def _live_top(self, heap: list[tuple[float, int, Hashable]], field: str) -> _Episode | None:
        """The top episode of ``heap`` whose ``field`` still equals its entry (others are stale)."""
        episodes = self._episodes
        while heap:
            value, _, episode_id = heap[0]
            episode = episodes.get(episode_id)
            if episode is not None and episode.blocks and getattr(episode, field) == value:
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

    # -------------------------------------------------------------------- predictor = "returns"

    def _list(self, episode_id: Hashable, episode: _Episode) -> None:
        """List the episode under (its class, its age bin) and time its move to the next bin."""
        bucket = (episode.klass, episode.age_bin)
        self._buckets.setdefault(bucket, OrderedDict())[episode_id] = None
        episode.bucket = bucket
        self._victim_bucket = None
        if episode.age_bin < BINS:
            self._seq += 1
            episode.move_seq = self._seq
            heapq.heappush(self._moves, (episode.last + EDGES[episode.age_bin], self._seq, episode_id))
            if len(self._moves) > 2 * len(self._episodes) + 64:
                live = self._episodes
                self._moves = [m for m in self._moves if m[2] in live and live[m[2]].move_seq == m[1]]
                heapq.heapify(self._moves)

    def _unlist(self, episode_id: Hashable, episode: _Episode) -> None:
        assert episode.bucket is not None
        members = self._buckets[episode.bucket]
        del members[episode_id]
        if not members:
            del self._buckets[episode.bucket]
        episode.bucket = None
        episode.move_seq = 0
        self._victim_bucket = None

    def _age_episodes(self, now: float) -> None:
        """Move every episode whose age crossed its bin's upper edge into the bin it is in now."""
        moves, episodes = self._moves, self._episodes
        while moves and moves[0][0] <= now:
            _, seq, episode_id = heapq.heappop(moves)
            episode = episodes.get(episode_id)
            if episode is None or episode.move_seq != seq or episode.bucket is None:
                continue
            self._unlist(episode_id, episode)
            # at least one bin on: an age a rounding error below its edge must not loop here
            episode.age_bin = min(BINS, max(episode.age_bin + 1, age_bin(now - episode.last)))
            self._list(episode_id, episode)

    def _table(self) -> list[list[float]] | None:
        """The model's scores for the current horizon: the tier's turnover time x ``horizon``."""
        now = self._now()
        mark = self._rate_mark
        if mark is None:
            self._rate_mark = (now, self._inserts)
        elif self._inserts - mark[1] >= 1024 and now > mark[0]:
            rate = (self._inserts - mark[1]) / (now - mark[0])
            self._insert_rate = rate if self._insert_rate == 0.0 else 0.8 * self._insert_rate + 0.2 * rate
            self._rate_mark = (now, self._inserts)
        if self._insert_rate <= 0.0:
            return None
        table = self._model.table(self._horizon * len(self._blocks) / self._insert_rate)
        if table is not self._scores:
            self._scores = table
            self._victim_bucket = None
        return table

    _scores: list[list[float]] | None = None

    def _victim_target(self, table: list[list[float]]) -> tuple[int, int] | None:
        """The (class, age bin) of the episodes least likely to return within the horizon (oldest on ties)."""
        self._age_episodes(self._now())
        if self._victim_bucket is None and self._buckets:
            self._victim_bucket = min(self._buckets, key=lambda b: (table[b[0]][b[1]], -b[1]))
        return self._victim_bucket

    def _returns_victim(self) -> _Episode | None:
        table = self._table()
        if table is None:  # nothing learnt yet: the least recently visited episode goes
            self._age_episodes(self._now())
            oldest = max(self._buckets, key=lambda b: (b[1], -b[0]), default=None)
            return None if oldest is None else self._episodes[next(iter(self._buckets[oldest]))]
        target = self._victim_target(table)
        return None if target is None else self._episodes[next(iter(self._buckets[target]))]


def _in_order(heap: list[Any]) -> Iterator[Any]:
    """The entries of binary min-heap ``heap`` in ascending order, lazily and without changing it:
    a frontier heap of the entries whose parents were yielded (entries must be distinct: here
    each carries a unique sequence number)."""
    if not heap:
        return
    frontier = [(heap[0], 0)]
    while frontier:
        entry, i = heapq.heappop(frontier)
        yield entry
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))
