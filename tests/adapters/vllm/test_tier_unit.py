"""LifeboatTier, the spec's chunk choice, the CPU worker and the auto-enable plugin without an engine.

The tier is built the way vLLM's ``SecondaryTierFactory`` builds it, with a stub spec and a
2-D view standing in for the primary region (vllm-offloading.md §4.6), over a real
TieredCache with a real file tier.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from lifeboatcache_core.errors import ConfigError
from lifeboatcache_core.tier import BLOCK_OVERHEAD
from lifeboatcache_vllm import autoenable
from lifeboatcache_vllm.spec import chunk_blocks
from lifeboatcache_vllm.tier import LifeboatTier, LifeboatTierError
from lifeboatcache_vllm.worker import CpuOffloadingWorker
from vllm.v1.kv_offload.base import (
    CanonicalKVCacheRef,
    CanonicalKVCaches,
    CanonicalKVCacheTensor,
    GPULoadStoreSpec,
    LookupResult,
    ReqContext,
)
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob

LAYERS, BLOCKS_PER_CHUNK, PAGE = 2, 4, 512
PAYLOAD = LAYERS * BLOCKS_PER_CHUNK * PAGE
SLOT = 8192  # payload rounded up to 4 KiB, as vLLM pads primary rows
CHUNKS = 8


def stub_spec(extra: dict[str, Any] | None = None, tokens_per_block: int = 32) -> SimpleNamespace:
    config = SimpleNamespace(
        groups=(SimpleNamespace(tokens_per_block=tokens_per_block, layer_names=("l0", "l1")),),
        worker_kv_bytes_per_block=LAYERS * PAGE,
        model=SimpleNamespace(name="stub-model", dtype="bfloat16"),
        cache=SimpleNamespace(tokens_per_hash=tokens_per_block, blocks_per_chunk=BLOCKS_PER_CHUNK),
        parallel=SimpleNamespace(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1),
        kv_cache_layout=None, canonical_layout=False,
    )
    return SimpleNamespace(config=config, extra_config=extra or {}, blocks_per_chunk=BLOCKS_PER_CHUNK,
                           kv_bytes_per_chunk=SLOT, replicated_layout=False)


def make_tier(config: Any, extra: dict[str, Any] | None = None, **kwargs: Any) -> tuple[LifeboatTier, np.ndarray]:
    region = np.zeros((CHUNKS, SLOT), np.uint8)
    view = memoryview(region)
    tier = LifeboatTier(stub_spec(extra), view, "LifeboatTier", config=config, **kwargs)
    return tier, region


def file_config(path: Path, on_error: str = "serve", **vllm: Any) -> dict[str, Any]:
    """One file tier; ``vllm``: the adapter's options (``[engine.vllm]``)."""
    return {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(path)}],
            "engine": {"on_error": on_error, "vllm": vllm}}


def finish(tier: LifeboatTier, job_id: int, timeout: float = 10.0) -> JobResult:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for result in tier.get_finished_jobs():
            if result.job_id == job_id:
                return result
        time.sleep(0.005)
    raise AssertionError(f"job {job_id} did not finish")


def job(job_id: int, keys: list[bytes], chunks: list[int], promotion: bool) -> TransferJob:
    return TransferJob(job_id, keys, np.asarray(chunks, np.int32), promotion, ReqContext(req_id="r1"))


KEYS = [bytes([i]) * 32 + b"\0\0\0\0" for i in range(1, 5)]  # sha256 block hash + group index


def test_store_then_load_round_trips_rows_and_reports_hits(tmp_path: Path) -> None:
    tier, region = make_tier(file_config(tmp_path / "t"))
    rng = np.random.default_rng(0)
    region[:4, :PAYLOAD] = rng.integers(0, 256, (4, PAYLOAD), np.uint8)
    original = region[:4].copy()
    assert tier.lookup(KEYS[0], ReqContext(req_id="r1")) is LookupResult.MISS
    tier.submit_store(job(1, KEYS, [0, 1, 2, 3], False))
    assert finish(tier, 1).success
    # engine.vllm.defer_promotions (the default): asked in one scheduler step, answered in the next
    assert [tier.lookup(k, ReqContext(req_id="r2")) for k in KEYS] == [LookupResult.RETRY] * 4
    tier.on_schedule_end(SimpleNamespace(new_req_ids=[]))
    assert [tier.lookup(k, ReqContext(req_id="r2")) for k in KEYS] == [LookupResult.HIT] * 4
    tier.submit_load(job(2, KEYS[::-1], [4, 5, 6, 7], True))
    loaded = finish(tier, 2)
    assert loaded.success and loaded.successful_keys is None
    assert np.array_equal(region[4:8, :PAYLOAD], original[::-1, :PAYLOAD])
    assert not region[4:8, PAYLOAD:].any()  # the row padding is neither stored nor written
    tier.submit_store(job(3, KEYS[:2], [0, 1], False))  # already present: nothing rewritten
    assert finish(tier, 3).success
    assert tier.stats()["nvme"]["puts"] == 4
    # token hit-rate metrics: 5 answered lookups of 4 x 32-token chunks, 4 of them hits
    assert tier.cache is not None
    counters = tier.cache.telemetry.counters()
    assert (counters["lookup_tokens"], counters["lookup_hit_tokens"]) == (5 * 128, 4 * 128)
    cpu = tier.cpu_report()  # what the tier cost: chunks moved, CPU of our threads and of the engine's
    assert (cpu["chunks_stored"], cpu["chunks_loaded"]) == (4, 4)
    assert cpu["tier_threads_s"] >= 0 and cpu["engine_thread_s"] > 0 and cpu["process_s"] >= 0
    tier.shutdown()


