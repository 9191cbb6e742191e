"""What ``Tier.store`` did with a block (``StoreOutcome``), and where a bypassed block goes (issue 17).

In a write-back stack the top tier takes every put and a ``write = "back"`` tier below gets
blocks only as demotions. A block the top tier's policy does not ``admit`` (a bypass: not worth
the room in *that* tier) is stored in that tier below instead, in the background; a
write-through tier below already took it with the put.
"""

from __future__ import annotations

import threading
from pathlib import Path

from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.builtin.lru import LRUPolicy
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.tier import Tier

from .helpers import blobs, file_tier, keys, open_cache

DRAM = {"name": "dram", "backend": "dram", "capacity_gb": 0.01}
BYPASS = [BlockHint(tag="bypass")]


class RefusesTagged(LRUPolicy):
    """LRU that bypasses every new block whose hint is tagged ``bypass``."""

    def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
        return hint is None or hint.tag != "bypass"


def dram_over_two_file_tiers(tmp_path: Path, bottom_write: str) -> TieredCache:
    """DRAM on top, a write-back file tier ``mid`` below it, and ``bottom`` (``bottom_write``) under that."""
    mid = {**file_tier(tmp_path / "mid", write="back"), "name": "mid"}
    bottom = {**file_tier(tmp_path / "bottom", write=bottom_write), "name": "bottom"}
    return open_cache(tmp_path, DRAM, mid, bottom)


def refuse_tagged(tier: Tier) -> None:
    with tier.lock:
        tier.policy = RefusesTagged()


def test_store_says_what_it_did_and_is_truthy_only_when_the_tier_holds_the_block(tmp_path: Path) -> None:
    from lifeboatcache_core.stats import StoreOutcome

    with open_cache(tmp_path, file_tier(tmp_path / "t", capacity_gb=64 * 1024 / 1024**3)) as cache:
        tier = cache.tiers[0]
        refuse_tagged(tier)
        a, b, c, d = keys(4)
        assert tier.store(a, memoryview(blobs(1, 4096)[0]), None, None) is StoreOutcome.STORED
        assert tier.store(a, memoryview(blobs(1, 4096)[0]), None, BYPASS[0]) is StoreOutcome.HELD  # a touch
        assert tier.store(b, memoryview(blobs(1, 4096)[0]), None, BYPASS[0]) is StoreOutcome.BYPASSED
        assert tier.store(c, memoryview(blobs(1, 128 * 1024)[0]), None, None) is StoreOutcome.DECLINED  # > capacity
        with tier.lock:
            tier.up = False
        try:
            assert tier.store(d, memoryview(blobs(1, 4096)[0]), None, None) is StoreOutcome.FAILED
        finally:
            with tier.lock:
                tier.up = True
        assert (tier.stats.puts, tier.stats.bypassed) == (1, 1)
        assert a in tier.index and not {b, c, d} & tier.index.keys()
    assert [bool(o) for o in StoreOutcome] == [o in (StoreOutcome.STORED, StoreOutcome.HELD) for o in StoreOutcome]
    assert StoreOutcome.STORED and StoreOutcome.HELD
    assert not (StoreOutcome.BYPASSED or StoreOutcome.DECLINED or StoreOutcome.FAILED)


def test_a_block_the_top_tier_bypasses_is_stored_in_the_write_back_tier_below(tmp_path: Path) -> None:
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t", write="back")) as cache:
        top, lower = cache.all_tiers
        refuse_tagged(top)
        (k,), data = keys(1), blobs(1, 4096)
        # the job does not wait for the tier below: no tier held the block when it ended
        assert cache.put([k], data, hints=BYPASS) == [False]
        cache.drain()
        assert k not in top.index and top.stats.bypassed == 1
        assert k in lower.index and lower.stats.puts == 1
        out = [bytearray(4096)]
        assert cache.get([k], out) == [True] and out[0] == data[0]
        # an admitted block still reaches the tier below only as a demotion
        (admitted,) = keys(1, start=1)
        assert cache.put([admitted], blobs(1, 4096)) == [True]
        cache.drain()
        assert admitted in top.index and admitted not in lower.index


def test_the_store_below_does_not_read_the_callers_buffer_after_the_job_ended(tmp_path: Path) -> None:
    """The caller may reuse its buffer once the put job ended; the background store below must not see that."""
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t", write="back", io_threads=1)) as cache:
        top, lower = cache.all_tiers
        refuse_tagged(top)
        (k,), data = keys(1), blobs(1, 4096)
        buffer = bytearray(data[0])
        gate = threading.Event()
        blocker = lower.write_pool.submit(gate.wait, 30)  # the store below queues behind this
        try:
            assert cache.wait(cache.submit_put([k], [buffer], hints=BYPASS), timeout=30).ok == [False]
            buffer[:] = bytes(4096)  # the job ended: the caller's memory is its own again
        finally:
            gate.set()
        blocker.result(30)
        cache.drain()
        out = [bytearray(4096)]
        assert cache.get([k], out) == [True] and out[0] == data[0]


def test_a_block_a_write_through_tier_below_takes_is_not_also_sent_to_a_write_back_tier(tmp_path: Path) -> None:
    with dram_over_two_file_tiers(tmp_path, bottom_write="through") as cache:
        top, middle, low = cache.all_tiers
        refuse_tagged(top)
        (k,) = keys(1)
        assert cache.put([k], blobs(1, 4096), hints=BYPASS) == [True]  # the write-through tier holds it
        cache.drain()
        assert k not in top.index and k not in middle.index and k in low.index
        assert middle.stats.puts == 0 and low.stats.puts == 1


def test_a_block_every_write_back_tier_but_the_last_bypasses_goes_down_to_the_last(tmp_path: Path) -> None:
    with dram_over_two_file_tiers(tmp_path, bottom_write="back") as cache:
        top, middle, low = cache.all_tiers
        refuse_tagged(top)
        refuse_tagged(middle)
        (k,), data = keys(1), blobs(1, 4096)
        cache.put([k], data, hints=BYPASS)
        cache.drain()
        assert (top.stats.bypassed, middle.stats.bypassed) == (1, 1)
        assert k not in top.index and k not in middle.index and k in low.index
        out = [bytearray(4096)]
        assert cache.get([k], out) == [True] and out[0] == data[0]


class RefusesAll(LRUPolicy):
    """Bypasses every new block (demotions carry no hint)."""

    def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
        return False


def test_a_demotion_the_write_back_tier_below_bypasses_goes_on_down(tmp_path: Path) -> None:
    with dram_over_two_file_tiers(tmp_path, bottom_write="back") as cache:
        top, middle, low = cache.all_tiers
        with middle.lock:
            middle.policy = RefusesAll()
        (k,), data = keys(1), blobs(1, 4096)
        assert cache.put([k], data) == [True] and k in top.index
        top.discard([k])  # evicted from the top: demoted into mid, which bypasses it
        cache.drain()
        assert middle.stats.bypassed == 1 and k not in middle.index and k in low.index
        out = [bytearray(4096)]
        assert cache.get([k], out) == [True] and out[0] == data[0]
