"""``keep_prefixes``: which blocks a full tier may give up for a new one, and when sessions have ended.

A full tier gives up no block that a live session used lately: it declines the newcomer instead,
so agents taking turns over a disk too small for all of them keep the sessions' heads that are
there instead of evicting the sessions about to return (LRU's failure on cycles). A block stops
being protected once it has been idle for longer than sessions take to come back: its session has
most likely ended, and on a long-running server new sessions must be able to replace ended ones
(a tier that only ever keeps what it stored first, like vLLM's ``fs`` tier on a full disk, serves
nothing to the sessions that start later). Only blocks stored with a prefix depth (a session's
chain) are protected.

The rule was "a live block no deeper than the newcomer" until 2026-12-07: it levelled every live
session's head to a common depth, and a token deep in a prompt costs more to recompute than one
near its start (attention reads every earlier token), so the same number of tokens from cache
saved less prefill than the first-come heads vLLM's ``fs`` tier keeps (grid r33-r35: equal
tokens, 7-15 % slower). Keeping every live block, whatever its depth, saved more prefill on every
held-out fold of the 150 traces at 2, 5 and 10 % of their working set, at every weight from
D = 1,000 to 27,000 (bench/results/traces-2026-12-07-asked, ``deeper_wins.py``), with tokens from
cache within -2.8 to +1.5 points; a rule that let only deeper newcomers in did worst. The grid's
bounded 8-agent cell did not confirm it in its first two runs (r36: 0.87x TTFT against vllm-fs,
the old rule 0.93x-1.00x in the same cell, whose runs spread as widely).

How long is "longer than sessions take to come back" is learnt, not configured: every time a
session comes back to a block, the time since its previous visit is one sample of the return
gap; the idle limit is ``GAP_FACTOR`` times the 90th percentile of the recent samples. Until
``MIN_SAMPLES`` gaps have been seen (a fresh tier) the limit is ``UNLEARNT_IDLE_S``; a tier
config's ``keep_prefixes_idle_s`` fixes it instead.

A visit is measured between the same point of each: where the engine reports request ends
(vLLM's tier), from one request's end to the next that used the block; else from use to use.
One vLLM request uses a block it reads from here twice (the read when it is scheduled, the end),
and counted as gaps those uses made half the samples the request's own service time: the limit
came out under the time a request waits in a loaded engine's queue (grid r34, float32 on 2 cores:
100 of 254 evictions were head blocks of live sessions, e.g. one 152 s unused against a 151 s
limit). End to end alone did not stop that in such a cell (r34b: 100-137 a server): every block
of a returning chain is one sample, so the first fast return sets the early limit. So vLLM's tier
also marks a request's chain used when the engine first asks about it (``LifeboatTier._mark_asked``,
a use, not a request end): a session whose request waits in the queue is live whatever the limit.
In r35 (same cell) 51-81 of a server's 82-122 blocks taken as idle were never asked for again.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifeboatcache_core.keys import BlockKey

#: idle limit until enough return gaps were seen, so that a fresh tier behaves as before
UNLEARNT_IDLE_S = 600.0
#: return gaps needed before the learnt limit replaces UNLEARNT_IDLE_S
MIN_SAMPLES = 32
#: the idle limit in 90th-percentile return gaps: a session idle 1.5 times longer than nine in
#: ten of its returns took has most likely ended. Chosen on held-out folds of the 150 traces with
#: vLLM's request ends (bench/results/traces-2026-12-07-compute, gap_factor_folds.py): 1.5 picked
#: on every fold, +1.3 to +4.0 % of prompt tokens from cache over 4x of gaps counted use to use
#: (the guard before), ahead of every factor 1-4 counted so. A gap from end to end already holds
#: the request's own time, which made the 4x of use-to-use gaps (think times only) too wide.
GAP_FACTOR = 1.5
#: the learnt limit never drops below this: uses closer together than a few seconds are one burst
MIN_IDLE_S = 5.0
#: recent return gaps kept (the limit follows the workload as it changes)
WINDOW = 512


class PrefixGuard:
    """One tier's prefix depths, last uses and return gaps. Not locked: the tier calls it under its lock."""

    def __init__(self, idle_s: float | None = None) -> None:
        self._fixed_idle_s = idle_s
        self._depth: dict[BlockKey, int] = {}
        self._used_at: dict[BlockKey, float] = {}
        self._fresh: set[BlockKey] = set()  # stored, not used since: the next use is the storing request's
        #: when a request that used the block last ended (engines that report request ends)
        self._ended_at: dict[BlockKey, float] = {}
        self._ends_reported = False  # once true, return gaps are sampled from request ends only
        self._gaps: deque[float] = deque(maxlen=WINDOW)
        self._new_gaps = 0
        self._learnt_idle_s: float | None = None

    def stored(self, key: BlockKey, depth: int, now: float) -> None:
        """``key`` was stored at prefix ``depth``."""
        self._depth[key] = depth
        self._used_at[key] = now
        self._fresh.add(key)

    def used(self, key: BlockKey, now: float, *, request_done: bool = False) -> None:
        """A request used ``key`` (read here or hit above this tier); ``request_done``: the request
        ended. Every use restarts the block's idle time; a return gap is sampled from request end
        to request end once the engine reports ends, else from use to use (module docstring).

        The first use after the store is the storing request itself (an engine reports a
        request's chain when it finishes, after its stores), not a return.
        """
        last = self._used_at.get(key)
        if last is None:
            return
        self._used_at[key] = now
        if request_done:
            self._ends_reported = True
            last = self._ended_at.get(key)
            self._ended_at[key] = now
        elif self._ends_reported:
            last = None  # a use inside a visit: the visit's end samples the gap
        if key in self._fresh:
            self._fresh.discard(key)
            return
        if last is None:
            return
        self._gaps.append(now - last)
        self._new_gaps += 1
        if self._new_gaps >= MIN_SAMPLES // 2 and len(self._gaps) >= MIN_SAMPLES:
            self._new_gaps = 0
            ordered = sorted(self._gaps)
            self._learnt_idle_s = max(MIN_IDLE_S, GAP_FACTOR * ordered[int(0.9 * (len(ordered) - 1))])

    def forget(self, key: BlockKey) -> None:
        if self._depth.pop(key, None) is not None:
            self._used_at.pop(key, None)
            self._ended_at.pop(key, None)
            self._fresh.discard(key)

    @property
    def idle_limit_s(self) -> float:
        """How long a block may go unused and still be protected."""
        if self._fixed_idle_s is not None:
            return self._fixed_idle_s
        return self._learnt_idle_s if self._learnt_idle_s is not None else UNLEARNT_IDLE_S

    def protects(self, victim: BlockKey, now: float) -> bool:
        """May ``victim`` not make room for a newcomer? Not while used within the idle limit (module docstring)."""
        if victim not in self._depth:
            return False
        return now - self._used_at.get(victim, 0.0) < self.idle_limit_s