def test_transfer_time_is_the_jobs_own_not_the_wait_for_the_next_poll(tmp_path: Path) -> None:
    """vLLM's kv_offload_tiering_{read,write}_time sum it: a poll one engine step later must not count."""
    tier, region = make_tier(file_config(tmp_path / "t"))
    region[:2, :PAYLOAD] = 7
    tier.submit_store(job(1, KEYS[:2], [0, 1], False))
    assert tier.cache is not None
    deadline = time.monotonic() + 10
    while tier.cache.telemetry.job_latency["put"].count == 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # the job is done, but nobody polled yet
    time.sleep(0.3)  # the engine's step
    stored = finish(tier, 1)
    assert stored.success and stored.transfer_time is not None and 0 < stored.transfer_time < 0.25
    tier.shutdown()


def chain_context(req_id: str, keys: list[bytes]) -> ReqContext:
    """A request context as vLLM's scheduler fills it: every key's end-token position."""
    ctx = ReqContext(req_id=req_id)
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, (i + 1) * 128)
    return ctx


def held(tier: LifeboatTier, keys: list[bytes]) -> list[bool]:
    assert tier.cache is not None
    return tier.cache.exists([tier._key(k) for k in keys])


SESSION_A = KEYS
SESSION_B = [bytes([i]) * 32 + b"\0\0\0\0" for i in range(11, 15)]


def test_chunks_hitting_in_vllms_cpu_tier_stay_in_a_full_tier(tmp_path: Path) -> None:
    """A's chunks are used again from vLLM's CPU tier (never read from ours): a full tier keeps them."""
    tier, region = make_tier(file_config(tmp_path / "t"))
    region[:, :PAYLOAD] = 3
    tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, chain_context("a1", SESSION_A)))
    assert finish(tier, 1).success
    tier.submit_store(TransferJob(2, SESSION_B, np.arange(4, 8, dtype=np.int32), False,
                                  chain_context("b1", SESSION_B)))
    assert finish(tier, 2).success
    tier.on_request_finished(chain_context("a2", SESSION_A))  # A's next turn hit in the CPU tier
    assert tier.cache is not None
    nvme = tier.cache.tiers[0]
    nvme.resize(nvme.used // 8 * 5)  # room for five of the eight chunks
    assert held(tier, SESSION_A) == [True] * 4
    assert held(tier, SESSION_B).count(True) == 1
    tier.shutdown()


def test_a_finished_request_reaches_the_policy_as_request_done_tail_first(tmp_path: Path) -> None:
    """vLLM's end of a request is where a session's idle time starts: the policy hears it as such."""
    tier, region = make_tier(file_config(tmp_path / "t"))
    region[:, :PAYLOAD] = 3
    tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, chain_context("a1", SESSION_A)))
    assert finish(tier, 1).success
    assert tier.cache is not None
    nvme = tier.cache.tiers[0]
    done: list[object] = []
    nvme.policy.request_done = done.append  # type: ignore[method-assign]
    tier.on_request_finished(chain_context("a2", SESSION_A))
    nvme.resize(nvme.capacity)  # its policy chooses victims: the uses are applied now
    assert done == [tier._key(k) for k in reversed(SESSION_A)]
    tier.shutdown()


def test_a_full_tier_gives_up_a_chain_tail_first_once_its_stores_land(tmp_path: Path) -> None:
    """The recency update waits for the request's own stores, then orders the chain head-newest."""
    config = file_config(tmp_path / "t")
    config["tiers"][0]["io_threads"] = 1  # blocks land in job order: head first
    tier, region = make_tier(config)
    region[:, :PAYLOAD] = 5
    ctx = chain_context("a1", SESSION_A)
    tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, ctx))
    tier.on_request_finished(ctx)  # vLLM finishes the request while its stores are in flight
    assert finish(tier, 1).success
    assert tier.cache is not None
    nvme = tier.cache.tiers[0]
    nvme.resize(nvme.used // 4 * 2)
    assert held(tier, SESSION_A) == [True, True, False, False]
    tier.shutdown()


SESSION_C = [bytes([i]) * 32 + b"\0\0\0\0" for i in range(21, 25)]


def full_tier_holding_a(tmp_path: Path, keep_prefixes: bool = False, idle_s: float | None = None,
                        **vllm: Any) -> tuple[LifeboatTier, np.ndarray]:
    """A tier whose four chunks of session A (rows 0-3) fill it; every row holds its own bytes.

    Plain LRU unless ``keep_prefixes`` (``idle_s``: its fixed idle limit): most tests are about
    which chunks reach the tier.
    """
    config = file_config(tmp_path / "t", **vllm)
    config["tiers"][0]["keep_prefixes"] = keep_prefixes
    config["tiers"][0]["keep_prefixes_idle_s"] = idle_s
    config["tiers"][0]["io_threads"] = 1  # stores land one after another: each evicts exactly one block
    tier, region = make_tier(config)
    region[:, :PAYLOAD] = np.arange(CHUNKS, dtype=np.uint8)[:, None] + 1
    tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, chain_context("a1", SESSION_A)))
    assert finish(tier, 1).success
    assert tier.cache is not None
    nvme = tier.cache.tiers[0]
    # full (less room than a chunk), but a store reserves payload + BLOCK_OVERHEAD, more than a
    # stored block takes: with this slack each store evicts exactly one block, without it two
    per_block = nvme.used // 4 - PAYLOAD
    nvme.resize(nvme.used + BLOCK_OVERHEAD - per_block)
    assert tier.cache.free_bytes() < PAYLOAD
    return tier, region


