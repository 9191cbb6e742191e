"""Predictive staging: move a session's blocks up the tier stack before the session returns.

An agent between two turns is thinking or waiting for a tool while its KV sits in whichever
tier eviction left it (often a file tier or object storage). The :class:`Stager` uses that
wait: from each session's expected return time (a hint, ``TieredCache.stage``, or the eviction
policy's own estimate, ``ReturnEstimator``) it copies the session's blocks into the tiers
configured with ``stage = true`` above the tier that holds them, head of the prefix first (a
prompt hits only up to its first miss), so that they are in the fastest tier when the turn
arrives. What it staged and was not used by ``eta + grace_s`` (or ``grace_s`` after the session
last read a staged block: a session that is back keeps them for its visit) is taken back
(``Tier.discard``) and counted as waste. A take-back is decided when its job runs on the tier's
write pool, not when it was queued: a copy the engine read meanwhile is kept and counted used.

Rules it keeps:

- **Never a miss for a hit.** A staging store may only use free room or, for a hinted plan,
  evict a block that the tier's policy picks anyway *and* that stays in the cache below (a lower tier holds it),
  and never a block of a session expected back no later than the one being staged
  (``_evictable``), nor a block a get now under way asked for (``observe_get`` until
  ``observe_read_done``: a session that just arrived would otherwise lose its blocks to the
  next session's staging between its lookup and its read, and read them from the tier below).
  A staged copy is taken back only while a lower tier still holds the block,
  asked on the write pool just before the discard (``_take_back_now``).
- **Never in the engine's way.** Sessions are learned in ``observe_put`` / ``observe_get``,
  which do dictionary work under a lock that is never held across I/O or a tier's lock, and
  wake the stager only once a get's read is done (``observe_read_done``), never beside it. All
  reads and writes run on the tiers' own I/O pools, on at most ``thread_share`` of a source
  tier's ``io_threads`` (at least one) and at ``rate_bytes_s`` on average, so the engine's loads
  from a tier with two or more I/O threads always find a free one.
- **Per tier switch.** Only up tiers with ``stage = true`` receive staged blocks; with none the
  stager's thread sleeps until woken.

Session identity is ``BlockHint.tag`` as the adapter sets it (the vLLM adapter: the hex of the
prompt's first chunk hash; see docs/ARCHITECTURE.md, "Predictive staging"). The stager keeps
what it learned in memory only: after a restart a session is known again from its next puts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal, Protocol, runtime_checkable

from lifeboatcache_core.abc import BlockHint, EvictionPolicy, KVLayout
from lifeboatcache_core.config import StagingConfig, TierConfig
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.stats import StoreOutcome
from lifeboatcache_core.threads import name_os_thread

log = logging.getLogger("lifeboatcache")

#: timed retries of a block a tier had no room for, before only a change of room retries it
#: (poll_s, then twice, then four times that: a mechanism's bound, not a tuned number)
RETRIES = 3

#: blocks the stager remembers at most, over all sessions (the least recently active sessions are
#: forgotten first): about 260 bytes each with its hint, so at most ~65 MB. It learns every stored
#: block whether or not a tier stages yet (a tier switched to ``stage = true`` live then stages the
#: sessions it already saw), and a block stays known after every tier dropped it; without a bound
#: a long-running server's stager would grow with every block it ever stored.
MAX_BLOCKS = 250_000

#: where ``Stager._next_block`` took a plan's block from: its refused blocks, its cursor, or its
#: stocking cursor (``_stock``); ``_put_back`` returns it there
Taken = Literal["refused", "cursor", "stock"]

#: counters the stager adds to the cache's telemetry (``metrics.CacheStats``)
COUNTERS = ("staged_bytes", "staged_used_bytes", "staged_wasted_bytes", "staged_late_arrivals")


@runtime_checkable
class ReturnEstimator(Protocol):
    """An eviction policy that predicts when a session (``BlockHint.tag``) comes back.

    ``expected_return`` answers in ``time.monotonic`` seconds (the clock a tier's policy uses),
    or None when it has no estimate. It is called under the tier's lock, like every policy call.
    """

    def expected_return(self, tag: str) -> float | None: ...


class StagingTier(Protocol):
    """What the stager uses of a tier (``lifeboatcache_core.tier.Tier`` provides it)."""

    name: str
    up: bool
    cfg: TierConfig
    capacity: int
    policy: EvictionPolicy
    lock: threading.Lock
    read_pool: Executor
    write_pool: Executor

    def presence(self, key: BlockKey) -> bool | None: ...

    def fetch(self, key: BlockKey, dest: memoryview, *, use: bool = True) -> Any: ...

    def store(self, key: BlockKey, raw: memoryview, layout: KVLayout | None, hint: BlockHint | None, *,
              evictable: Callable[[BlockKey], bool | None] | None = None) -> StoreOutcome: ...

    def discard(self, keys: Sequence[BlockKey]) -> int: ...

    def expect(self, keys: Sequence[BlockKey]) -> None: ...

    def has_room(self, raw_len: int) -> bool: ...


@dataclass
class _Block:
    nbytes: int
    layout: KVLayout | None
    hint: BlockHint


@dataclass
class _Session:
    blocks: dict[BlockKey, _Block] = field(default_factory=dict)
    #: a hint (``stage``) overrides the policy's estimate until the session is next seen
    hinted: bool = False
    #: ``release`` was called: no staging from the policy's estimate until the session is next seen
    released: bool = False
    #: when it last arrived (clock seconds): a policy estimate not past it is the visit now under way
    arrived_at: float = float("-inf")
    #: the last block it stored: the end of its latest prompt, whose chain (``BlockHint.parent``) is
    #: what its next turn extends and so what a plan stages
    tip: BlockKey | None = None


@dataclass
class _Plan:
    """Staging of one session for one expected return."""

    eta: float
    hinted: bool
    order: list[BlockKey]
    cursor: int = 0
    #: how far the stocking of lower stage tiers went before the plan's start (``Stager._stock``)
    stocked: int = 0
    inflight: int = 0
    #: its start (``Stager._latest_starts``) came: it stays due until it ends. A start recomputed
    #: from the bytes left moves later with every block handed out, so judged afresh it paced the
    #: plan to end just at its return, using up the margin its start was given
    started: bool = False
    #: ``order`` as a set: which blocks this return is expected to read
    wanted: frozenset[BlockKey] = frozenset()
    #: blocks a target tier had no room for (every victim was protected), head first: tried again
    #: once room may have been made (``Stager._room`` moved past ``refused_at``)
    refused: list[BlockKey] = field(default_factory=list)
    refused_at: int = -1
    #: a refusal can also be brief (the engine reading the victim, another store's reservation):
    #: the refused are tried again at ``retry_at`` (``time.monotonic``; inf: none due), in at most
    #: ``retries`` more rounds, each wait twice the last; a change of room resets it
    retry_at: float = float("inf")
    retries: int = 0
    #: bytes of ``order[i:]`` as the stager knew them when it planned (``tail[len(order)]`` is 0):
    #: what is left from the cursor, read per block handed out instead of summed over the plan
    tail: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.wanted = frozenset(self.order)


@dataclass
class _Staged:
    session: str
    nbytes: int
    deadline: float
    tiers: list[str] = field(default_factory=list)
    #: expired or released: a take-back job is queued on the tiers' write pools. The record stays
    #: until that job runs, so an engine read of the block before then claims it (``observe_get``:
    #: used, not taken back), and the job discards only what is still unclaimed
    taking_back: bool = False


class Stager:
    """Stages sessions' blocks into ``stage = true`` tiers before their expected return.

    ``tiers`` returns the up tiers, top first (``TieredCache.tiers``); ``count`` adds to the
    cache's counters (``CacheStats.add``). ``clock`` (``time.monotonic``) measures return
    times; the rate limit always uses ``time.monotonic``.
    """

    def __init__(self, tiers: Callable[[], Sequence[StagingTier]], count: Callable[..., None], *,
                 rate_bytes_s: float = 200e6, thread_share: float = 0.5, lead_s: float = 0.5,
                 grace_s: float = 10.0, poll_s: float = 0.25, max_sessions: int = 100_000,
                 max_blocks: int = MAX_BLOCKS, enabled: bool = True, from_policy: bool = True) -> None:
        self._tiers = tiers
        self._count = count
        #: off: nothing new is planned or staged (copies staged before still expire and are taken back)
        self.enabled = enabled
        #: plan from the eviction policy's ``ReturnEstimator`` too, not only from hints
        self.from_policy = from_policy
        #: average bytes per second the stager reads from lower tiers (its share of their bandwidth)
        self.rate_bytes_s = rate_bytes_s
        #: share of a source tier's I/O threads staging may hold at once (at least one): a remote
        #: store with a high latency and many threads stages that many blocks in parallel
        self.thread_share = thread_share
        #: start staging at least this long before the expected return (more for a larger session,
        #: or one whose blocks sit in a slow tier)
        self.lead_s = lead_s
        #: staged blocks not used by ``eta + grace_s`` are taken back and counted as waste
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.max_sessions = max_sessions
        self.max_blocks = max_blocks
        self.clock: Callable[[], float] = time.monotonic
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._session_of: dict[BlockKey, str] = {}
        self._known_blocks = 0  # over every session's ``blocks``
        self._plans: dict[str, _Plan] = {}
        self._staged: dict[BlockKey, _Staged] = {}
        self._queued: set[BlockKey] = set()
        #: blocks gets now under way asked for (a count per get): never a staging store's victim
        self._being_read: dict[BlockKey, int] = {}
        self._inflight = 0
        self._reading: dict[str, int] = {}  # source tier -> blocks being staged from it
        #: source tier -> recent seconds per staged block over its staging threads (EWMA): the lead a
        #: session needs is its block count times this, so a slow remote store starts earlier
        self._block_s: dict[str, float] = {}
        self._budget = 0.0
        self._budget_at = time.monotonic()
        #: moves on whenever protected room may have become free (a plan ended, a copy was taken
        #: back): a plan's refused blocks are tried again then, not in a loop of futile reads
        self._room = 0
        self._estimated_at = float("-inf")
        #: the earliest start (``_latest_starts``) of a plan not begun, as the last pass saw it: the
        #: stager sleeps no longer than until then (a start missed by a timed pass's ``poll_s`` is
        #: lead time lost)
        self._next_start = float("inf")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._ticket = 0
        self._idle_ticket = 0
        self._thread = threading.Thread(target=self._loop, name="lifeboat-stage", daemon=True)

    def configure(self, cfg: StagingConfig) -> None:
        """Take the ``[staging]`` settings (at start and on a live config change).

        Switching off drops every plan at once, so nothing more is staged; what was staged
        already stays counted, is used or expires, and is taken back as usual.
        """
        with self._lock:
            self.enabled = cfg.enabled
            self.from_policy = cfg.from_policy
            self.rate_bytes_s = cfg.rate_bytes_s
            self.lead_s = cfg.lead_s
            self.grace_s = cfg.grace_s
            self.thread_share = cfg.thread_share
            if not cfg.enabled:
                self._plans.clear()
            elif not cfg.from_policy:
                for tag in [t for t, p in self._plans.items() if not p.hinted]:
                    del self._plans[tag]
        self.wake()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop planning; blocks already submitted finish on the tiers' pools."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    # ------------------------------------------------------------------ engine-facing (no I/O)

    def observe_put(self, keys: Sequence[BlockKey], sizes: Sequence[int], layout: KVLayout | None,
                    hints: Sequence[BlockHint | None]) -> None:
        """Learn which session each stored block belongs to (its hint's tag). Memory only, at most
        ``max_blocks`` blocks: past it the least recently active sessions are forgotten."""
        with self._lock:
            ends: dict[str, tuple[int, BlockKey]] = {}  # session -> its deepest new block of the batch
            for key, nbytes, hint in zip(keys, sizes, hints, strict=True):
                if hint is None or hint.tag is None:
                    continue
                session = self._session(hint.tag)
                session.released = False
                if key not in session.blocks:
                    session.blocks[key] = _Block(nbytes, layout, hint)
                    self._session_of[key] = hint.tag
                    self._known_blocks += 1
                    depth = -1 if hint.depth is None else hint.depth
                    if depth >= ends.get(hint.tag, (-1, key))[0]:  # without depths: the last one
                        ends[hint.tag] = (depth, key)
            for tag, (_, key) in ends.items():
                session = self._sessions.get(tag)  # None: forgotten by a later tag of this batch
                if session is not None and not self._stored_late(session, key):
                    session.tip = key
            # the session just stored to is the most recent: it is forgotten last, and kept even
            # when it alone holds more than max_blocks
            while self._known_blocks > self.max_blocks and len(self._sessions) > 1:
                self._forget_oldest()

    def observe_get(self, keys: Sequence[BlockKey]) -> bool:
        """The engine asks for ``keys``: count staged blocks as used, and arrivals as on time or late.

        An arrival is late when a session that had a staging plan asks for a block that is in a
        lower tier but not yet in the top staging tier. Reads only in-memory indexes. True: the
        keys are protected from staging stores until the caller's read of them is done, and the
        caller must then call ``observe_read_done(keys)`` (False, with nothing staged and no
        plan, costs nothing and needs no call).
        """
        if not self._staged and not self._plans:
            return False
        tiers = list(self._tiers())
        top = next((t for t in tiers if t.cfg.stage), None)
        now = self.clock()
        used = late = 0
        with self._lock:
            arrived: set[str] = set()
            behind: set[str] = set()
            for key in keys:
                self._being_read[key] = self._being_read.get(key, 0) + 1
                record = self._staged.pop(key, None)  # also one being taken back: the read claims it
                if record is not None:
                    used += record.nbytes
                    visiting = self._sessions.get(record.session)
                    if visiting is not None:  # its other staged copies are kept for this visit
                        visiting.arrived_at = now
                tag = self._session_of.get(key)
                if tag is None or tag not in self._plans:
                    continue
                arrived.add(tag)
                if top is not None and top.presence(key) is not True and _held_below(tiers, key, top):
                    behind.add(tag)
            for tag in arrived:
                del self._plans[tag]
                self._room += 1
                session = self._sessions.get(tag)
                if session is not None:
                    session.hinted, session.released, session.arrived_at = False, False, now
                if tag in behind:
                    late += 1
        if used or late:
            self._count(staged_used_bytes=used, staged_late_arrivals=late)
        return True  # the room ended plans free is for ``observe_read_done`` to announce, after the read

    def observe_read_done(self, keys: Sequence[BlockKey]) -> None:
        """The get that ``observe_get`` protected ``keys`` for is done: they may be victims again.

        Room a staging store was refused for may be free now (``_room`` moves on: refused
        blocks are tried again), also the room of plans the get's arrival ended. Only then, and
        only if a plan has refused blocks, is the stager woken: a pass woken at the lookup ran
        beside the read and took the GIL from it (bench staging: 104 of 108 loads, 44 against
        23 us per block).
        """
        with self._lock:
            for key in keys:
                left = self._being_read.get(key, 0) - 1
                if left > 0:
                    self._being_read[key] = left
                else:
                    self._being_read.pop(key, None)
            self._room += 1
            refused = any(plan.refused for plan in self._plans.values())
        if refused:
            self._wake.set()

    def observe_removed(self, tier: StagingTier, keys: Sequence[BlockKey]) -> None:
        """``tier`` no longer holds ``keys`` (``Tier.on_removed``, on the thread that removed them).

        A plan's cursor passes a block a stage tier held already (nothing to stage); when that
        tier evicts it before the session is back (an engine's store, another plan's staging),
        the plan must look at it again, and at once: before, nothing looked at it again, and the
        session arrived to read it from the slowest tier (bench staging, DRAM of two sessions).
        Only the session that stored a block is asked (``_session_of``):
        one dictionary lookup per removed block, whatever the number of plans.
        """
        if not tier.cfg.stage or not self._plans:
            return
        rewound = False
        with self._lock:
            for key in keys:
                plan = self._plans.get(self._session_of.get(key, ""))
                if plan is not None and key not in self._queued and _rewind(plan, key):
                    rewound = True
        if rewound:
            self._wake.set()

    # ------------------------------------------------------------------ hints

    def stage(self, session: str, eta_s: float) -> int:
        """Expect ``session`` back in ``eta_s`` seconds; returns how many blocks its plan covers.

        The plan is its latest prompt (``_new_plan``), which may include a shared prefix another
        session stored; blocks already in the top tier are counted and skipped.

        0 when the session is unknown, or staging is switched off (``[staging] enabled = false``).
        """
        if eta_s < 0:
            raise ValueError(f"eta_s {eta_s} must be >= 0 (seconds from now)")
        if not self.enabled:
            return 0
        with self._lock:
            known = self._sessions.get(session)
            if known is None:
                return 0
            known.hinted, known.released = True, False
            self._sessions.move_to_end(session)
            eta = self.clock() + eta_s
            plan = self._plans[session] = self._new_plan(known, eta, hinted=True)
            for key in plan.order:  # copies of it being taken back stay: the job skips them
                record = self._staged.get(key)
                if record is not None:
                    record.taking_back = False
                    record.deadline = max(record.deadline, eta + max(self.grace_s, self.lead_s))
            count = len(plan.order)
        self._wake.set()
        return count

    def release(self, session: str) -> int:
        """``session`` is not coming back soon: stop staging it and take back what was staged unused.

        Returns the bytes of staged blocks to be taken back; each is counted as waste when it is
        (a read of it by the engine before then counts it as used instead). The policy's estimate
        does not stage it again until the session is next seen.
        """
        with self._lock:
            known = self._sessions.get(session)
            if known is not None:
                known.hinted, known.released = False, True
            if self._plans.pop(session, None) is not None:
                self._room += 1
            records = {k: r for k, r in self._staged.items() if r.session == session and not r.taking_back}
            for record in records.values():
                record.taking_back = True
        wasted = self._take_back(records)
        self._wake.set()
        return wasted

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until a full pass found nothing to do now and nothing in flight (tests, benchmarks)."""
        with self._idle:
            self._ticket += 1
            ticket = self._ticket
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: self._idle_ticket >= ticket, timeout)

    def wake(self) -> None:
        """Run a pass now, asking the policies again (the clock moved, a tier was switched to ``stage = true``)."""
        self._estimated_at = float("-inf")
        self._wake.set()

    def sessions(self) -> dict[str, dict[str, Any]]:
        """Planned sessions: expected return (clock seconds), blocks, blocks still to look at."""
        with self._lock:
            return {tag: {"eta": plan.eta, "hinted": plan.hinted, "blocks": len(plan.order),
                          "pending": len(plan.order) - plan.cursor + plan.inflight}
                    for tag, plan in self._plans.items()}

    # ------------------------------------------------------------------ the stager's thread

    def _loop(self) -> None:
        name_os_thread("lifeboat-stage")
        while not self._stop.is_set():
            with self._idle:
                ticket = self._ticket
            try:
                idle, wait = self._pass()
            except Exception:  # a bug must not stop staging for good, nor reach the engine
                log.exception("stager: pass failed")
                idle, wait = True, self.poll_s
            if idle:
                with self._idle:
                    self._idle_ticket = max(self._idle_ticket, ticket)
                    self._idle.notify_all()
            self._wake.wait(wait)
            self._wake.clear()

    def _pass(self) -> tuple[bool, float]:
        """One round: estimates, expiry, then submit due blocks. Returns (idle, seconds to sleep)."""
        now = self.clock()
        tiers = list(self._tiers())
        if not self.enabled or not any(t.cfg.stage for t in tiers):
            self._expire(now)  # copies staged before the switch still expire and are taken back
            with self._lock:
                return self._inflight == 0, self.poll_s
        if self.from_policy and time.monotonic() - self._estimated_at >= self.poll_s:
            self._estimated_at = time.monotonic()
            self._refresh_estimates(tiers, now)
        self._expire(now)
        wait = self.poll_s
        due = False
        expected: dict[str, list[BlockKey]] = {}  # stage tier -> plan blocks it holds already
        while True:
            with self._lock:
                item = self._next_block(tiers, now, expected)
                if item is None:
                    break
                tag, key, block, source, targets, plan, taken = item
                if self._reading.get(source.name, 0) >= max(1, int(source.cfg.io_threads * self.thread_share)):
                    _put_back(plan, key, taken)  # its tier's staging threads are busy: a finished block wakes us
                    break
                short = self._spend(block.nbytes)
                if short > 0:
                    _put_back(plan, key, taken)  # not now: the rate limit; look at this block again
                    due = True
                    wait = min(wait, short)
                    break
                self._inflight += 1
                self._reading[source.name] = self._reading.get(source.name, 0) + 1
                plan.inflight += 1
                self._queued.add(key)
            self._submit(tag, key, block, source, targets, plan, stocking=taken == "stock")
        for tier in tiers:  # outside the stager's lock: a tier's lock is taken before it (``_evictable``)
            if tier.name in expected:
                tier.expect(expected[tier.name])
        with self._lock:
            wait = min(wait, max(0.0, self._next_start - now))
            mono = time.monotonic()
            for plan in self._plans.values():  # a timed retry still to come: not idle yet
                if plan.refused and plan.retry_at < float("inf"):
                    due = True
                    wait = min(wait, max(0.0, plan.retry_at - mono))
            return self._inflight == 0 and not due, wait

    def _spend(self, nbytes: int) -> float:
        """Token bucket (caller holds ``_lock``): 0 when ``nbytes`` may go now, else seconds to wait."""
        now = time.monotonic()
        burst = max(self.rate_bytes_s * 0.05, float(nbytes))
        self._budget = min(burst, self._budget + (now - self._budget_at) * self.rate_bytes_s)
        self._budget_at = now
        if self._budget < 0:
            return -self._budget / self.rate_bytes_s
        self._budget -= nbytes
        return 0.0

    def _next_block(self, tiers: list[StagingTier], now: float,
                    expected: dict[str, list[BlockKey]]) -> tuple[Any, ...] | None:
        """The next block worth staging now, earliest expected session first (caller holds ``_lock``,
        which the engine-facing ``observe_*`` calls take too: no pass over a plan's blocks here).

        A block of a hinted plan due now that a stage tier holds already, with no stage tier above
        it, is added to ``expected`` under that tier's name, for ``Tier.expect``: it must last until
        its session arrives as a staged copy would (bench staging, DRAM of two sessions: sessions
        found such blocks evicted by the stores between the plan's start and their arrival, and
        read them from S3). Not for a plan from the policy's estimate: keeping its blocks would
        displace others, which such a plan may not (``_evictable``).

        A hinted plan not started yet stocks the lower stage tiers it fits in (``_stock_windows``)
        meanwhile: its blocks go there, not into the top tier, so that its start reads them from
        a near tier, not from the slowest.
        """
        plans = sorted(((tag, plan) for tag, plan in self._plans.items()
                        if tag in self._sessions and plan.eta + self.grace_s >= now), key=lambda item: item[1].eta)
        self._next_start = float("inf")
        ordered = [plan for _, plan in plans]
        for (tag, plan), start, stock in zip(plans, self._latest_starts(ordered), self._stock_windows(tiers, ordered),
                                             strict=True):
            if now < start and not plan.started:
                self._next_start = min(self._next_start, start)
                if stock:
                    item = self._stock(tiers, tag, plan, stock, expected)
                    if item is not None:
                        return item
                continue
            plan.started = True
            if plan.refused and (plan.refused_at != self._room or time.monotonic() >= plan.retry_at):
                if plan.refused_at == self._room and plan.retry_at < float("inf"):  # a timed round begins
                    plan.retries -= 1
                    plan.retry_at = float("inf")
                # head first: the refused come before the cursor
                for key in [k for k in plan.refused if k not in self._queued]:  # a queued one is still refusing
                    plan.refused.remove(key)
                    block = self._block(key)
                    route = _route(tiers, key, expected if plan.hinted else {}) if block is not None else None
                    if route is not None:
                        return tag, key, block, route[0], route[1], plan, "refused"
            while (found := self._advance(plan, stocking=False)) is not None:
                key, block = found
                route = _route(tiers, key, expected if plan.hinted else {})
                if route is not None:
                    return tag, key, block, route[0], route[1], plan, "cursor"
        return None

    def _advance(self, plan: _Plan, *, stocking: bool) -> tuple[BlockKey, _Block] | None:
        """The next block at ``plan``'s cursor (``stocking``: its stocking cursor) that is not being
        staged now, the cursor moved past it; None: the cursor is at the end (caller holds ``_lock``)."""
        while (at := plan.stocked if stocking else plan.cursor) < len(plan.order):
            key = plan.order[at]
            if stocking:
                plan.stocked = at + 1
            else:
                plan.cursor = at + 1
            block = self._block(key)
            if block is not None and key not in self._queued:
                return key, block
        return None

    def _stock(self, tiers: list[StagingTier], tag: str, plan: _Plan, stock: frozenset[str],
               expected: dict[str, list[BlockKey]]) -> tuple[Any, ...] | None:
        """The next block of ``plan``, not started, to copy into the lower stage tiers named in
        ``stock`` (caller holds ``_lock``); None: none left. A block one of them holds already is
        added to ``expected`` under its name instead (``Tier.expect``: the engine's stores until the
        start would otherwise evict it first, the oldest there).

        Its start is its top tier's lead before the return, from the slowest source's speed; before,
        that lead was all a plan had, also for blocks that had left the tiers below the top long
        before (bench staging, traces 31-40: a session hinted 14 s ahead began 0.8 s before its
        return, its blocks had left the file tier 6 s before, and it read 38 of them from S3).
        """
        while (found := self._advance(plan, stocking=True)) is not None:
            key, block = found
            route = _route(tiers, key, {})
            if route is None:
                continue
            source, targets = route
            into = [t for t in targets if t.name in stock]
            if into:
                return tag, key, block, source, into, plan, "stock"
            if source.name in stock:
                expected.setdefault(source.name, []).append(key)
        return None

    def _stock_windows(self, tiers: list[StagingTier], plans: list[_Plan]) -> list[frozenset[str]]:
        """For each of ``plans`` (earliest return first): the stage tiers below the top one that its
        hinted blocks may be stocked into before its start (caller holds ``_lock``).

        A tier stocks the earliest returns that fit in half its capacity, counting every plan
        before them: the other half takes the engine's own stores until then, which would
        otherwise evict the stocked blocks before their return. Plans from the policy's estimate
        are not stocked (they take free room only, ``_evictable``) and take no room here.
        """
        lower = [t for t in tiers if t.cfg.stage][1:]
        if not lower:
            return [frozenset()] * len(plans)
        room = {t.name: t.capacity // 2 for t in lower}
        windows = []
        for plan in plans:
            if not plan.hinted:
                windows.append(frozenset())
                continue
            for name in room:
                room[name] -= plan.tail[0]
            windows.append(frozenset(name for name, left in room.items() if left >= 0))
        return windows

    def _latest_starts(self, plans: list[_Plan]) -> list[float]:
        """When each of ``plans`` (earliest return first) must begin staging (caller holds ``_lock``).

        A plan alone needs ``max(2 * bytes left / rate_bytes_s, 2 * blocks left * the
        slowest source's recent seconds per block)``, and at least ``lead_s`` before its return.
        The stager works on plans earliest return first, so a plan must also be done when the
        next one has to begin: the starts are laid out backwards from the last return (bench
        staging, DRAM of two sessions: sessions back within a second of each other were still
        being staged from S3 when the first of them arrived, each having started only its own
        lead before its return).
        """
        block_s = max(self._block_s.values(), default=0.0)
        starts = [0.0] * len(plans)
        begin = float("inf")  # when the plan after this one must begin: this one must be done by then
        for i in range(len(plans) - 1, -1, -1):
            plan = plans[i]
            need, left = plan.tail[plan.cursor], len(plan.order) - plan.cursor
            begin = min(begin, plan.eta) - max(2.0 * need / self.rate_bytes_s, 2.0 * left * block_s)
            starts[i] = min(begin, plan.eta - self.lead_s)
        return starts

    def _submit(self, tag: str, key: BlockKey, block: _Block, source: StagingTier,
                targets: list[StagingTier], plan: _Plan, *, stocking: bool = False) -> None:
        """Read on the source tier's read pool, then store on each target's write pool.

        A plan from the policy's estimate takes free room only (``_evictable``), so its block is
        not read at all where no target has the room now: the read would only be thrown away,
        and on a remote tier it takes a request and bandwidth from the engine's own loads (on
        ``bench staging --estimate``, DRAM of two sessions, every such read was).

        ``stocking`` (``_stock``): a target without room for the block drops it (the plan's start
        looks at it again).
        """
        def finish(submitted: float | None) -> None:
            self._finished(key, plan, source, submitted, stocked=stocking)

        if not plan.hinted:
            targets = [t for t in targets if t.has_room(block.nbytes)]
            if not targets:
                finish(None)
                return
        def stores(data: bytearray) -> None:
            remaining = [len(targets)]

            def store(target: StagingTier) -> None:
                try:
                    if target.presence(key) is True:
                        return
                    if target.store(key, memoryview(data), block.layout, block.hint,
                                    evictable=lambda victim: self._evictable(victim, target, tag, plan)):
                        self._record(tag, key, block.nbytes, target.name, plan.eta)
                    elif (plan.hinted and not stocking and target is targets[0] and target.up
                          and target.presence(key) is not True):
                        # tried again only for the top target: a lower one's room is a fallback,
                        # and a retry that finds the block in the top tier has nothing to do. A
                        # policy's estimate is not worth the room: dropped
                        self._refused(key, plan)
                finally:
                    remaining[0] -= 1
                    if not remaining[0]:
                        finish(submitted)
            for target in targets:
                try:
                    target.write_pool.submit(store, target)
                except RuntimeError:  # closing
                    remaining[0] -= 1
                    if not remaining[0]:
                        finish(submitted)

        submitted = time.monotonic()

        def read() -> None:
            data = bytearray(block.nbytes)
            try:
                found = source.fetch(key, memoryview(data), use=False) is not None
            except Exception:
                log.exception("stager: reading %s from tier %s failed", key.hex[:16], source.name)
                found = False
            if found:
                stores(data)
            else:
                finish(submitted)
        try:
            source.read_pool.submit(read)
        except RuntimeError:
            finish(submitted)

    def _finished(self, key: BlockKey, plan: _Plan, source: StagingTier, submitted: float | None, *,
                  stocked: bool = False) -> None:
        """A block's staging is over; ``submitted``: when its read was queued (None: it never was).

        A block ``stocked`` into the tiers below the top (``_stock``): a started plan whose cursor
        passed it meanwhile (as queued: its plan began, or a new hint replaced it) is rewound to it,
        or the block stayed below the top tier (bench staging: four or five late arrivals a run,
        where there were none before stocking).
        """
        with self._lock:
            if stocked:
                for started in self._plans.values():
                    if started.started:
                        _rewind(started, key)
            self._inflight -= 1
            self._reading[source.name] -= 1
            if submitted is not None:
                seconds = (time.monotonic() - submitted) / max(1, int(source.cfg.io_threads * self.thread_share))
                old = self._block_s.get(source.name)
                self._block_s[source.name] = seconds if old is None else 0.8 * old + 0.2 * seconds
            plan.inflight -= 1
            self._queued.discard(key)
        self._wake.set()

    def _refused(self, key: BlockKey, plan: _Plan) -> None:
        """The top target had no room for ``key`` now: keep it in the plan for when room may be free.

        Staging only takes room the policy gives up and no earlier return needs; the room that
        a session expected back sooner holds becomes free when that session arrives or its plan
        ends, so a block refused before then is staged after, if its own session is not back yet
        (before, it was dropped from the plan, and its session arrived to find it below: late).
        A refusal can also pass by itself (the engine was reading the victim, another staging
        store held a reservation), so up to ``RETRIES`` timed rounds retry the refused too.
        Hinted plans only: retrying for a policy's estimate staged twice the bytes on ``bench
        staging --estimate`` and evicted sessions that did come back (top share 0.33 vs 0.49).
        """
        with self._lock:
            if key not in plan.refused:
                plan.refused.append(key)
                plan.refused.sort(key=plan.order.index)
            if plan.refused_at != self._room:  # room changed since the last refusal: retries anew
                plan.refused_at, plan.retries, plan.retry_at = self._room, RETRIES, float("inf")
            if plan.retry_at == float("inf") and plan.retries > 0:
                plan.retry_at = time.monotonic() + self.poll_s * 2 ** (RETRIES - plan.retries)

    def _record(self, tag: str, key: BlockKey, nbytes: int, tier: str, eta: float) -> None:
        with self._lock:
            record = self._staged.get(key)
            first = record is None
            if record is None:
                record = self._staged[key] = _Staged(tag, nbytes, eta + max(self.grace_s, self.lead_s))
            elif record.taking_back:  # staged again for a new return: wanted after all
                record.taking_back = False
                record.deadline = max(record.deadline, eta + max(self.grace_s, self.lead_s))
            if tier not in record.tiers:
                record.tiers.append(tier)
        if first:
            self._count(staged_bytes=nbytes)

    # ------------------------------------------------------------------ policy decisions

    def _evictable(self, victim: BlockKey, tier: StagingTier, tag: str, plan: _Plan) -> bool | None:
        """May a staging store into ``tier`` for ``plan`` evict ``victim`` (the policy's pick)? Called
        under the tier's lock. None: the stager knows of no return of the victim's session (no
        plan), and leaves the victim to the tier's prefix guard (``Tier._reserve``); True and
        False overrule the guard, which knows no return times: it kept the heads of sessions due
        back later from the deep blocks of one due back within a second (bench staging, file
        tier: such blocks stayed in S3 only, and their session read them from there).

        Only for a hinted plan: a policy's own estimate misses by about as much as staging leads
        a return, so a plan from it takes free room only (displacing blocks for it cost the top
        tier 6-12 points of returning sessions' blocks on ``bench staging --estimate``). Only when
        a lower tier still holds the victim (evicting it costs a slower hit, never a miss) and its
        session is not expected back before the one being staged (nor is it a block that session's
        own return will read, or a block staged for an earlier return). A block of an earlier
        prompt of the same session that branched off its latest one is not expected back, like
        any other block the policy picks.
        """
        if not plan.hinted or not _held_below(self._tiers(), victim, tier):
            return False
        eta = plan.eta
        with self._lock:
            if victim in self._being_read:  # a get is about to read it here: it would read it below
                return False
            owner = self._session_of.get(victim)
            if owner is None:
                return None
            plan = self._plans.get(owner)
            if owner == tag and (plan is None or victim in plan.wanted):
                return False
            if owner != tag and plan is not None and plan.eta <= eta and victim in plan.wanted:
                return False
            staged = self._staged.get(victim)
            if staged is not None and not staged.taking_back and staged.deadline <= eta + self.grace_s:
                return False
            return True if plan is not None else None

    # ------------------------------------------------------------------ estimates, expiry

    def _refresh_estimates(self, tiers: list[StagingTier], now: float) -> None:
        """Plan the sessions the policies expect back (hinted and released sessions keep their state)."""
        with self._lock:
            tags = [tag for tag, s in self._sessions.items() if not s.hinted and not s.released]
        if not tags:
            return
        estimates: dict[str, float] = {}
        for tier in tiers:
            policy = tier.policy
            if not isinstance(policy, ReturnEstimator):
                continue
            todo = [t for t in tags if t not in estimates]
            for start in range(0, len(todo), 256):  # short holds of the tier's lock
                with tier.lock:
                    for tag in todo[start:start + 256]:
                        eta = policy.expected_return(tag)
                        if eta is not None:
                            estimates[tag] = eta
        with self._lock:
            for tag in tags:
                session = self._sessions.get(tag)
                if session is None or session.hinted or session.released:
                    continue
                eta = estimates.get(tag)
                plan = self._plans.get(tag)
                if eta is not None and eta <= session.arrived_at + self.lead_s:
                    continue  # the policy has not seen the visit that just began yet
                if eta is None or eta + self.grace_s < now:
                    if plan is not None and not plan.hinted:
                        del self._plans[tag]
                elif plan is None or abs(plan.eta - eta) > self.lead_s:
                    self._plans[tag] = self._new_plan(session, eta, hinted=False)

    def _expire(self, now: float) -> None:
        """Take back staged blocks whose session did not use them by their deadline.

        A session that came back (``observe_get`` read one of its staged blocks, or it had a plan)
        keeps its other staged copies until ``grace_s`` after that arrival: its visit is under
        way, and the next requests of the turn may ask for them.
        """
        with self._lock:
            records = {}
            for key, record in self._staged.items():
                if record.taking_back:
                    continue
                session = self._sessions.get(record.session)
                visit = session.arrived_at + self.grace_s if session is not None else float("-inf")
                if max(record.deadline, visit) <= now:
                    record.taking_back = True
                    records[key] = record
            for tag in [t for t, p in self._plans.items() if p.eta + self.grace_s < now and not p.inflight]:
                del self._plans[tag]
                self._room += 1
                session = self._sessions.get(tag)
                if session is not None:
                    session.hinted = False  # the hint is spent: the policy's estimate applies again
        self._take_back(records)

    def _take_back(self, records: dict[BlockKey, _Staged]) -> int:
        """Queue the take-back of ``records`` (marked ``taking_back``) on each tier's write pool.

        Nothing is decided here: whether a copy is still unclaimed, and whether a lower tier
        still holds the block, are asked when the job runs (``_take_back_now``), not when it was
        queued, because the engine may read the copy and a lower tier may evict the block in
        between. Returns the bytes queued.
        """
        if not records:
            return 0
        by_tier: dict[str, list[BlockKey]] = {}
        for key, record in records.items():
            for name in record.tiers:
                by_tier.setdefault(name, []).append(key)
        for tier in list(self._tiers()):
            keys = by_tier.pop(tier.name, None)
            if not keys:
                continue
            with self._lock:
                self._inflight += 1
            try:
                tier.write_pool.submit(self._take_back_now, tier, keys)
            except RuntimeError:  # closing
                self._take_back_now(tier, keys, run=False)
        for name, keys in by_tier.items():  # a tier down or gone: nothing to discard there
            self._settle(name, keys)
        return sum(r.nbytes for r in records.values())

    def _take_back_now(self, tier: StagingTier, keys: list[BlockKey], run: bool = True) -> None:
        """On ``tier``'s write pool: discard its staged copies of ``keys`` that are still unclaimed.

        A copy the engine asked for since the take-back was queued is left alone (it was counted
        as used); one whose block no lower tier holds any more is kept too, as an ordinary block,
        since removing it now would turn a hit into a miss.
        """
        try:
            with self._lock:
                mine = [k for k in keys if (r := self._staged.get(k)) is not None and r.taking_back]
            if run and mine:
                tiers = list(self._tiers())
                held = [k for k in mine if _held_below(tiers, k, tier)]
                if held:
                    tier.discard(held)
            self._settle(tier.name, mine)
        except Exception:  # a bug must not leave the stager busy for good
            log.exception("stager: taking back copies from tier %s failed", tier.name)
        finally:
            with self._lock:
                self._inflight -= 1
            self._wake.set()

    def _settle(self, tier: str, keys: list[BlockKey]) -> None:
        """``tier`` is done with its take-back of ``keys``; a record no tier holds any more is waste."""
        wasted = 0
        with self._lock:
            for key in keys:
                record = self._staged.get(key)
                if record is None or not record.taking_back or tier not in record.tiers:
                    continue
                record.tiers.remove(tier)
                if not record.tiers:
                    del self._staged[key]
                    wasted += record.nbytes
                    self._room += 1
        if wasted:
            self._count(staged_wasted_bytes=wasted)

    # ------------------------------------------------------------------ bookkeeping

    def _session(self, tag: str) -> _Session:
        """The session named ``tag``, created if new; the oldest is forgotten past ``max_sessions``."""
        session = self._sessions.get(tag)
        if session is None:
            session = self._sessions[tag] = _Session()
            while len(self._sessions) > self.max_sessions:
                self._forget_oldest()
        else:
            self._sessions.move_to_end(tag)
        return session

    def _forget_oldest(self) -> None:
        """Forget the least recently active session: its blocks and its plan (caller holds ``_lock``).

        Its staged copies stay in ``_staged`` and expire or are used as usual.
        """
        old_tag, old = self._sessions.popitem(last=False)
        for key in old.blocks:
            if self._session_of.get(key) == old_tag:
                del self._session_of[key]
        self._known_blocks -= len(old.blocks)
        self._plans.pop(old_tag, None)

    def _stored_late(self, session: _Session, key: BlockKey) -> bool:
        """Whether ``key``, new to ``session``, is a block of the prompt its tip ends: an ancestor of
        the tip, stored after it (caller holds ``_lock``).

        The latest prompt ends at the deepest block of the session's latest store, unless that
        block lies on the tip's own chain: an engine does not always store a prompt's blocks head
        first (bench returning --stack, vLLM's CPU tier in front: the 18 tail blocks of a 58-block
        prompt were stored before its 40 head blocks, the head's last block became the tip, and
        the next plan staged 40 blocks; the session read the other 18 from S3). A walk up the tip's chain
        to ``key``'s depth, only when ``key`` is shallower than the tip; a branch ends elsewhere.
        """
        tip = session.blocks.get(session.tip) if session.tip is not None else None
        depth = session.blocks[key].hint.depth
        if tip is None or depth is None or tip.hint.depth is None or depth >= tip.hint.depth:
            return False
        walk = tip
        while walk.hint.depth is not None and walk.hint.depth > depth:
            parent = walk.hint.parent
            if parent is None or parent == key:
                return parent == key
            found = self._block(parent)
            if found is None:
                return False
            walk = found
        return False

    def _block(self, key: BlockKey) -> _Block | None:
        """What the stager knows of ``key`` (caller holds ``_lock``): from the session that stored it."""
        owner = self._sessions.get(self._session_of.get(key, ""))
        return owner.blocks.get(key) if owner is not None else None

    def _new_plan(self, session: _Session, eta: float, *, hinted: bool) -> _Plan:
        """The blocks to stage for ``session``'s return, head of the prefix first (caller holds ``_lock``).

        The chain of its latest prompt: from its last stored block back through
        ``BlockHint.parent`` (a prefix another session stored included). A returning turn extends
        its latest prompt, so blocks of earlier prompts that branched off it would be staged
        unused (on the traces of ``bench staging``, about 15 % of a session's blocks at each
        return). Without parents in the hints (the tip is deeper than 0 and names none), every
        block the session stored, shallowest first.
        """
        tip = session.blocks.get(session.tip) if session.tip is not None else None
        if tip is not None and (tip.hint.parent is not None or tip.hint.depth == 0):
            chain: list[BlockKey] = []
            sizes: list[int] = []
            key: BlockKey | None = session.tip
            seen: set[BlockKey] = set()
            while key is not None and key not in seen and (block := self._block(key)) is not None:
                seen.add(key)
                chain.append(key)
                sizes.append(block.nbytes)
                key = block.hint.parent
            chain.reverse()
            sizes.reverse()
            return _plan(eta, hinted, chain, sizes)
        order = sorted(session.blocks, key=lambda k: (session.blocks[k].hint.depth is None,
                                                      session.blocks[k].hint.depth or 0))
        return _plan(eta, hinted, order, [session.blocks[k].nbytes for k in order])


def _plan(eta: float, hinted: bool, order: list[BlockKey], sizes: list[int]) -> _Plan:
    """A plan staging ``order`` (blocks of ``sizes`` bytes) for a return at ``eta``, with the bytes
    from each block on summed once (``_Plan.tail``)."""
    tail = list(accumulate(reversed(sizes), initial=0))
    tail.reverse()
    return _Plan(eta, hinted, order, tail=tail)


def _rewind(plan: _Plan, key: BlockKey) -> bool:
    """Move ``plan``'s cursor back to ``key`` if the plan wants it and the cursor passed it: the
    next pass looks at it again. Whether it did."""
    if key not in plan.wanted or (at := plan.order.index(key)) >= plan.cursor:
        return False
    plan.cursor = at
    return True


def _put_back(plan: _Plan, key: BlockKey, taken: Taken) -> None:
    """``key``, just taken from ``plan`` (``taken``: where from), is not staged now: look again later."""
    if taken == "refused":
        plan.refused.insert(0, key)
    elif taken == "stock":
        plan.stocked -= 1
    else:
        plan.cursor -= 1


def _route(tiers: list[StagingTier], key: BlockKey,
           expected: dict[str, list[BlockKey]]) -> tuple[StagingTier, list[StagingTier]] | None:
    """(the highest tier holding ``key``, the ``stage = true`` tiers above it); None: nothing to do.

    ``key`` is added to ``expected`` under the name of every stage tier that holds it
    (``Tier.expect``), not only the highest: a copy below is what the session reads when the
    tier above evicts it before the return. The stager reads its source without a use
    (``fetch(use=False)``), so a staged block's copy below aged as if nobody wanted it, and the
    engine's next stores evicted it first (bench staging, traces 31-40: a session of 176 blocks,
    larger than the DRAM tier, read 58 of them from S3)."""
    found: tuple[StagingTier, list[StagingTier]] | None = None
    for j, tier in enumerate(tiers):
        if not (found is None or tier.cfg.stage):
            continue
        if tier.presence(key) is True:
            if tier.cfg.stage:
                expected.setdefault(tier.name, []).append(key)
            if found is None:
                found = tier, [t for t in tiers[:j] if t.cfg.stage]
    return found if found is not None and found[1] else None


def _held_below(tiers: Sequence[StagingTier], key: BlockKey, tier: StagingTier) -> bool:
    """Whether an up tier below ``tier`` has ``key`` in its index (memory only)."""
    below = False
    for t in tiers:
        if below and t.presence(key) is True:
            return True
        if t is tier:
            below = True
    return False
