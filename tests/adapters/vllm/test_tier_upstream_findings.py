"""What vLLM's own secondary-tier tests found in LifeboatTier (tools/upstream_suites), fixed.

Each test here mirrors the vLLM test that found it, in our own harness (no engine, a real
file tier), so the fix stays pinned without vLLM's sdist.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from lifeboatcache_vllm.fingerprint import namespace_for

from tests.adapters.vllm.test_tier_unit import CHUNKS, KEYS, PAYLOAD, file_config, finish, job, make_tier


def test_a_job_naming_a_row_past_the_region_fails_instead_of_raising(tmp_path: Path) -> None:
    """vLLM's test_out_of_bounds_block_id_smoke: an IndexError used to raise into the scheduler."""
    tier, region = make_tier(file_config(tmp_path / "t"))
    try:
        tier.submit_store(job(1, KEYS[:1], [CHUNKS], False))  # one past the last row
        assert not finish(tier, 1).success
        tier.submit_load(job(2, KEYS[:1], [-1], True))
        result = finish(tier, 2)
        assert not result.success and list(result.successful_keys or []) == []
        tier.submit_store(job(3, KEYS[:2], [0], False))  # two keys, one row
        assert not finish(tier, 3).success
        # nothing was stored, and the tier still works for a good job
        region[0, :PAYLOAD] = 7
        tier.submit_store(job(4, KEYS[:1], [0], False))
        assert finish(tier, 4).success
        assert tier.cache is not None and tier.cache.stats()["nvme"]["blocks"] == 1
    finally:
        tier.shutdown()


def _config(tp: int, replicated: bool) -> SimpleNamespace:
    return SimpleNamespace(
        groups=(SimpleNamespace(tokens_per_block=16, layer_names=("l0",)),), worker_kv_bytes_per_block=4096,
        model=SimpleNamespace(name="stub-mla", dtype="bfloat16"), cache=SimpleNamespace(tokens_per_hash=16),
        parallel=SimpleNamespace(rank=tp - 1, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1, dcp_size=1),
        kv_cache_layout=None, canonical_layout=False, replicated_layout=replicated)


def test_a_replicated_layout_shares_its_namespace_across_tp_sizes() -> None:
    """vLLM's test_fs_tier_cross_tp_round_trip: a TP=2 replicated (MLA) writer, a TP=4 reader.

    Every rank of a replicated layout holds the whole latent KV (one copy per row), so the
    rows are the same bytes at any TP size; a head-sharded layout's rows are not.
    """
    assert (namespace_for(_config(2, True), 1, "cpu", True).id
            == namespace_for(_config(4, True), 1, "cpu", True).id)
    assert (namespace_for(_config(2, False), 1, "cpu", False).id
            != namespace_for(_config(4, False), 1, "cpu", False).id)
    assert (namespace_for(_config(2, True), 1, "cpu", True).id
            != namespace_for(_config(2, False), 1, "cpu", False).id)