def stored_bytes(tier: LifeboatTier, key: bytes) -> np.ndarray | None:
    """The bytes our tier holds for ``key``, or None when it does not hold it.

    Read from the cache directly: a load through the tier would place the chunk in a CPU-tier
    row (a promotion), and move the very rows these tests are about.
    """
    assert tier.cache is not None
    out = np.zeros(PAYLOAD, np.uint8)
    return out if tier.cache.get([tier._key(key)], [out])[0] else None


def test_a_full_tier_keeps_new_chunks_in_vllms_cpu_tier_until_it_is_about_to_drop_them(tmp_path: Path) -> None:
    """exclusive_when_full: stored from their rows when they become the CPU tier's coldest, byte-exact."""
    tier, _ = full_tier_holding_a(tmp_path, exclusive_when_full=True)
    tier.submit_store(TransferJob(2, SESSION_B[:2], np.asarray([4, 5], np.int32), False,
                                  chain_context("b1", SESSION_B[:2])))
    assert finish(tier, 2).success  # reported stored: vLLM unpins the rows
    assert held(tier, SESSION_B[:2]) == [False, False]  # ... but they stay only in the CPU tier
    assert tier.exclusive_counts["deferred"] == 2
    tier.submit_store(TransferJob(3, SESSION_C[:2], np.asarray([6, 7], np.int32), False,
                                  chain_context("c1", SESSION_C[:2])))
    assert finish(tier, 3).success
    # A's next turn hits in the CPU tier: B and C are now its coldest rows (8 rows, 3 coldest written)
    tier.on_request_finished(chain_context("a2", SESSION_A))
    deadline = time.monotonic() + 10
    while tier.exclusive_counts["demoted"] < 3 and time.monotonic() < deadline:
        list(tier.get_finished_jobs())
        time.sleep(0.005)
    assert tier.exclusive_counts["demoted"] == 3
    assert held(tier, [*SESSION_B[:2], SESSION_C[0]]) == [True] * 3
    assert held(tier, [SESSION_C[1]]) == [False]  # still among the CPU tier's newest
    expected = {SESSION_B[0]: 5, SESSION_B[1]: 6, SESSION_C[0]: 7}  # row r holds r + 1
    for key, value in expected.items():
        row = stored_bytes(tier, key)
        assert row is not None and (row == value).all()
    tier.shutdown()


def demotions_settle(tier: LifeboatTier, settled: int) -> None:
    """Poll until ``settled`` demotions were stored or refused."""
    deadline = time.monotonic() + 10
    while (sum(tier.exclusive_counts[k] for k in ("demoted", "demotions_refused")) < settled
           and time.monotonic() < deadline):
        list(tier.get_finished_jobs())
        time.sleep(0.005)


def test_a_full_tier_gives_up_copies_vllms_cpu_tier_holds_for_chunks_it_is_about_to_drop(tmp_path: Path) -> None:
    """keep_prefixes would keep A's hot chunks and decline most of B's; A is in the CPU tier too.

    So A's deepest copies here go for B's demotions (A's head stays: keep_prefixes ranks it
    above them); A's chunks become deferred and are stored byte-exact once they in turn near
    the CPU tier's eviction end.
    """
    tier, _ = full_tier_holding_a(tmp_path, keep_prefixes=True, exclusive_when_full=True)
    tier.submit_store(TransferJob(2, SESSION_B[1:], np.asarray([4, 5, 6], np.int32), False,
                                  chain_context("b1", SESSION_B)))  # B1-B3: depths 1-3 of B's chain
    assert finish(tier, 2).success
    assert tier.exclusive_counts["deferred"] == 3
    # A's next turn hits in the CPU tier: its chunks are the newest there, B1-B3 the coldest three
    tier.on_request_finished(chain_context("a2", SESSION_A))
    demotions_settle(tier, 3)
    assert (tier.exclusive_counts["demoted"], tier.exclusive_counts["demotions_refused"]) == (3, 0)
    assert tier.exclusive_counts["given_up"] == 3
    assert held(tier, [*SESSION_A, *SESSION_B[1:]]) == [True, False, False, False, True, True, True]
    # C0 lands in the CPU tier (deferred: still full); a request over B and C leaves A1-A3 the coldest
    tier.submit_store(TransferJob(3, SESSION_C[:1], np.asarray([7], np.int32), False,
                                  chain_context("c1", SESSION_C[:1])))
    assert finish(tier, 3).success
    tier.on_request_finished(chain_context("x", [*SESSION_B[1:], *SESSION_C[:1]]))
    demotions_settle(tier, 6)  # A1-A3 are stored again, for B's copies (not A0's: depth 0)
    assert tier.exclusive_counts["demoted"] == 6
    assert held(tier, [*SESSION_A, *SESSION_B[1:]]) == [True, True, True, True, False, False, False]
    for n, key in enumerate(SESSION_A):
        row = stored_bytes(tier, key)
        assert row is not None and (row == n + 1).all()  # row r holds r + 1
    tier.shutdown()


