"""Tiers and caches hand out frozen samples; metrics are pure functions over them (issue 18).

The metrics, the dashboard and the benches read ``Tier.sample()`` / ``TieredCache.sample()``
only, never a tier's attributes: each tier copies what it owns under its own lock.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from lifeboatcache_core.metrics import CACHE_COUNTERS, as_sample, cache_sample, families, merge_samples
from lifeboatcache_core.stats import CACHE_COUNTER_NAMES, OPS, CacheSample, HistogramSample, TierSample

from .helpers import blobs, file_tier, keys, open_cache


def test_a_tier_sample_is_a_frozen_copy_that_agrees_with_itself(tmp_path: Path) -> None:
    dram = {"name": "ram", "backend": "dram", "capacity_gb": 1}
    with open_cache(tmp_path, dram, file_tier(tmp_path / "t")) as cache:
        cache.put(keys(3), blobs(3, 5000))
        assert cache.get(keys(4), [bytearray(5000) for _ in range(4)]) == [True] * 3 + [False]
        before = cache.sample()
        assert [t.name for t in before.tiers] == ["ram", "nvme"]
        nvme = before.tier("nvme")
        assert (nvme.blocks, nvme.counters["puts"], nvme.counters["misses"]) == (3, 3, 1)
        assert nvme.bytes_used == sum(cache.all_tiers[1].index.values()) > 3 * 5000
        assert (nvme.up, nvme.reason, nvme.index_complete, nvme.persistent) == (True, "", True, True)
        assert nvme.backend == "file" and nvme.codec == "none@1" and nvme.policy == "lru"
        assert nvme.recovery["phase"] == "done" and set(nvme.latency) == set(OPS)
        assert before.counters["lookup_blocks"] == 4 and before.counters["lookup_miss_blocks"] == 1
        assert before.job_latency["get"].count == 1
        # frozen: neither the dataclass nor its mappings can be changed by a reader
        with pytest.raises(dataclasses.FrozenInstanceError):
            nvme.blocks = 0  # type: ignore[misc]
        with pytest.raises(TypeError):
            nvme.counters["puts"] = 0  # type: ignore[index]
        with pytest.raises(TypeError):
            before.counters["lookups"] = 0  # type: ignore[index]
        # a copy: later traffic does not show in a sample already taken
        cache.put(keys(2, start=10), blobs(2, 5000))
        assert before.tier("nvme").blocks == 3 and cache.sample().tier("nvme").blocks == 5
        # stats() and health() are the sample's views
        assert cache.stats()["nvme"] == cache.sample().tier("nvme").stats()
        assert cache.health()[1] == cache.sample().tiers[1].health()
        with pytest.raises(KeyError):
            before.tier("nope")


def _hist(count: int) -> HistogramSample:
    return HistogramSample(tuple([count] + [0] * 17), 0.25 * count, count)


def test_metrics_are_computed_from_the_sample_alone() -> None:
    """No cache, no tier: an object whose only member is ``sample()`` is enough for the metrics."""
    tier = TierSample(
        name="nvme", backend="file", codec="none@1", codec_layout="", policy="lru", persistent=True, up=False,
        reason="export unreachable", index_complete=False, index_loading=True, blocks=7, bytes_used=7000,
        capacity_bytes=14000, counters={"hits": 5, "misses": 2, "bytes_written": 1000, "raw_bytes_written": 2000},
        latency={"get": _hist(3)}, recovery={"phase": "listing", "listed": 4, "manifest_rows": 7},
        manifest_write_errors=0,
    )
    counters = dict.fromkeys(CACHE_COUNTER_NAMES, 0) | {"lookup_blocks": 10, "lookup_hit_blocks": 5}
    snapshot = CacheSample(tiers=(tier,), counters=counters, job_latency={"get": _hist(1)})
    only_a_sample = SimpleNamespace(sample=lambda: snapshot)
    sample = cache_sample(only_a_sample)
    assert sample == as_sample(snapshot)
    values = sample["tiers"]["nvme"]
    assert values["tier_up"] == 0 and values["reason"] == "export unreachable" and values["index_loading"] == 1
    assert values["recovery_phase"] == "listing" and values["recovery_listed"] == 4
    assert values["recovery_added_from_files"] == 0
    assert values["latency"]["get"] == {"counts": [3] + [0] * 17, "sum": 0.75, "count": 3}
    merged = merge_samples([sample])
    by_name = {f.name: f for f in families(merged)}
    compression = by_name["lifeboatcache_compression_ratio"].samples[0]
    assert compression.labels == {"tier": "nvme"} and compression.value == 2.0
    info = by_name["lifeboatcache_tier_info"].samples[0]
    assert info.labels == {"tier": "nvme", "backend": "file", "reason": "export unreachable"}
    assert by_name["lifeboatcache_hit_rate"].samples[0].value == 0.5


def test_every_cache_counter_has_its_help_text_in_export_order() -> None:
    assert tuple(CACHE_COUNTERS) == CACHE_COUNTER_NAMES
