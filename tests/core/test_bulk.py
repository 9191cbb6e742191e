"""Backend bulk calls: the looping defaults report each key on its own; eviction deletes in one call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_core.abc import Backend
from lifeboatcache_core.builtin.dram import DramBackend
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing.contracts import RecordingSink

from .helpers import blobs, file_tier, keys, open_cache


class FlakyDram(DramBackend):
    """Fails one key with an I/O error, another with a bug."""

    def __init__(self, io_fail: BlockKey, bug: BlockKey | None = None) -> None:
        super().__init__(tier="t")
        self.io_fail, self.bug = io_fail, bug

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        if key == self.io_fail:
            raise OSError("disk on fire")
        if key == self.bug:
            raise TypeError("a bug")
        return super().read(key, dest)

    def delete(self, key: BlockKey) -> int:
        if key == self.io_fail:
            raise OSError("disk on fire")
        return super().delete(key)


def test_default_bulk_calls_report_each_failure_in_its_place() -> None:
    a, bad, c = keys(3)
    backend = FlakyDram(io_fail=bad)
    stored = backend.write_many([(k, [b"x" * 10], BlockMeta.new(k, 10)) for k in (a, bad, c)])
    assert all(isinstance(n, int) for n in stored)
    first, failed, last = backend.read_many([a, bad, c])
    assert isinstance(failed, OSError) and str(failed) == "disk on fire"
    assert not isinstance(first, Exception) and not isinstance(last, Exception)  # the failure hid nothing
    gone_a, kept, gone_c = backend.delete_many([a, bad, c])
    assert gone_a is None and gone_c is None and isinstance(kept, OSError)
    assert not backend.exists(a) and backend.exists(bad) and not backend.exists(c)


def test_a_bug_is_not_reported_as_a_storage_failure() -> None:
    a, bad, bug = keys(3)
    backend = FlakyDram(io_fail=bad, bug=bug)
    backend.put(bug, [b"y"], BlockMeta.new(bug, 1))
    with pytest.raises(TypeError):
        backend.read_many([a, bug])


def test_eviction_deletes_its_victims_in_one_bulk_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(10), blobs(10, 10_000))
        tier = cache.all_tiers[0]
        assert tier.backend is not None
        calls: list[list[BlockKey]] = []
        real = tier.backend.delete_many

        def delete_many(ks: Sequence[BlockKey]) -> list[Exception | None]:
            calls.append(list(ks))
            return real(ks)

        monkeypatch.setattr(tier.backend, "delete_many", delete_many)
        tier.resize(int(3.5 * max(tier.index.values())))
        assert len(calls) == 1 and len(calls[0]) == 7
        assert sum(cache.exists(keys(10))) == 3 and not any(tier.backend.exists(k) for k in calls[0])


def test_a_failed_eviction_delete_counts_as_a_tier_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(4), blobs(4, 10_000))
        tier = cache.all_tiers[0]
        backend: Backend | None = tier.backend
        assert backend is not None
        monkeypatch.setattr(backend, "delete_many", lambda ks: [OSError("read-only filesystem") for _ in ks])
        errors = tier.stats.errors
        tier.resize(int(2.5 * max(tier.index.values())))
        assert tier.stats.errors == errors + 2 and len(tier.index) == 2


def test_put_from_memory_the_caller_gave_up_stores_only_bytes_that_still_match(tmp_path: Path) -> None:
    """``digests``: a buffer overwritten after the caller hashed it is a miss, never stored under its key."""
    from lifeboatcache_core.chunkfile import payload_digest

    a, b = keys(2)
    rows = [bytearray(blob) for blob in blobs(2, 4096)]
    digests = [payload_digest([bytes(r)]) for r in rows]
    rows[1][100] ^= 0xFF  # the engine reused b's memory before the job copied it
    with open_cache(tmp_path) as cache:
        ok = cache.wait(cache.submit_put([a, b], rows, digests=digests)).ok
        assert ok == [True, False]
        assert cache.exists([a, b]) == [True, False]
        assert cache.telemetry.counters()["unstable_skipped"] == 1
        out = [bytearray(4096)]
        assert cache.get([a], out) == [True] and out[0] == rows[0]
        with pytest.raises(ValueError):
            cache.submit_put([a, b], rows, digests=digests[:1])


def test_free_bytes_is_the_room_of_the_bottom_tier_before_a_store_evicts(tmp_path: Path) -> None:
    from .helpers import file_tier

    with open_cache(tmp_path, file_tier(tmp_path / "t", capacity_gb=64 * 1024 / 1024**3)) as cache:
        assert 0 < cache.free_bytes() <= 64 * 1024
        cache.put(keys(1), blobs(1, 32 * 1024))
        left = cache.free_bytes()
        assert 0 < left < 32 * 1024
        cache.put(keys(1, start=1), blobs(1, 32 * 1024))  # evicts: nothing is left
        assert cache.free_bytes() < 32 * 1024


def test_a_put_replacing_blocks_takes_their_room_not_the_policys_victim(tmp_path: Path) -> None:
    """``replacing``: the caller gives those blocks up (it holds them itself); the LRU victim stays.

    With a write-back tier below, a given-up block is not demoted there either: the point is to
    hold something else, not to move the same block down.
    """
    from .helpers import file_tier

    a, b, c, d, e = keys(5)
    data = blobs(5, 16 * 1024)
    dram = {"name": "dram", "backend": "dram", "capacity_gb": 4.5 * 16 * 1024 / 1024**3}
    below = file_tier(tmp_path / "t", write="back")
    with open_cache(tmp_path, dram, below) as cache:
        cache.put([a, b, c, d], data[:4])  # dram full; a is its LRU victim
        top, lower = cache.all_tiers
        assert cache.wait(cache.submit_put([e], data[4:], replacing=[c])).ok == [True]
        assert [k in top.index for k in (a, b, c, d, e)] == [True, True, False, True, True]
        assert c not in lower.index  # given up, not demoted
        out = [bytearray(16 * 1024)]
        assert cache.get([e], out) == [True] and out[0] == data[4]
        cache.put(keys(1, start=9), blobs(1, 16 * 1024))  # an ordinary store: LRU a is evicted, demoted below
        assert a not in top.index
        cache.drain()
        assert a in lower.index


def test_the_default_bulk_payload_read_reports_each_failure_in_its_place() -> None:
    a, bad, c, bug = keys(4)
    backend = FlakyDram(io_fail=bad, bug=bug)
    for k in (a, bad, c, bug):
        backend.put(k, [b"z" * 8], BlockMeta.new(k, 8))
    sinks = [RecordingSink() for _ in range(3)]
    first, failed, last = backend.read_payload_many([a, bad, c], sinks, [None, None, None])
    assert isinstance(failed, OSError)
    assert not isinstance(first, Exception) and not isinstance(last, Exception)
    assert sinks[0].payload == sinks[2].payload == b"z" * 8 and sinks[1].calls == []
    with pytest.raises(TypeError):  # a bug is not a storage failure
        backend.read_payload_many([bug], [RecordingSink()], [None])
    with pytest.raises(ValueError):
        backend.read_payload_many([a, c], [RecordingSink()], [None, None])


@pytest.mark.parametrize("codec", ["none", "lossless"])
def test_a_get_reads_each_slice_of_a_tier_in_one_bulk_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            codec: str) -> None:
    """A store that pays a round trip per request (S3) runs a bulk call's requests at once; a get
    that asked for its blocks one by one paid one round trip per block, whatever the store did."""
    with open_cache(tmp_path, file_tier(tmp_path / "t", codec=codec, io_threads=2)) as cache:
        ks, data = keys(10), blobs(10, 20_000)
        cache.put(ks, data)
        tier = cache.all_tiers[0]
        backend = tier.backend
        assert backend is not None
        # a coding tier reads a block stored at more bytes than the buffer (random bytes do not
        # shrink: lossless keeps them as they are) like an identity tier: read_many, not the sink
        calls: list[int] = []
        for bulk in ("read_many", "read_payload_many"):
            def counted(ks: Sequence[BlockKey], *args: Any, real: Any = getattr(backend, bulk)) -> list[Any]:
                calls.append(len(ks))
                return real(ks, *args)

            monkeypatch.setattr(backend, bulk, counted)
        bufs = [bytearray(20_000) for _ in ks]
        assert cache.get(ks, bufs) == [True] * 10
        assert [bytes(b) for b in bufs] == data
        assert sorted(calls) == [5, 5], f"one bulk call per slice of the get (io_threads = 2), got {calls}"


@pytest.mark.parametrize("codec", ["none", "lossless"])
def test_a_dram_tier_reads_and_writes_a_jobs_uncoded_blocks_as_one_task(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       codec: str) -> None:
    """A DRAM read or write is a memory copy under the GIL: slices on several threads cannot
    overlap, they only add hand-offs (``Backend.parallel_io``). A codec's C code can, so a coding
    DRAM tier still splits its jobs over its threads, as a file tier always does."""
    dram = {"name": "dram", "backend": "dram", "capacity_gb": 0.01, "io_threads": 4, "codec": codec}
    with open_cache(tmp_path, dram, file_tier(tmp_path / "t", io_threads=4)) as cache:
        tasks: dict[str, int] = {}
        for tier in cache.all_tiers:
            for pool in (tier.read_pool, tier.write_pool):
                def counted(*args: Any, real: Any = pool.submit, name: str = tier.name) -> Any:
                    tasks[name] = tasks.get(name, 0) + 1
                    return real(*args)

                monkeypatch.setattr(pool, "submit", counted)
        ks, data = keys(12), blobs(12, 20_000)
        assert cache.put(ks, data) == [True] * 12
        stored = dict(tasks)
        tasks.clear()
        bufs = [bytearray(20_000) for _ in ks]
        assert cache.get(ks, bufs) == [True] * 12  # all from the DRAM tier
        assert [bytes(b) for b in bufs] == data
    assert stored == {"dram": 1 if codec == "none" else 4, "nvme": 4}
    assert tasks == {"dram": 1 if codec == "none" else 4}


def test_a_block_a_bulk_read_misses_is_read_from_the_tier_below(tmp_path: Path) -> None:
    top = file_tier(tmp_path / "top")  # write-through (the default): the tier below holds every block too
    below = {**file_tier(tmp_path / "below"), "name": "below"}
    with open_cache(tmp_path, top, below) as cache:
        ks, data = keys(4), blobs(4, 5_000)
        cache.put(ks, data)
        cache.drain()
        upper = cache.all_tiers[0]
        assert upper.backend is not None and cache.all_tiers[1].backend is not None
        assert all(cache.all_tiers[1].backend.exists(k) for k in ks)
        upper.backend.delete(ks[2])  # gone behind the index's back
        bufs = [bytearray(5_000) for _ in ks]
        assert cache.get(ks, bufs) == [True] * 4
        assert [bytes(b) for b in bufs] == data
        cache.drain()  # the block served from below is promoted back (on the upper tier's write pool)
        assert upper.backend.exists(ks[2]) and ks[2] in upper.index