def test_a_full_tier_never_gives_up_a_shallower_copy_for_a_deeper_chunk(tmp_path: Path) -> None:
    """B3 (depth 3) may take only copies at least as deep; A0 and A1 stay, A2 and A3 are about to be demoted."""
    tier, _ = full_tier_holding_a(tmp_path, keep_prefixes=True, exclusive_when_full=True)
    tier.submit_store(TransferJob(2, SESSION_B[3:], np.asarray([4], np.int32), False,
                                  chain_context("b1", SESSION_B)))
    assert finish(tier, 2).success
    tier.on_request_finished(chain_context("a2", SESSION_A))  # coldest three: B3, A3, A2
    demotions_settle(tier, 1)
    assert tier.exclusive_counts["given_up"] == 0
    assert held(tier, SESSION_A) == [True] * 4
    tier.shutdown()


@pytest.mark.parametrize("asked", [True, False])
def test_a_request_vllm_asks_for_keeps_its_sessions_idle_head_in_a_full_tier(tmp_path: Path, asked: bool) -> None:
    """A's turn ended longer ago than the idle limit, and its next turn waited in vLLM's queue:
    once vLLM asks for that turn's chain, A is live and its chunks are no ended session's."""
    tier, _ = full_tier_holding_a(tmp_path, keep_prefixes=True, idle_s=0.3, exclusive_when_full=False)
    tier.on_request_finished(chain_context("a1", SESSION_A))
    time.sleep(0.4)  # idle past the limit
    if asked:
        assert tier.lookup(SESSION_A[0], chain_context("a2", SESSION_A)) is not LookupResult.MISS  # HIT next step
    # B3 (depth 3) needs room; the coldest chunk is A3 (depth 3), protected unless idle
    tier.submit_store(TransferJob(2, SESSION_B[3:], np.asarray([4], np.int32), False,
                                  chain_context("b1", SESSION_B)))
    finish(tier, 2)
    assert held(tier, SESSION_A) == [True, True, True, asked]
    assert held(tier, SESSION_B[3:]) == [not asked]
    tier.shutdown()


def test_a_row_vllm_reused_before_our_copy_is_a_miss_not_another_chunks_bytes(tmp_path: Path) -> None:
    tier, region = full_tier_holding_a(tmp_path, exclusive_when_full=True)
    tier.submit_store(TransferJob(2, SESSION_B[:2], np.asarray([4, 5], np.int32), False,
                                  chain_context("b1", SESSION_B[:2])))
    assert finish(tier, 2).success
    region[4, :PAYLOAD] = 99  # vLLM dropped B0 and wrote another chunk into its row; we were not told
    tier.on_request_finished(chain_context("a2", SESSION_A))  # B is now the CPU tier's coldest
    deadline = time.monotonic() + 10
    while sum(tier.exclusive_counts[k] for k in ("demoted", "demotions_refused")) < 2 and time.monotonic() < deadline:
        list(tier.get_finished_jobs())
        time.sleep(0.005)
    assert (tier.exclusive_counts["demoted"], tier.exclusive_counts["demotions_refused"]) == (1, 1)
    assert held(tier, SESSION_B[:2]) == [False, True]
    assert tier.cache is not None and tier.cache.telemetry.counters()["unstable_skipped"] == 1
    tier.shutdown()


def test_a_chunk_displaced_from_its_row_before_its_turn_is_counted_lost(tmp_path: Path) -> None:
    tier, _ = full_tier_holding_a(tmp_path, exclusive_when_full=True)
    tier.submit_store(TransferJob(2, SESSION_B[:1], np.asarray([4], np.int32), False,
                                  chain_context("b1", SESSION_B[:1])))
    assert finish(tier, 2).success
    tier.submit_store(TransferJob(3, SESSION_C[:1], np.asarray([4], np.int32), False,  # the same row
                                  chain_context("c1", SESSION_C[:1])))
    assert finish(tier, 3).success
    assert tier.exclusive_counts["demotions_lost"] == 1
    assert tier.cpu_report()["exclusive_demotions_lost"] == 1
    tier.shutdown()


