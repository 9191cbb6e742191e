"""Metric families after known operations: counts, bytes, ratios, histograms, node merging."""

from __future__ import annotations

from pathlib import Path

from lifeboatcache_core.metrics import LATENCY_BUCKETS, cache_sample, families, merge_samples
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from .helpers import blobs, file_tier, keys, open_cache


class _OneSample(Collector):
    def __init__(self, sample: dict) -> None:  # type: ignore[type-arg]
        self.sample = sample

    def collect(self):  # type: ignore[no-untyped-def]
        yield from families(self.sample)


def exposition(sample: dict) -> str:  # type: ignore[type-arg]
    registry = CollectorRegistry()
    registry.register(_OneSample(sample))
    return generate_latest(registry).decode()


def value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in the exposition")


def test_known_traffic_gives_exact_counts(tmp_path: Path) -> None:
    dram = {"name": "ram", "backend": "dram", "capacity_gb": 1}
    with open_cache(tmp_path, dram, file_tier(tmp_path / "t")) as cache:
        cache.put(keys(4), blobs(4, 5000))
        assert cache.get(keys(6), [bytearray(5000) for _ in range(6)]) == [True] * 4 + [False] * 2
        cache.record_lookup(tokens_requested=96, tokens_hit=64)
        text = exposition(merge_samples([cache_sample(cache)]))
    assert value(text, "lifeboatcache_lookups_total") == 1
    assert value(text, "lifeboatcache_lookup_blocks_total") == 6
    assert value(text, "lifeboatcache_lookup_hit_blocks_total") == 4
    assert value(text, "lifeboatcache_lookup_miss_blocks_total") == 2
    assert value(text, "lifeboatcache_bytes_served_total") == 4 * 5000
    assert value(text, "lifeboatcache_put_blocks_total") == 4
    assert value(text, 'lifeboatcache_hit_rate{unit="blocks"}') == 4 / 6
    assert value(text, 'lifeboatcache_hit_rate{unit="tokens"}') == 64 / 96
    assert value(text, "lifeboatcache_lookup_hit_tokens_total") == 64
    assert value(text, "lifeboatcache_lookup_miss_tokens_total") == 32
    # the top tier served all four; the misses walked both tiers
    assert value(text, 'lifeboatcache_hits_total{tier="ram"}') == 4
    assert value(text, 'lifeboatcache_misses_total{tier="ram"}') == 2
    assert value(text, 'lifeboatcache_misses_total{tier="nvme"}') == 2
    assert value(text, 'lifeboatcache_puts_total{tier="nvme"}') == 4
    assert value(text, 'lifeboatcache_raw_bytes_written_total{tier="nvme"}') == 4 * 5000
    stored = value(text, 'lifeboatcache_bytes_written_total{tier="nvme"}')
    assert stored > 4 * 5000  # the none codec adds header + meta + trailer
    assert value(text, 'lifeboatcache_compression_ratio{tier="nvme"}') == 4 * 5000 / stored
    assert value(text, 'lifeboatcache_bytes_used{tier="nvme"}') == stored
    assert value(text, 'lifeboatcache_occupancy_ratio{tier="nvme"}') == stored / 1024**3
    assert value(text, 'lifeboatcache_tier_up{tier="nvme"}') == 1
    assert value(text, 'lifeboatcache_index_loading{tier="nvme"}') == 0
    assert 'lifeboatcache_tier_info{backend="file",reason="ok",tier="nvme"} 1.0' in text
    # latency: one job each; per-tier histograms weight each block once
    assert value(text, 'lifeboatcache_job_latency_seconds_count{op="get"}') == 1
    assert value(text, 'lifeboatcache_job_latency_seconds_count{op="put"}') == 1
    assert value(text, 'lifeboatcache_io_latency_seconds_count{op="get",tier="ram"}') == 4
    assert value(text, 'lifeboatcache_io_latency_seconds_count{op="put",tier="nvme"}') == 4
    assert value(text, 'lifeboatcache_io_latency_seconds_bucket{le="+Inf",op="put",tier="nvme"}') == 4
    assert f'le="{LATENCY_BUCKETS[0]!r}"' in text


