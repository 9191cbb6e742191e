"""``TieredCache.listen_removed``: an engine that publishes what the cache holds hears what it lost.

vLLM's KV events tell a router which chunks a tier holds; once a tier evicts, discards or sets
aside a block it must say so, or the router keeps sending requests for a chunk that is gone.
"""

from __future__ import annotations

from pathlib import Path

from lifeboatcache_core.keys import BlockKey

from .helpers import blobs, file_tier, keys, open_cache

BLOCK = 256 * 1024
CAPACITY_GB = 4 * 1024 * 1024 / 1024**3  # 4 MiB: 16 blocks


def test_evicted_and_discarded_blocks_are_told_to_their_namespaces_listener(tmp_path: Path) -> None:
    heard: list[BlockKey] = []
    other = keys(1, namespace="otherns", start=1000)
    with open_cache(tmp_path, file_tier(tmp_path / "t", CAPACITY_GB)) as cache:
        cache.listen_removed("testns", heard.extend)
        assert cache.put(other, blobs(1, BLOCK)) == [True]
        for i in range(20):  # 5 MiB through a 4 MiB tier: the oldest go
            assert cache.put(keys(1, start=i), blobs(1, BLOCK)) == [True]
        evicted = [k for k in keys(20) if not cache.exists([k])[0]]
        assert evicted and set(heard) == set(evicted)  # the other namespace's block is not ours
        assert cache.exists(other) == [False]  # it was evicted too, and not told to this listener
        heard.clear()
        cache.tiers[0].discard(keys(1, start=19))
        assert heard == keys(1, start=19)
        cache.listen_removed("testns", None)  # stopped: nothing more is told
        heard.clear()
        cache.tiers[0].discard(keys(1, start=18))
        assert heard == []


def test_a_block_whose_file_vanished_or_that_was_dropped_from_the_index_is_told(tmp_path: Path) -> None:
    heard: list[BlockKey] = []
    with open_cache(tmp_path, file_tier(tmp_path / "t")) as cache:
        cache.listen_removed("testns", heard.extend)
        ks = keys(3)
        assert cache.put(ks, blobs(3, 1000)) == [True] * 3
        nvme = cache.tiers[0]
        assert nvme.backend is not None
        Path(nvme.backend.path_of(ks[0])).unlink()  # deleted behind our back: found out at the read
        assert cache.get(ks[:1], [bytearray(1000)]) == [False]
        assert heard == ks[:1]
        nvme.drop_from_index(ks[1:2])  # a check found it gone
        assert heard == ks[:2]


def test_cache_discard_removes_from_every_tier_without_demoting_and_is_heard(tmp_path: Path) -> None:
    """An engine's delete: gone from the write-back DRAM tier *and* the file tier below it (a
    tier's own eviction would have demoted the DRAM copy), each tier's batch told to the listener."""
    heard: list[BlockKey] = []
    dram = {"name": "dram", "backend": "dram", "capacity_gb": 0.01}
    with open_cache(tmp_path, dram, file_tier(tmp_path / "t", write="back")) as cache:
        ks = keys(4)
        assert cache.put(ks, blobs(4, 1000)) == [True] * 4
        cache.drain()
        cache.listen_removed("testns", heard.extend)
        # write-back: the file tier has none yet; a discard must not hand it the DRAM copies
        freed = cache.discard(ks[:2] + keys(1, start=99))
        assert freed == 2000
        cache.drain()
        assert [cache.presence([k])[0] for k in ks] == [False, False, True, True]
        assert cache.exists(ks[:2]) == [False, False]
        assert sorted(heard) == sorted(ks[:2])
        assert cache.discard([]) == 0


def test_a_tiers_removal_hook_hears_every_namespace(tmp_path: Path) -> None:
    """``Tier.on_removed`` (the cache's stager) hears every batch a tier removes, whatever its
    namespace: the stager's plans span the namespaces of all engines sharing the cache."""
    heard: list[tuple[str, BlockKey]] = []
    other = keys(1, namespace="otherns", start=1000)
    with open_cache(tmp_path, file_tier(tmp_path / "t", CAPACITY_GB)) as cache:
        tier = cache.tiers[0]
        tier.on_removed = lambda t, gone: heard.extend((t.name, k) for k in gone)
        assert cache.put(other, blobs(1, BLOCK)) == [True]
        for i in range(20):  # 5 MiB through a 4 MiB tier: the oldest go
            assert cache.put(keys(1, start=i), blobs(1, BLOCK)) == [True]
        evicted = [k for k in other + keys(20) if not cache.exists([k])[0]]
        assert other[0] in evicted and {k for _, k in heard} == set(evicted)
        heard.clear()
        tier.discard(keys(1, start=19))
        assert heard == [(tier.name, keys(1, start=19)[0])]