def test_the_model_refreshes_only_the_chunks_vllms_cpu_tier_refreshes(tmp_path: Path) -> None:
    """Chunks a request hit in device KV are not refreshed in vLLM's CPU-tier LRU, so not in our model."""
    from lifeboatcache_vllm.tier import cpu_tier_uses
    from vllm.v1.kv_offload.cpu.manager import _RequestCacheAccess

    tier, _ = make_tier(file_config(tmp_path / "t", exclusive_when_full=True))
    tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, chain_context("a1", SESSION_A)))
    tier.submit_store(TransferJob(2, SESSION_B[:2], np.asarray([4, 5], np.int32), False,
                                  chain_context("b1", SESSION_B[:2])))
    ctx = chain_context("a2", SESSION_A)  # A0, A1 hit in device KV; vLLM's CPU tier saw only A3, A2
    ctx.set_state(_RequestCacheAccess(owner=None, cache_generation=0, key_groups={0: [SESSION_A[3], SESSION_A[2]]}))
    assert cpu_tier_uses(ctx) == [SESSION_A[2], SESSION_A[3]]  # head to tail, by position
    assert cpu_tier_uses(chain_context("x", SESSION_A)) is None  # vLLM recorded nothing: not known
    tier.on_request_finished(ctx)
    assert tier._shadow.coldest(4) == [SESSION_A[0], SESSION_A[1], *SESSION_B[:2]]
    tier.shutdown()


def test_by_default_a_full_tier_is_offered_every_chunk_at_once(tmp_path: Path) -> None:
    """exclusive_when_full off (the default): vLLM's write-through; this full tier (plain LRU) evicts for each."""
    tier, _ = full_tier_holding_a(tmp_path)
    tier.submit_store(TransferJob(2, SESSION_B[:2], np.asarray([4, 5], np.int32), False,
                                  chain_context("b1", SESSION_B[:2])))
    assert finish(tier, 2).success
    assert held(tier, SESSION_B[:2]) == [True, True]
    assert tier.exclusive_counts["deferred"] == 0
    tier.shutdown()


def test_hints_name_the_session_by_its_first_chunk_and_place_each_chunk_in_its_chain(tmp_path: Path) -> None:
    tier, _ = make_tier(file_config(tmp_path / "t"))
    turn1, turn2 = chain_context("a1", SESSION_A[:2]), chain_context("a2", SESSION_A)
    first, later = tier._hints(SESSION_A[:2], turn1), tier._hints(SESSION_A[2:], turn2)
    other = tier._hints(SESSION_B[:1], chain_context("b1", SESSION_B))
    assert all(h is not None for h in [*first, *later, *other])
    assert {h.tag for h in [*first, *later]} == {SESSION_A[0][:16].hex()}  # type: ignore[union-attr]
    assert other[0].tag == SESSION_B[0][:16].hex() != first[0].tag  # type: ignore[union-attr]
    assert [h.depth for h in [*first, *later]] == [0, 1, 2, 3]  # type: ignore[union-attr]
    assert later[0].parent == tier._key(SESSION_A[1]) and first[0].parent is None  # type: ignore[union-attr]
    assert tier._hints(SESSION_A[:1], ReqContext(req_id="x")) == [None]  # no positions known: no hint
    tier.shutdown()


def test_corrupt_block_is_a_partial_promotion_not_an_error(tmp_path: Path) -> None:
    tier, region = make_tier(file_config(tmp_path / "t"))
    region[:4, :PAYLOAD] = 7
    tier.submit_store(job(1, KEYS, [0, 1, 2, 3], False))
    assert finish(tier, 1).success
    tier.shutdown()
    victim = next(p for p in (tmp_path / "t").rglob("*.lbk") if KEYS[1].hex() in p.name)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    tier, region = make_tier(file_config(tmp_path / "t"))  # a restart on the same directory
    tier.submit_load(job(2, KEYS, [4, 5, 6, 7], True))
    result = finish(tier, 2)
    assert not result.success
    assert set(result.successful_keys or ()) == {KEYS[0], KEYS[2], KEYS[3]}
    assert tier.stats()["nvme"]["corrupt_blocks"] == 1
    assert tier.lookup(KEYS[1], ReqContext(req_id="r3")) is LookupResult.MISS
    tier.shutdown()


@pytest.mark.parametrize("config, kwargs", [
    ({"tiers": [{"backend": "nvmee", "capacity_gb": 1}]}, {}),  # unknown backend name
    ({"tiers": "nvme"}, {}),  # wrong type
    ({"tiers": [{"backend": "file", "capacity_gb": "lots", "path": "/tmp/x"}]}, {}),
    (None, {"nvme_dir": "/tmp/x"}),  # a key the tier does not take
])
def test_bad_config_serves_without_tier_or_refuses(config: Any, kwargs: dict[str, Any], tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="lifeboatcache.vllm"):
        tier, _ = make_tier(config, **kwargs)
    assert not tier.enabled
    assert len([r for r in caplog.records if "serves without it" in r.message]) == 1
    assert tier.lookup(KEYS[0], ReqContext(req_id="r")) is LookupResult.MISS
    tier.submit_load(job(5, KEYS[:1], [0], True))
    assert tier.get_finished_jobs() == [JobResult(5, success=False, successful_keys=[])]
    failing = dict(config) if isinstance(config, dict) else {}
    failing["engine"] = {"on_error": "fail"}
    with pytest.raises(LifeboatTierError, match="on_error = 'fail'"):
        make_tier(failing, **kwargs)