def test_eviction_and_down_tier_are_exported(tmp_path: Path) -> None:
    small = file_tier(tmp_path / "small", capacity_gb=3 * 12000 / 1024**3)
    with open_cache(tmp_path, small) as cache:
        cache.put(keys(6), blobs(6, 8000))
        cache.all_tiers[0].mark_down("export unreachable (test)")
        text = exposition(merge_samples([cache_sample(cache)]))
    assert value(text, 'lifeboatcache_evictions_total{tier="nvme"}') >= 3
    assert value(text, 'lifeboatcache_blocks{tier="nvme"}') <= 3
    assert value(text, 'lifeboatcache_tier_up{tier="nvme"}') == 0
    assert 'reason="export unreachable (test)"' in text


def test_node_merge_adds_counters_and_respects_shared_tiers(tmp_path: Path) -> None:
    dram = {"name": "ram", "backend": "dram", "capacity_gb": 1}
    with open_cache(tmp_path / "a", dram, file_tier(tmp_path / "shared")) as a, \
            open_cache(tmp_path / "b", dram, file_tier(tmp_path / "shared")) as b:
        a.put(keys(2), blobs(2, 1000))
        b.put(keys(3, start=10), blobs(3, 1000))
        b.get(keys(1, start=10), [bytearray(1000)])
        one, two = cache_sample(a), cache_sample(b)
        merged = merge_samples([one, two])
    assert merged["tiers"]["ram"]["puts"] == 5 and merged["tiers"]["nvme"]["puts"] == 5
    # DRAM is per process: blocks add up; the shared file tier: the largest view wins
    assert merged["tiers"]["ram"]["blocks"] == 5
    assert merged["tiers"]["nvme"]["blocks"] == 3
    assert merged["tiers"]["nvme"]["capacity_bytes"] == one["tiers"]["nvme"]["capacity_bytes"]
    assert merged["cache"]["lookup_blocks"] == 1 and merged["cache"]["put_blocks"] == 5
    assert merged["job_latency"]["put"]["count"] == 2


def test_process_collector_keeps_the_existing_names(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "t", name="names-tier")) as cache:
        cache.put(keys(1), blobs(1, 100))
        text = generate_latest().decode()
    for name in ("hits_total", "misses_total", "bytes_read_total", "bytes_written_total", "puts_total",
                 "evictions_total", "corrupt_blocks_total", "errors_total", "blocks", "bytes_used",
                 "capacity_bytes", "tier_up", "index_complete"):
        assert f'lifeboatcache_{name}{{tier="names-tier"}}' in text


def test_recovery_progress_after_a_restart(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "t")) as cache:
        cache.put(keys(5), blobs(5, 3000))
    with open_cache(tmp_path, file_tier(tmp_path / "t")) as cache:
        assert cache.wait_ready(30)
        text = exposition(merge_samples([cache_sample(cache)]))
    assert value(text, 'lifeboatcache_blocks{tier="nvme"}') == 5
    assert value(text, 'lifeboatcache_index_complete{tier="nvme"}') == 1
    assert value(text, 'lifeboatcache_index_loading{tier="nvme"}') == 0
    assert value(text, 'lifeboatcache_recovery_phase{phase="done",tier="nvme"}') == 1
    assert value(text, 'lifeboatcache_recovery_seconds{tier="nvme"}') >= 0


def test_codec_layout_and_stored_ratio_are_exported(tmp_path: Path) -> None:
    """What the codec saw (name, layout) and what it achieved (ratio) are on /metrics and in the stats."""
    import numpy as np
    from lifeboatcache_core.abc import KVLayout

    x = (np.random.default_rng(6).standard_normal(4 * 8192) * 2).astype(np.float32)
    raw = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    layout = KVLayout("bfloat16", (2, 4, 64, 64), ("kv", "layer", "token", "dim"))
    with open_cache(tmp_path, {**file_tier(tmp_path / "t"), "codec": "lossless"}) as cache:
        cache.put(keys(1), [raw], layout=layout)
        merged = merge_samples([cache_sample(cache)])
    text = exposition(merged)
    described = "bfloat16 (kv, layer, token, dim) = (2, 4, 64, 64)"
    assert merged["tiers"]["nvme"]["codec_layout"] == described
    assert value(text, f'lifeboatcache_tier_codec_info{{codec="lossless@1",layout="{described}",tier="nvme"}}') == 1
    assert value(text, 'lifeboatcache_compression_ratio{tier="nvme"}') > 1.2
