"""keep_prefixes' idle limit is learnt from the gaps between a block's uses (lifeboatcache_core.prefixes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.prefixes import PrefixGuard

from lifeboatcache_core import prefixes

from .helpers import blobs, file_tier, keys, open_cache


def _returns(guard: PrefixGuard, gap_s: float, count: int, start: float = 0.0) -> float:
    """``count`` blocks stored, used by their own request, then used again ``gap_s`` later: one gap each."""
    now = start
    for key in keys(count, start=1000):
        guard.stored(key, 0, now)
        guard.used(key, now)  # the storing request's own use: not a return
        guard.used(key, now + gap_s)
    return now + gap_s


def test_a_fresh_tier_protects_every_sessions_block_for_the_unlearnt_limit() -> None:
    """Head and tail alike: a live session's deep blocks are its dearest to recompute."""
    guard = PrefixGuard()
    head, tail = keys(2)
    guard.stored(head, 0, 0.0)
    guard.stored(tail, 3, 0.0)
    assert guard.idle_limit_s == prefixes.UNLEARNT_IDLE_S
    assert guard.protects(head, 100.0) and guard.protects(tail, 100.0)
    assert not guard.protects(head, prefixes.UNLEARNT_IDLE_S + 1)
    assert not guard.protects(tail, prefixes.UNLEARNT_IDLE_S + 1)
    assert not guard.protects(keys(1, start=9)[0], 0.0)  # stored without a depth: never protected


def test_the_limit_follows_the_return_gaps_and_ignores_the_storing_requests_own_use() -> None:
    guard = PrefixGuard()
    _returns(guard, 0.001, prefixes.MIN_SAMPLES * 2, start=0.0)  # would be a 5 s floor if counted
    assert guard.idle_limit_s == pytest.approx(prefixes.MIN_IDLE_S)  # learnt from the 1 ms returns
    guard = PrefixGuard()
    for key in keys(prefixes.MIN_SAMPLES):  # only first uses after the store: nothing to learn from
        guard.stored(key, 0, 0.0)
        guard.used(key, 3.0)
    assert guard.idle_limit_s == prefixes.UNLEARNT_IDLE_S
    guard = PrefixGuard()
    now = _returns(guard, 10.0, prefixes.MIN_SAMPLES)
    limit = prefixes.GAP_FACTOR * 10.0
    assert guard.idle_limit_s == pytest.approx(limit)
    block = keys(1, start=5)[0]
    guard.stored(block, 0, now)
    assert guard.protects(block, now + limit - 1) and not guard.protects(block, now + limit + 1)


def test_with_request_ends_a_return_gap_runs_from_one_end_to_the_next() -> None:
    """vLLM reads a block when its request is scheduled and reports the chain when it ends: a session
    back every 10 s, its request queued 5 s and served 5 s, returns every 10 s, not every 5. Counted
    from use to use, the limit was half as long, and a session whose next request waited in the
    queue a little longer than usual lost its head as idle."""
    guard = PrefixGuard()
    blocks = keys(prefixes.MIN_SAMPLES, start=2000)
    for key in blocks:
        guard.stored(key, 0, 0.0)
        guard.used(key, 0.0, request_done=True)  # the storing request ends
    for visit in range(1, 3):
        for key in blocks:
            guard.used(key, 10.0 * visit - 5, request_done=False)  # read once the request is scheduled
            guard.used(key, 10.0 * visit, request_done=True)
    limit = prefixes.GAP_FACTOR * 10.0
    assert guard.idle_limit_s == pytest.approx(limit)
    assert guard.protects(blocks[0], 20.0 + limit - 1)  # its next request queued a while longer
    assert not guard.protects(blocks[0], 20.0 + limit + 1)


def test_a_configured_idle_limit_is_not_learnt_over() -> None:
    guard = PrefixGuard(idle_s=2.0)
    _returns(guard, 10.0, prefixes.MIN_SAMPLES * 2)
    assert guard.idle_limit_s == 2.0


def test_a_full_tier_lets_ended_sessions_go_once_idle_past_the_learnt_limit(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions that return every 1 s teach a 5 s limit; a session idle 6 s makes room, one idle 3 s does not."""
    from lifeboatcache_core.tier import BLOCK_OVERHEAD

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        tier = cache.tiers[0]
        ended, active = keys(2, start=500)
        for key in (ended, active):
            assert cache.put([key], blobs(1, 4096), hints=[BlockHint(depth=0)]) == [True]
            cache.touch([key])  # the storing request's own use
        for second in range(1, prefixes.MIN_SAMPLES // 2 + 1):  # both sessions come back every second
            clock[0] = float(second)
            cache.touch([ended, active])
        last = clock[0]
        tier.resize(tier.used - tier.used // 2 + 4096 + BLOCK_OVERHEAD + 64)  # a third block needs a victim
        assert tier._prefixes.idle_limit_s == prefixes.MIN_IDLE_S  # max(5 s, 4 x 1 s), the uses applied by now
        clock[0] = last + 3  # both idle 3 s: both protected, the newcomer is declined
        assert cache.put(keys(1, start=800), blobs(1, 4096), hints=[BlockHint(depth=0)]) == [False]
        for second in (4, 5, 6):  # only one session goes on
            clock[0] = last + second
            cache.touch([active])
        assert cache.put(keys(1, start=800), blobs(1, 4096), hints=[BlockHint(depth=0)]) == [True]
        assert ended not in tier.index and active in tier.index