def test_unwritable_directory_fails_only_when_asked(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(LifeboatTierError, match="not available"):
        make_tier({**file_config(blocker / "tier", on_error="fail"),
                   "fallback_local": {"path": str(tmp_path / "fb")}})
    tier, _ = make_tier({**file_config(blocker / "tier"), "fallback_local": {"path": str(tmp_path / "fb")}})
    assert tier.enabled  # serves, on the local fallback tier
    assert [t.name for t in tier.cache.tiers] == ["fallback"]
    tier.shutdown()


def test_chunk_choice() -> None:
    config = stub_spec().config
    assert chunk_blocks(config, "auto") == 1  # one engine block per chunk, vLLM's own default
    assert chunk_blocks(config, 512) == 16
    config.groups = (SimpleNamespace(tokens_per_block=48, layer_names=("l0",)),)
    assert chunk_blocks(config, "auto") == 1
    with pytest.raises(ConfigError, match="multiple of the engine's block size"):
        chunk_blocks(config, 100)


class _Region:
    """Stands in for SharedOffloadRegion: rows of ``row`` bytes, each worker view a column slice."""

    def __init__(self, chunks: int, row: int) -> None:
        self.base = torch.zeros((chunks, row), dtype=torch.int8)
        self.offset = 0
        self.cleaned = False

    def create_next_worker_view(self, size: int) -> torch.Tensor:
        view = self.base[:, self.offset:self.offset + size]
        self.offset += size
        return view

    def cleanup(self) -> None:
        self.cleaned = True


@pytest.mark.parametrize(("page", "row_pad", "word"), [(64, 128, 8), (66, 4, 2), (65, 3, 1)])
def test_cpu_worker_moves_unaligned_groups_like_vllm(page: int, row_pad: int, word: int) -> None:
    """Blocks 2..9 of a request (chunks of 4 blocks): the first chunk is entered at block 2.

    Pages and row strides that 8 divides move as int64 words; others fall back to narrower words.
    """
    layers = [torch.randint(-128, 127, (16, page), dtype=torch.int8) for _ in range(LAYERS)]
    caches = CanonicalKVCaches([CanonicalKVCacheTensor(t, page) for t in layers],
                               [[CanonicalKVCacheRef(i, page) for i in range(LAYERS)]])
    region = _Region(6, LAYERS * page * BLOCKS_PER_CHUNK + row_pad)
    worker = CpuOffloadingWorker(caches, BLOCKS_PER_CHUNK, region)
    assert worker._word == [word] * LAYERS
    engine_blocks = [3, 7, 1, 12, 5, 9, 0, 14]
    assert worker.submit_store(1, GPULoadStoreSpec(engine_blocks, [8], [2]), CPULoadStoreSpec([4, 0, 5]))
    chunk_bytes = page * BLOCKS_PER_CHUNK
    for layer, tensor in enumerate(layers):
        host = region.base[:, layer * chunk_bytes:(layer + 1) * chunk_bytes].reshape(6, BLOCKS_PER_CHUNK, page)
        flat = [(c, s) for c in (4, 0, 5) for s in range(BLOCKS_PER_CHUNK)][2:10]
        for (chunk, slot), block in zip(flat, engine_blocks, strict=True):
            assert torch.equal(host[chunk, slot], tensor[block])
    assert not region.base[:, LAYERS * chunk_bytes:].any()  # the row padding is never written
    targets = [2, 4, 6, 8, 10, 11, 13, 15]
    assert worker.submit_load(2, CPULoadStoreSpec([4, 0, 5]), GPULoadStoreSpec(targets, [8], [2]))
    for tensor in layers:
        assert torch.equal(tensor[targets], tensor[engine_blocks])
    results = worker.get_finished()
    assert [r.job_id for r in results] == [1, 2]
    assert [r.transfer_size for r in results] == [8 * page * LAYERS] * 2
    worker.shutdown()
    assert region.cleaned


def test_autoenable_fills_kv_transfer_config_unless_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    config_file = tmp_path / "lifeboat.toml"
    config_file.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path / "t"}"\n'
                           '[engine.vllm]\nnative_cpu_gb = 0.5\n')
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(config_file))
    args = SimpleNamespace(kv_transfer_config=None)
    assert autoenable.apply(args)
    extra = args.kv_transfer_config.kv_connector_extra_config
    assert args.kv_transfer_config.kv_connector == "OffloadingConnector"
    assert extra["spec_name"] == "LifeboatOffloadingSpec" and extra["cpu_bytes_to_use"] == 2**29
    assert extra["secondary_tiers"] == [{"type": "LifeboatTier", "module_path": "lifeboatcache_vllm.tier"}]
    assert extra["lifeboatcache"]["tiers"][0]["path"] == str(tmp_path / "t")

    explicit = SimpleNamespace(kv_transfer_config={"kv_connector": "ExampleConnector"})
    with caplog.at_level(logging.WARNING, logger="lifeboatcache.vllm"):
        assert not autoenable.apply(explicit)
    assert explicit.kv_transfer_config == {"kv_connector": "ExampleConnector"}
    assert "explicit --kv-transfer-config" in caplog.text

    config_file.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path / "t"}"\n'
                           '[engine.vllm]\nvllm_mode = "lmcache"\n')
    lmcache_mode = SimpleNamespace(kv_transfer_config=None)
    assert not autoenable.apply(lmcache_mode) and lmcache_mode.kv_transfer_config is None

    config_file.write_text('[[tiers]]\nbackend = "nvmee"\ncapacity_gb = 1\n')
    broken = SimpleNamespace(kv_transfer_config=None)
    assert not autoenable.apply(broken) and broken.kv_transfer_config is None
    config_file.write_text('[[tiers]]\nbackend = "nvmee"\ncapacity_gb = 1\n[engine]\non_error = "fail"\n')
    with pytest.raises(RuntimeError, match="refusing to start"):
        autoenable.apply(SimpleNamespace(kv_transfer_config=None))


