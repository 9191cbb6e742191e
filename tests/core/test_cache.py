"""TieredCache behaviour through the engine-facing API: hits, misses, never wrong bytes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from lifeboatcache_core.abc import KVLayout
from lifeboatcache_core.keys import BlockKey, Namespace
from lifeboatcache_core.tier import Tier
from prometheus_client import generate_latest

from lifeboatcache_core import prefixes

from .helpers import NS, blobs, file_tier, keys, open_cache

DRAM = {"name": "dram", "backend": "dram", "capacity_gb": 0.01}


def test_round_trip_and_restart(tmp_path: Path) -> None:
    ks, data = keys(8), blobs(8, 100_000)
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t")) as cache:
        assert cache.put(ks, data) == [True] * 8
        out = [bytearray(100_000) for _ in ks]
        assert cache.get(ks, out) == [True] * 8
        assert [bytes(o) for o in out] == data
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t")) as cache:
        out = [bytearray(100_000) for _ in ks]
        assert cache.get(ks, out) == [True] * 8
        assert [bytes(o) for o in out] == data
        cache.drain()
        stats = cache.stats()
        assert stats["nvme"]["hits"] == 8 and stats["dram"]["misses"] == 8
        assert stats["dram"]["promotions"] == 8 and stats["dram"]["blocks"] == 8


def test_numpy_buffers_and_layout(tmp_path: Path) -> None:
    layout = KVLayout("float32", (2, 4, 8), ("kv", "token", "dim"))
    arrays = [np.random.default_rng(i).standard_normal((2, 4, 8)).astype(np.float32) for i in range(3)]
    with open_cache(tmp_path) as cache:
        assert all(cache.put(keys(3), arrays, layout=layout))
        out = [np.zeros((2, 4, 8), np.float32) for _ in range(3)]
        assert all(cache.get(keys(3), out))
        for a, b in zip(arrays, out, strict=True):
            np.testing.assert_array_equal(a, b)


def test_submit_and_poll(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        job = cache.submit_put(keys(4), blobs(4, 1000))
        finished = []
        while not finished:
            finished = cache.poll()
        assert finished[0].job_id == job and finished[0].ok == [True] * 4
        out = [bytearray(1000) for _ in range(5)]
        job = cache.submit_get_into(keys(5), out)
        result = cache.wait(job)
        assert result.ok == [True] * 4 + [False] and result.kind == "get"
        assert cache.poll() == []  # a waited job is not reported again


def test_empty_batches(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        assert cache.put([], []) == []
        assert cache.get([], []) == []
        assert cache.contains_prefix([]) == 0


def test_exists_and_contains_prefix(tmp_path: Path) -> None:
    ks = keys(6)
    with open_cache(tmp_path) as cache:
        cache.put([ks[0], ks[1], ks[3]], blobs(3, 10))
        assert cache.exists(ks) == [True, True, False, True, False, False]
        assert cache.contains_prefix(ks) == 2


def test_wrong_size_buffer_is_a_miss(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(1), blobs(1, 1000))
        assert cache.get(keys(1), [bytearray(999)]) == [False]
        assert cache.stats()["nvme"]["incompatible_blocks"] == 1


def test_key_of_wrong_length_is_rejected_not_raised(tmp_path: Path) -> None:
    ns = Namespace(engine="test", model="m", digest_bytes=32)
    with open_cache(tmp_path) as cache:
        ns_id = cache.register_namespace(ns)
        short = BlockKey(ns_id, b"\x01" * 16)
        good = ns.key(b"\x02" * 32)
        assert cache.put([short, good], [b"a" * 10, b"b" * 10]) == [False, True]
        assert cache.get([short], [bytearray(10)]) == [False]
        assert cache.exists([short, good]) == [False, True]
        assert cache.put(["not a key"], [b"x"]) == [False]  # type: ignore[list-item]
        assert (tmp_path / "tier" / ns_id / "NAMESPACE.json").exists()


def _stored_path(cache, key: BlockKey) -> str:  # type: ignore[no-untyped-def]
    return cache.tiers[0].backend.path_of(key)


@pytest.mark.parametrize("damage", ["flip_payload", "flip_meta", "truncate", "zero_length"])
def test_damaged_block_is_a_counted_miss(tmp_path: Path, damage: str) -> None:
    (k,), (data,) = keys(1), blobs(1, 50_000)
    with open_cache(tmp_path) as cache:
        cache.put([k], [data])
        path = _stored_path(cache, k)
        raw = bytearray(Path(path).read_bytes())
        if damage == "flip_payload":
            raw[len(raw) // 2] ^= 0x10
        elif damage == "flip_meta":
            raw[40] ^= 0x01
        elif damage == "truncate":
            raw = raw[:-100]
        else:
            raw = bytearray()
        Path(path).write_bytes(raw)
        dest = bytearray(50_000)
        assert cache.get([k], [dest]) == [False]
        assert cache.stats()["nvme"]["corrupt_blocks"] == 1
        assert not Path(path).exists(), "a damaged block is moved aside"
        assert list((tmp_path / "tier" / ".bad" / NS).iterdir())
        assert cache.get([k], [dest]) == [False]  # now simply absent
        assert cache.stats()["nvme"]["corrupt_blocks"] == 1
        assert cache.put([k], [data]) == [True]  # and can be stored again
        assert cache.get([k], [dest]) == [True] and bytes(dest) == data


def test_block_of_another_namespace_at_the_path_is_a_miss(tmp_path: Path) -> None:
    mine, theirs = BlockKey("mine", b"\x07" * 32), BlockKey("theirs", b"\x07" * 32)
    with open_cache(tmp_path) as cache:
        cache.put([mine, theirs], [b"m" * 100, b"t" * 100])
        os.replace(_stored_path(cache, theirs), _stored_path(cache, mine))
        dest = bytearray(100)
        assert cache.get([mine], [dest]) == [False]
        assert cache.stats()["nvme"]["corrupt_blocks"] == 1


def test_capacity_is_enforced_on_every_put(tmp_path: Path) -> None:
    block = 256 * 1024
    capacity_gb = 4 * 1024 * 1024 / 1024**3  # 4 MiB
    with open_cache(tmp_path, file_tier(tmp_path / "t", capacity_gb)) as cache:
        tier = cache.tiers[0]
        for i in range(48):  # 12 MiB through a 4 MiB tier
            assert cache.put(keys(1, start=i), blobs(1, block)) == [True]
            on_disk = sum(f.stat().st_size for f in (tmp_path / "t").rglob("*.lbk"))
            assert on_disk <= tier.capacity and tier.used <= tier.capacity
        assert tier.stats.evictions > 0
        # LRU: the newest blocks survive
        assert cache.exists(keys(1, start=47)) == [True] and cache.exists(keys(1, start=0)) == [False]


def test_block_larger_than_the_tier_is_not_stored(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "t", 1 / 1024**2)) as cache:  # 1 KiB
        assert cache.put(keys(1), blobs(1, 10_000)) == [False]


def test_missing_path_is_created(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "a" / "b" / "c")) as cache:
        assert cache.health()[0]["up"]
        assert cache.put(keys(1), blobs(1, 10)) == [True]


def test_unusable_path_falls_back_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with open_cache(tmp_path, file_tier(blocker / "tier")) as cache:
        health = {h["tier"]: h for h in cache.health()}
        assert not health["nvme"]["up"] and "Not a directory" in health["nvme"]["reason"]
        assert health["fallback"]["up"]
        assert cache.put(keys(2), blobs(2, 100)) == [True, True]
        assert cache.get(keys(2), [bytearray(100), bytearray(100)]) == [True, True]
        assert any((tmp_path / "fallback").rglob("*.lbk"))


def test_read_only_filesystem_is_skipped(tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], check=True)
    try:
        with open_cache(tmp_path, file_tier(mnt)) as cache:
            health = {h["tier"]: h for h in cache.health()}
            assert not health["nvme"]["up"] and "Read-only file system" in health["nvme"]["reason"]
            assert health["fallback"]["up"]
            assert cache.put(keys(1), blobs(1, 10)) == [True]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_metrics_after_known_operations(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "t", name="metrics-tier")) as cache:
        cache.put(keys(3), blobs(3, 1000))
        cache.get(keys(4), [bytearray(1000) for _ in range(4)])
        text = generate_latest().decode()
        assert 'lifeboatcache_hits_total{tier="metrics-tier"} 3.0' in text
        assert 'lifeboatcache_misses_total{tier="metrics-tier"} 1.0' in text
        assert 'lifeboatcache_puts_total{tier="metrics-tier"} 3.0' in text
        assert 'lifeboatcache_blocks{tier="metrics-tier"} 3.0' in text
        assert 'lifeboatcache_tier_up{tier="metrics-tier"} 1.0' in text
        assert 'lifeboatcache_corrupt_blocks_total{tier="metrics-tier"} 0.0' in text


def test_duplicate_put_is_not_rewritten(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(1), [b"first" * 10])
        cache.put(keys(1), [b"other" * 10])
        dest = bytearray(50)
        assert cache.get(keys(1), [dest]) == [True] and bytes(dest) == b"first" * 10
        assert cache.stats()["nvme"]["puts"] == 1


def test_bfloat16_numpy_arrays_are_stored_as_bytes(tmp_path: Path) -> None:
    import ml_dtypes

    arr = np.arange(64, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(4, 16)
    with open_cache(tmp_path) as cache:
        assert cache.put(keys(1), [arr]) == [True]
        out = np.zeros_like(arr)
        assert cache.get(keys(1), [out]) == [True]
        assert out.tobytes() == arr.tobytes()


def test_a_load_never_waits_behind_stores(tmp_path: Path) -> None:
    """Stores that stall (a slow or full disk) occupy the write pool only: a get still finishes."""
    import threading

    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=2)) as cache:
        stored, stalled = keys(1), keys(8, start=100)
        assert cache.put(stored, [b"x" * 4096]) == [True]
        tier = cache.tiers[0]
        assert tier.backend is not None
        release = threading.Event()
        real_put = tier.backend.put

        def slow_put(*args: object, **kwargs: object) -> int:
            release.wait(30)
            return real_put(*args, **kwargs)

        tier.backend.put = slow_put  # type: ignore[method-assign]
        put_job = cache.submit_put(stalled, blobs(8, 4096))  # both write threads now wait
        out = bytearray(4096)
        try:
            got = cache.wait(cache.submit_get_into(stored, [out]), timeout=5)
        finally:
            release.set()
        assert got.ok == [True] and bytes(out) == b"x" * 4096
        assert cache.wait(put_job, timeout=30).ok == [True] * 8


def test_touch_orders_recency_without_io(tmp_path: Path) -> None:
    """Blocks used in a cache above ours are touched here; a full tier then evicts the others."""
    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        ks = keys(6)
        assert all(cache.put(ks, blobs(6, 4096)))
        tier = cache.tiers[0]
        per_block = tier.used // 6
        cache.touch([ks[1], ks[0]])  # oldest two become the most recent, ks[0] last of all
        tier.resize(per_block * 3)
        assert [k in tier.index for k in ks] == [True, True, False, False, False, True]
        cache.touch(keys(2, start=50))  # unknown keys: nothing happens, nothing raises


def test_a_finished_requests_touch_reaches_the_policy_as_request_done(tmp_path: Path) -> None:
    """``touch(request_done=True)`` is a finished request's chain: the policy's ``request_done``
    (where a session's idle time starts), applied in order with plain touches."""
    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        ks = keys(4)
        assert all(cache.put(ks, blobs(4, 4096)))
        tier = cache.tiers[0]
        calls: list[tuple[str, BlockKey]] = []
        real_touch = tier.policy.touch
        tier.policy.request_done = lambda k: calls.append(("done", k))  # type: ignore[method-assign]
        tier.policy.touch = lambda k: (calls.append(("touch", k)), real_touch(k))[1]  # type: ignore[method-assign]
        cache.touch([ks[1], ks[0]], request_done=True)
        cache.touch([ks[2]])
        cache.touch(keys(1, start=50), request_done=True)  # not held: nothing
        tier.resize(tier.capacity)  # its policy chooses victims: the uses are applied now
        assert calls == [("done", ks[1]), ("done", ks[0]), ("touch", ks[2])]


def test_a_read_from_the_top_tier_counts_as_use_in_the_tiers_below(tmp_path: Path) -> None:
    """A write-through tier below holds copies of what the top tier serves: the blocks read up
    there are the ones its policy keeps, not the ones it evicts first."""
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t", write="through", io_threads=1,
                                              keep_prefixes=False)) as cache:
        ks = keys(6)
        assert all(cache.put(ks, blobs(6, 4096)))
        dram, below = cache.tiers
        out = [bytearray(4096) for _ in range(2)]
        hits = dram.stats.hits
        assert all(cache.get([ks[1], ks[0]], out))  # the two oldest, served by DRAM
        assert dram.stats.hits == hits + 2 and below.stats.hits == 0
        below.resize(below.used // 6 * 3)
        assert [k in below.index for k in ks] == [True, True, False, False, False, True]


def test_uses_from_above_keep_their_time_for_the_prefix_guard(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A tier below applies the reads DRAM served only when its policy next chooses a victim, but
    each at the time it was made: its prefix guard learns sessions' return gaps from them. All
    applied at that later time, a session back every 10 s taught gaps of 0 (each key's later
    uses) and the guard's idle limit fell to its 5 s floor instead of GAP_FACTOR x 10 s."""
    from lifeboatcache_core.abc import BlockHint

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t", write="through", io_threads=1)) as cache:
        dram, below = cache.tiers
        ks = keys(4)
        hints = [BlockHint(parent=ks[i - 1] if i else None, depth=i) for i in range(4)]
        assert all(cache.put(ks, blobs(4, 4096), hints=hints))
        out = [bytearray(4096) for _ in ks]
        for turn in range(1, 11):  # back every 10 s: 36 return gaps (each key's first use is its storing request)
            clock[0] = 10.0 * turn
            hits = dram.stats.hits
            assert all(cache.get(ks, out)) and dram.stats.hits == hits + 4
        clock[0] = 1000.0
        below.resize(below.capacity)  # its policy chooses victims: the uses are applied now
        assert below._prefixes.idle_limit_s == pytest.approx(prefixes.GAP_FACTOR * 10.0)


def test_uses_from_above_reach_a_time_aware_policy_at_their_own_time(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same deferred uses, seen by EpiCache (``EvictionPolicy.clock``): two sessions read
    in turn, each every 10 s, are expected back 10 s after their last reads, not a long gap
    after the moment the tier happened to choose a victim. Applied at that moment (t = 1000 s),
    the policy learnt one gap of about 1000 s each and expected both at about t = 1,000 s."""
    from lifeboatcache_core.abc import BlockHint

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    below_tier = file_tier(tmp_path / "t", write="through", io_threads=1, keep_prefixes=False, policy="epicache")
    with open_cache(tmp_path, DRAM, below_tier) as cache:
        dram, below = cache.tiers
        sessions = {"agent-a": keys(2), "agent-b": keys(2, start=10)}
        for tag, ks in sessions.items():
            hints = [BlockHint(parent=ks[i - 1] if i else None, depth=i, tag=tag) for i in range(2)]
            assert all(cache.put(ks, blobs(2, 4096), hints=hints))
        out = [bytearray(4096) for _ in range(2)]
        for turn in range(1, 11):  # from DRAM: agent-a at 10, 20 ... 100 s, agent-b 5 s after each
            for offset, ks in zip((0.0, 5.0), sessions.values(), strict=True):
                clock[0] = 10.0 * turn + offset
                hits = dram.stats.hits
                assert all(cache.get(ks, out)) and dram.stats.hits == hits + 2
        clock[0] = 1000.0
        below.resize(below.capacity)  # its policy chooses victims: the uses are applied now
        expected = [below.policy.expected_return(tag) for tag in sessions]  # type: ignore[attr-defined]
        assert expected[0] is not None and 100.0 < expected[0] < 125.0, expected
        assert expected[1] is not None and 105.0 < expected[1] < 130.0, expected
        clock[0] = 1001.0
        assert below.policy.clock() == 1001.0  # type: ignore[misc]  # outside applying uses: now


def test_a_request_end_applied_inside_a_store_is_no_visit_of_the_storing_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full tier applies the uses it kept (here vLLM's request ends) inside a store, between
    the policy's ``admit`` and ``insert`` of the block. EpiCache took the storing session's
    ``insert`` after another session's ends as a new visit 0 s after the one its ``admit`` began,
    learnt a gap of 1 ms, and expected a session that stores every 10 s back at once (110.001 s)."""
    from lifeboatcache_core.abc import BlockHint

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    tier = file_tier(tmp_path / "t", io_threads=1, keep_prefixes=False, policy="epicache",
                     policy_options={"gap_smoothing": 1.0})  # the gap learnt is the latest one
    with open_cache(tmp_path, tier) as cache:
        old = keys(40, start=5000)  # a full tier: every store needs a victim (EpiCache's admit then visits)
        assert all(cache.put(old, blobs(40, 4096), hints=[BlockHint(tag="old", depth=0)] * 40))
        cache.tiers[0].resize(cache.tiers[0].used)
        chains: dict[str, list[BlockKey]] = {"a": [], "b": []}
        for turn in range(12):  # a stores at 0, 10, 20 ... s; b at 5, 15 ... s and its request ends 1 s later
            for offset, (tag, chain) in zip((0.0, 5.0), chains.items(), strict=True):
                clock[0] = 10.0 * turn + offset
                new = keys(1, start=(0 if tag == "a" else 1000) + turn)
                hint = BlockHint(parent=chain[-1] if chain else None, depth=len(chain), tag=tag)
                assert cache.put(new, blobs(1, 4096), hints=[hint]) == [True]
                chain.extend(new)
            clock[0] = 10.0 * turn + 6.0
            cache.touch(chains["b"][::-1], request_done=True)  # applied inside a's next store
        policy = cache.tiers[0].policy
        expected = policy.expected_return("a")  # type: ignore[attr-defined]
        assert expected == pytest.approx(120.0), expected


@pytest.mark.parametrize("keep_prefixes", [False, True])
def test_a_full_tier_gives_up_the_blocks_a_session_left_before_any_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_prefixes: bool) -> None:
    """vLLM's flow (a prompt's new chunks stored, then the whole chain reported at the request's
    end) through a full EpiCache tier: session a rewrote its context after 4 blocks at 30 s and
    sent the new one again at 40 s, so its old blocks 4-7 are on a context it left. They are the
    room b's grown prompt (3 new blocks at depths 8-10) gets, though episode by episode a's
    deepest blocks old and new would go in turn; and ``keep_prefixes``, which declines a deep
    new block rather than evict a shallower one used 29 s ago, lets them go (``abandoned``)."""
    from lifeboatcache_core.abc import BlockHint

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    tier = file_tier(tmp_path / "t", io_threads=1, keep_prefixes=keep_prefixes, policy="epicache")
    with open_cache(tmp_path, tier) as cache:
        a_old = keys(8)
        a_new, b = a_old[:4] + keys(4, start=100), keys(8, start=200)

        def request(at: float, tag: str, chain: list[BlockKey]) -> None:
            clock[0] = at
            hints = [BlockHint(tag=tag, parent=chain[d - 1] if d else None, depth=d) for d in range(len(chain))]
            assert all(cache.put(chain, blobs(len(chain), 4096), hints=hints))
            clock[0] = at + 1.0
            cache.touch(chain[::-1], request_done=True)

        for turn in range(3):
            request(10.0 * turn, "a", a_old)
            request(10.0 * turn + 5.0, "b", b)
        for at in (30.0, 40.0):
            request(at, "a", a_new)
            request(at + 5.0, "b", b)
        cache.tiers[0].resize(cache.tiers[0].used)
        grown = b + keys(3, start=300)
        request(50.0, "b", grown)
        assert cache.exists(a_old[4:]) == [False] * 4
        assert all(cache.exists(a_new + grown))
        assert cache.tiers[0].stats.declined == 0


def test_a_guarded_full_tier_gives_a_cold_sessions_room_to_a_new_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``keep_prefixes`` (on by default) keeps a shallower block used within its idle limit (600 s
    before it has learnt return gaps) and declines a deeper new block instead. EpiCache's session
    a came every 10 s and has been away for 60 s: past its own deadline, it is what EpiCache gives
    up first, and the guard lets it (``abandoned``) rather than refuse b's grown prompt."""
    from lifeboatcache_core.abc import BlockHint

    from lifeboatcache_core import tier as tier_module

    clock = [0.0]
    monkeypatch.setattr(tier_module.time, "monotonic", lambda: clock[0])
    tier = file_tier(tmp_path / "t", io_threads=1, policy="epicache")  # keep_prefixes by default
    with open_cache(tmp_path, tier) as cache:
        a, b = keys(4), keys(4, start=100)

        def request(at: float, tag: str, chain: list[BlockKey]) -> list[bool]:
            clock[0] = at
            hints = [BlockHint(tag=tag, parent=chain[d - 1] if d else None, depth=d) for d in range(len(chain))]
            return cache.put(chain, blobs(len(chain), 4096), hints=hints)

        for at in (0.0, 10.0, 20.0, 30.0):
            assert all(request(at, "a", a))
            assert all(request(at + 5.0, "b", b))
        for at in (40.0, 50.0, 60.0, 70.0, 80.0):  # a is away: b alone, every 10 s
            assert all(request(at + 5.0, "b", b))
        cache.tiers[0].resize(cache.tiers[0].used)
        grown = b + keys(2, start=200)
        assert all(request(90.0, "b", grown))
        assert all(cache.exists(grown))
        held = cache.exists(a)
        assert held[0] and not held[-1] and held == sorted(held, reverse=True)  # a's tail made the room
        assert cache.tiers[0].stats.declined == 0


def test_touch_never_waits_for_a_tiers_lock(tmp_path: Path) -> None:
    """``touch`` runs on the engine's scheduler thread (vLLM's ``touch`` and
    ``on_request_finished``): it must not wait while an I/O thread holds a tier's lock to choose
    victims or commit a batch. The uses are applied when the tier next chooses a victim
    (``test_touch_orders_recency_without_io``)."""
    import threading

    with open_cache(tmp_path, DRAM, file_tier(tmp_path / "t", write="through")) as cache:
        ks = keys(2)
        assert all(cache.put(ks, blobs(2, 4096)))
        touched = threading.Event()
        toucher = threading.Thread(target=lambda: (cache.touch(ks), touched.set()), daemon=True)
        with cache.tiers[1].lock:
            toucher.start()
            assert touched.wait(5.0), "touch waited for the tier's lock"
        toucher.join(5.0)


def test_a_full_tier_keeps_live_sessions_blocks_and_declines_newcomers(tmp_path: Path) -> None:
    """keep_prefixes: a full tier makes room only with blocks idle for keep_prefixes_idle_s (or stored
    without a depth), whatever the newcomer's depth: a live session's deep blocks are its dearest."""
    import time

    from lifeboatcache_core.abc import BlockHint

    def at(depth: int) -> list[BlockHint]:
        return [BlockHint(depth=depth)]

    tier_config = file_tier(tmp_path / "t", io_threads=1, keep_prefixes_idle_s=0.5)
    with open_cache(tmp_path, tier_config) as cache:
        chain = keys(3)  # stored tail first: the LRU victim is the deepest
        for key, depth in zip(chain, (2, 1, 0), strict=True):
            assert cache.put([key], blobs(1, 4096), hints=at(depth)) == [True]
        tier = cache.tiers[0]
        from lifeboatcache_core.tier import BLOCK_OVERHEAD

        # full: every further block needs exactly one victim (a put reserves payload + overhead)
        tier.resize(tier.used - tier.used // 3 + 4096 + BLOCK_OVERHEAD + 64)
        for n, depth in enumerate((5, 1, 0)):  # deeper, shallower, another session's head: all declined
            assert cache.put(keys(1, start=10 + n), blobs(1, 4096), hints=at(depth)) == [False]
        assert all(k in tier.index for k in chain) and tier.stats.declined == 3
        time.sleep(0.6)  # the chain has been idle long enough: its session may have ended
        assert cache.put(keys(1, start=12), blobs(1, 4096), hints=at(1)) == [True]
        assert chain[0] not in tier.index
        assert cache.put(keys(1, start=13), blobs(1, 4096)) == [True]  # no depth: admitted as before


def test_a_block_the_policy_does_not_admit_is_not_stored_and_evicts_nothing(tmp_path: Path) -> None:
    """EvictionPolicy.admit: the tier asks before storing a new key; False bypasses the store."""
    from lifeboatcache_core.abc import BlockHint
    from lifeboatcache_core.builtin.lru import LRUPolicy

    class RefusesTagged(LRUPolicy):
        asked: list[tuple[BlockKey, int, str | None]] = []

        def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
            self.asked.append((key, size, hint.tag if hint else None))
            return hint is None or hint.tag != "bypass"

    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        tier = cache.tiers[0]
        policy = RefusesTagged()
        with tier.lock:
            tier.policy = policy
        ks = keys(3)
        assert cache.put(ks[:2], blobs(2, 4096)) == [True, True]
        from lifeboatcache_core.tier import BLOCK_OVERHEAD

        tier.resize(tier.used // 2 + 4096 + BLOCK_OVERHEAD + 64)  # full: a third block evicts exactly one
        assert cache.put([ks[2]], blobs(1, 4096), hints=[BlockHint(tag="bypass")]) == [False]
        assert ks[2] not in tier.index and ks[2] not in policy
        assert all(k in tier.index for k in ks[:2]) and tier.stats.evictions == 0
        assert tier.stats.bypassed == 1 and tier.stats.puts == 2
        assert [(k, n) for k, n, _ in policy.asked] == [(ks[0], 4096), (ks[1], 4096), (ks[2], 4096)]
        assert cache.put(ks[:1], blobs(1, 4096), hints=[BlockHint(tag="bypass")]) == [True]  # held: a touch
        assert len(policy.asked) == 3
        assert cache.put([ks[2]], blobs(1, 4096)) == [True]  # admitted: evicts as before
        assert ks[2] in tier.index and tier.stats.evictions == 1


def test_store_threads_yield_to_the_engine_and_load_threads_do_not(tmp_path: Path) -> None:
    """``write_nice``: stores run niced on their own threads; loads (a request waits) keep the process's priority."""
    import threading

    base = os.getpriority(os.PRIO_PROCESS, 0)
    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=2, write_nice=7)) as cache:
        ks, data = keys(4), blobs(4, 10_000)
        assert cache.put(ks, data) == [True] * 4
        assert cache.get(ks, [bytearray(10_000) for _ in ks]) == [True] * 4
        nice = {t.name: os.getpriority(os.PRIO_PROCESS, t.native_id) for t in threading.enumerate()
                if t.name.startswith("lifeboat-nvme-") and t.native_id is not None}
    writers = [v for name, v in nice.items() if "-write" in name]
    readers = [v for name, v in nice.items() if "-read" in name]
    assert writers and readers
    assert set(writers) == {min(19, base + 7)} and set(readers) == {base}
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the caller's (the engine's) thread is untouched


def test_a_declined_store_is_not_encoded(tmp_path: Path) -> None:
    """Room is decided before the codec runs: on a full tier most stores are declined, and
    encoding them would take the engine's CPU for blocks that are never written."""
    from lifeboatcache_core.abc import BlockHint
    from lifeboatcache_core.tier import BLOCK_OVERHEAD

    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        tier = cache.tiers[0]
        encode = tier.codec.encode
        encoded: list[int] = []

        def counting(raw, layout):  # type: ignore[no-untyped-def]
            encoded.append(raw.nbytes)
            return encode(raw, layout)

        tier.codec.encode = counting  # type: ignore[method-assign]
        chain = keys(2)
        for key, depth in zip(chain, (1, 0), strict=True):
            assert cache.put([key], blobs(1, 4096), hints=[BlockHint(depth=depth)]) == [True]
        tier.resize(tier.used + 64)  # full: a new block needs a victim, and both are shallower
        assert len(encoded) == 2
        assert cache.put(keys(1, start=10), blobs(1, 4096), hints=[BlockHint(depth=5)]) == [False]
        assert tier.stats.declined == 1 and len(encoded) == 2  # declined without an encode
        assert tier.reserved == 0 and all(k in tier.index for k in chain)
        tier.resize(tier.used + 4096 + BLOCK_OVERHEAD + 64)
        assert cache.put(keys(1, start=11), blobs(1, 4096), hints=[BlockHint(depth=5)]) == [True]
        assert len(encoded) == 3 and tier.reserved == 0


def _encode_to_sizes(tier: Tier, sizes: list[int]) -> None:
    """Make ``tier``'s codec return payloads of ``sizes`` bytes, one per block (cut from the raw
    bytes): a codec whose blocks come out larger or smaller than its average so far."""
    encode = tier.codec.encode
    left = iter(sizes)

    def cut(raw, layout):  # type: ignore[no-untyped-def]
        (payload,), params = encode(raw, layout)
        return [memoryview(payload)[: next(left)]], params

    tier.codec.encode = cut  # type: ignore[method-assign]


def test_a_block_encoded_larger_or_smaller_than_expected_settles_its_reservation(tmp_path: Path) -> None:
    """A store reserves the codec's average size before encoding; the block's real size then
    gives back the excess or evicts for the shortfall, so capacity holds and nothing stays reserved."""
    from lifeboatcache_core.tier import BLOCK_OVERHEAD

    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        tier = cache.tiers[0]
        _encode_to_sizes(tier, [1024, 1024, 1024, 8192, 512, 8192, 8192])
        for n in range(3):  # the codec's blocks come to 1 KiB of 8 KiB so far
            assert cache.put(keys(1, start=n), blobs(1, 8192)) == [True]
        one_block = tier.used // 3
        # room for one more 1 KiB block, or for an 8 KiB one once one block is evicted
        tier.resize(tier.used + 8192 + BLOCK_OVERHEAD - one_block)
        assert cache.put(keys(1, start=3), blobs(1, 8192)) == [True]  # 8 KiB: evicts for the shortfall
        assert tier.used <= tier.capacity and tier.reserved == 0 and keys(1)[0] not in tier.index
        for n in range(4, 7):
            assert cache.put(keys(1, start=n), blobs(1, 8192)) == [True]
            assert tier.used <= tier.capacity and tier.reserved == 0
        assert keys(1, start=6)[0] in tier.index


def test_a_block_that_encodes_too_large_for_the_tier_is_declined_at_once_and_evicts_nothing(tmp_path: Path) -> None:
    """The reservation made before the encode is the store's own: a block whose real size cannot fit
    beside it is declined without waiting for it to land (it never would) and without evicting."""
    from lifeboatcache_core.stats import StoreOutcome
    from lifeboatcache_core.tier import BLOCK_OVERHEAD

    with open_cache(tmp_path, file_tier(tmp_path / "t", io_threads=1)) as cache:
        tier = cache.tiers[0]
        _encode_to_sizes(tier, [1024, 1024, 1024, 8192])
        for n in range(3):
            assert cache.put(keys(1, start=n), blobs(1, 8192)) == [True]
        # room for one more block of the usual 1 KiB, never for one of 8 KiB (even with all three evicted)
        tier.resize(tier.used + 1024 + BLOCK_OVERHEAD + 100)
        assert tier.capacity < 8192 + BLOCK_OVERHEAD
        waits: list[float | None] = []
        tier._space.wait = lambda timeout=None: waits.append(timeout) or False  # type: ignore[method-assign]
        outcome = tier.store(keys(1, start=3)[0], memoryview(blobs(1, 8192)[0]), None, None)
        assert outcome is StoreOutcome.DECLINED and waits == []
        assert all(k in tier.index for k in keys(3)) and tier.reserved == 0