def _offloading_config(extra: dict[str, Any], model: str) -> Any:
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )

    return OffloadingConfig(
        groups=(OffloadingGroupConfig(32, ("l0", "l1"), 0),), worker_kv_bytes_per_block=LAYERS * PAGE,
        enable_kv_cache_events=False, extra_config=extra, engine_id="unit",
        model=OffloadingModelConfig(model, "bfloat16"),
        cache=OffloadingCacheConfig(32, 1),
        parallel=OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, 1, None, False),
    )


def test_spec_defaults_chunk_cpu_tier_and_fingerprints_weights(tmp_path: Path) -> None:
    from lifeboatcache_vllm.spec import LifeboatOffloadingSpec

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights-v1" * 1000)
    spec = LifeboatOffloadingSpec(_offloading_config({"lifeboatcache": {"tiers": [
        {"backend": "file", "capacity_gb": 1, "path": str(tmp_path / "t")}],
        "engine": {"vllm": {"native_cpu_gb": 0.25}}}},
        str(model)))
    assert spec.blocks_per_chunk == 1 and spec.extra_config["cpu_bytes_to_use"] == 2**28  # "auto": one block
    assert spec.lifeboat_namespace.block_tokens == 32 and spec.lifeboat_namespace.platform
    given = {"cpu_bytes_to_use": 2**27, "blocks_per_chunk": 1}
    explicit = LifeboatOffloadingSpec(_offloading_config(given, str(model)))
    assert explicit.blocks_per_chunk == 1 and explicit.extra_config["cpu_bytes_to_use"] == 2**27
    (model / "model.safetensors").write_bytes(b"weights-v2" * 1000)  # a new checkpoint under the same name
    swapped = LifeboatOffloadingSpec(_offloading_config({"cpu_bytes_to_use": 2**27}, str(model)))
    assert swapped.lifeboat_namespace.id != spec.lifeboat_namespace.id
    assert swapped.lifeboat_namespace.weights_fingerprint != spec.lifeboat_namespace.weights_fingerprint


def test_defer_promotions_answers_a_chunk_here_one_scheduler_step_after_it_is_asked_for(tmp_path: Path) -> None:
    """engine.vllm.defer_promotions: RETRY in the step a chunk is first asked for, HIT from the next step.

    A miss is answered at once (nothing to promote); without the setting a chunk here is a HIT at once.
    """
    for defer in (True, False):
        tier, region = make_tier(file_config(tmp_path / f"t{defer}", defer_promotions=defer))
        region[:2, :PAYLOAD] = 3
        tier.submit_store(job(1, KEYS[:2], [0, 1], False))
        assert finish(tier, 1).success
        ctx = ReqContext(req_id="r2")
        first_step = [tier.lookup(k, ctx) for k in KEYS[:3]]
        again_same_step = tier.lookup(KEYS[0], ctx)
        tier.on_schedule_end(SimpleNamespace(new_req_ids=[]))
        next_step = [tier.lookup(k, ctx) for k in KEYS[:3]]
        if defer:
            assert first_step == [LookupResult.RETRY, LookupResult.RETRY, LookupResult.MISS]
            assert again_same_step is LookupResult.RETRY
        else:
            assert first_step == [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS]
        assert next_step == [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS]
        # the answer holds while a request that asked lives: a request not scheduled yet, or whose
        # promoted chunk left vLLM's CPU tier, asks again in a later step and is not made to wait again
        tier.on_schedule_end(SimpleNamespace(new_req_ids=[]))
        other = ReqContext(req_id="r3")
        assert [tier.lookup(KEYS[0], ctx), tier.lookup(KEYS[1], other)] == [LookupResult.HIT, LookupResult.HIT]
        tier.on_request_finished(ctx)
        assert tier.lookup(KEYS[1], other) is LookupResult.HIT  # r3 still holds it
        tier.on_request_finished(other)
        # every request that asked is gone: the next one to ask waits a step, as a first ask does
        later = ReqContext(req_id="r4")
        assert tier.lookup(KEYS[0], later) is (LookupResult.RETRY if defer else LookupResult.HIT)
        tier.shutdown()


def test_hints_and_hit_tokens_follow_each_kv_groups_own_chunk_span(tmp_path: Path) -> None:
    """A hybrid model's groups may have different block sizes (Gemma-4: 64 and 32 tokens): a chunk of the
    smaller group spans fewer tokens, so its depth, parent and hit tokens are counted in its own span."""
    spec = stub_spec()
    spec.config.groups = (SimpleNamespace(tokens_per_block=64, layer_names=("l0",)),
                          SimpleNamespace(tokens_per_block=32, layer_names=("l1",)))
    region = np.zeros((CHUNKS, SLOT), np.uint8)
    tier = LifeboatTier(spec, memoryview(region), "LifeboatTier", config=file_config(tmp_path / "t"))
    small = [bytes([n]) * 28 + (1).to_bytes(4, "big") for n in range(1, 5)]  # group 1: 32-token blocks
    large = [bytes([n]) * 28 + (0).to_bytes(4, "big") for n in range(1, 3)]  # group 0: 64-token blocks
    span_small, span_large = 32 * BLOCKS_PER_CHUNK, 64 * BLOCKS_PER_CHUNK
    ctx = ReqContext(req_id="h")
    for i, key in enumerate(small):
        ctx.set_offload_key_position(key, (i + 1) * span_small)
    for i, key in enumerate(large):
        ctx.set_offload_key_position(key, (i + 1) * span_large)
    hints = tier._hints([*small, *large], ctx)
    assert [h.depth for h in hints] == [0, 1, 2, 3, 0, 1]  # type: ignore[union-attr]
    assert hints[1].parent == tier._key(small[0]) and hints[5].parent == tier._key(large[0])  # type: ignore[union-attr]
    assert len({h.tag for h in hints[:4]}) == 1  # type: ignore[union-attr]
    assert tier._tokens_of(small[0]) == span_small and tier._tokens_of(large[0]) == span_large
    tier.shutdown()


def test_promotion_budget_holds_back_a_request_whose_chunks_would_not_fit_beside_earlier_promotions(
        tmp_path: Path) -> None:
    """engine.vllm.promotion_budget: a HIT makes vLLM allocate a CPU-tier row at once, for every waiting
    request it scans; past the budget (here half of 8 rows) a request waits (RETRY) until the
    requests let through before it are scheduled or finish. The first one always gets through."""
    keys = [bytes([0x40 + i]) * 32 + b"\0\0\0\0" for i in range(8)]
    a_keys, b_keys, c_keys = keys[:3], keys[3:6], keys[6:7]
    for budget in (0.5, 0.0):
        tier, region = make_tier(file_config(tmp_path / f"t{budget}", defer_promotions=False,
                                             promotion_budget=budget))
        region[:, :PAYLOAD] = 5
        tier.submit_store(job(1, keys[:4], [0, 1, 2, 3], False))
        assert finish(tier, 1).success
        tier.submit_store(job(2, keys[4:], [4, 5, 6, 7], False))
        assert finish(tier, 2).success
        a, b, c = chain_context("a", a_keys), chain_context("b", b_keys), chain_context("c", c_keys)
        step = [[tier.lookup(k, ctx) for k in ctx_keys] for ctx, ctx_keys in ((a, a_keys), (b, b_keys), (c, c_keys))]
        hit, retry = LookupResult.HIT, LookupResult.RETRY
        if budget == 0.0:  # off: every chunk here is promoted at once
            assert step == [[hit] * 3, [hit] * 3, [hit]]
            tier.shutdown()
            continue
        # a goes first (3 of 4 rows); b's 3 chunks would not fit beside them, c's one does
        assert step == [[hit] * 3, [retry] * 3, [hit]]
        tier.on_schedule_end(SimpleNamespace(new_req_ids=["c"]))  # c scheduled: its row is free again
        assert [tier.lookup(k, b) for k in b_keys] == [retry] * 3  # a is not scheduled yet: b still waits
        tier.on_schedule_end(SimpleNamespace(new_req_ids=["a"]))
        assert [tier.lookup(k, b) for k in b_keys] == [hit] * 3
        d = chain_context("d", a_keys)
        assert tier.lookup(a_keys[0], d) is retry  # b holds 3 rows now
        tier.on_request_finished(b)  # finished (or aborted) before it was scheduled: frees its rows too
        tier.on_schedule_end(SimpleNamespace(new_req_ids=[]))
        assert tier.lookup(a_keys[0], d) is hit
        report = tier.cpu_report()
        assert (report["promotions_admitted"], report["promotions_held_back"]) == (4, 3)
        assert report["promotion_wait_requests"] == 2  # b and d, each let through after a wait
        assert 0 <= report["promotion_wait_max_s"] <= report["promotion_wait_total_s"]  # seconds, rounded to ms
        tier.shutdown()


def test_promotion_budget_stays_on_for_a_cpu_tier_of_one_row(tmp_path: Path) -> None:
    """Half of one row rounds down to none; that must not turn the budget off silently."""
    keys = [bytes([0x60 + i]) * 32 + b"\0\0\0\0" for i in range(2)]
    region = np.zeros((1, SLOT), np.uint8)
    region[:, :PAYLOAD] = 5
    tier = LifeboatTier(stub_spec(), memoryview(region), "LifeboatTier",
                        config=file_config(tmp_path / "t", defer_promotions=False, promotion_budget=0.5))
    for job_id, key in enumerate(keys, start=1):
        tier.submit_store(job(job_id, [key], [0], False))
        assert finish(tier, job_id).success
    a, b = chain_context("a", keys[:1]), chain_context("b", keys[1:])
    assert tier.lookup(keys[0], a) is LookupResult.HIT
    assert tier.lookup(keys[1], b) is LookupResult.RETRY  # the one row is promised to a
    tier.on_schedule_end(SimpleNamespace(new_req_ids=["a"]))
    assert tier.lookup(keys[1], b) is LookupResult.HIT
    tier.shutdown()
