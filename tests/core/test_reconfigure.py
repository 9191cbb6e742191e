"""TieredCache.apply_config: live capacity/policy/codec/tier changes; restart-only ones reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lifeboatcache_core.config import load_config_dict

from .helpers import blobs, file_tier, keys, open_cache


def changed(cache, **top: Any):  # type: ignore[no-untyped-def]
    data = cache.config.model_dump(mode="json")
    data.update(top)
    return load_config_dict(data)


def test_smaller_capacity_evicts_now_and_limits_later_puts(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(10), blobs(10, 10_000))
        tier = cache.all_tiers[0]
        stored = max(tier.index.values())
        data = cache.config.model_dump(mode="json")
        data["tiers"][0]["capacity_gb"] = 4.5 * stored / 1024**3
        assert cache.apply_config(load_config_dict(data)) == []
        assert tier.capacity == int(4.5 * stored) and tier.used <= tier.capacity
        assert len(tier.index) == 4 and tier.stats.evictions == 6
        assert cache.config.tiers[0].capacity_gb == data["tiers"][0]["capacity_gb"]
        assert any("capacity" in line for line in cache.last_reconfiguration.applied)
        assert sum(cache.exists(keys(10))) == 4
        cache.put(keys(3, start=100), blobs(3, 10_000))
        assert tier.used <= tier.capacity


def test_codec_change_applies_to_new_writes_and_old_blocks_still_read(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        old = blobs(2, 4096)
        cache.put(keys(2), old)
        tier = cache.all_tiers[0]
        policy_before = tier.policy
        data = cache.config.model_dump(mode="json")
        data["tiers"][0]["policy"] = "lru"
        data["tiers"][0]["codec"] = "none"
        assert cache.apply_config(load_config_dict(data)) == []
        assert cache.last_reconfiguration.applied == []  # nothing differed
        assert tier.policy is policy_before
        dest = [bytearray(4096) for _ in range(2)]
        assert cache.get(keys(2), dest) == [True, True] and [bytes(d) for d in dest] == old


def test_policy_replacement_keeps_every_block(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(5), blobs(5, 1000))
        tier = cache.all_tiers[0]
        old_policy = tier.policy
        tier.replace_policy(tier.cfg)
        assert tier.policy is not old_policy and len(tier.policy) == 5
        assert all(k in tier.policy for k in keys(5))


def test_add_reorder_and_remove_tiers(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(2), blobs(2, 1000))
        ram = {"name": "ram", "backend": "dram", "capacity_gb": 0.5}
        data = cache.config.model_dump(mode="json")
        data["tiers"] = [ram, *data["tiers"]]
        assert cache.apply_config(load_config_dict(data)) == []
        assert [t.name for t in cache.all_tiers] == ["ram", "nvme"]
        assert cache.all_tiers[0].up and cache.all_tiers[0].lower is cache.all_tiers[1]
        cache.put(keys(1, start=50), blobs(1, 1000))
        assert cache.all_tiers[0].stats.puts == 1
        # old blocks are still found below, and promoted into the new top tier
        assert cache.get(keys(1), [bytearray(1000)]) == [True]
        cache.drain()
        assert keys(1)[0] in cache.all_tiers[0].index
        # remove the DRAM tier again
        data["tiers"] = data["tiers"][1:]
        cache.apply_config(load_config_dict(data))
        assert [t.name for t in cache.all_tiers] == ["nvme"]
        assert "tier ram removed (its blocks stay in storage)" in cache.last_reconfiguration.applied


def test_removing_the_only_persistent_tier_brings_the_fallback(tmp_path: Path) -> None:
    ram = {"name": "ram", "backend": "dram", "capacity_gb": 0.5}
    with open_cache(tmp_path, ram, file_tier(tmp_path / "t")) as cache:
        data = cache.config.model_dump(mode="json")
        data["tiers"] = data["tiers"][:1]
        cache.apply_config(load_config_dict(data))
        assert [t.name for t in cache.all_tiers] == ["ram"]  # memory-only was asked for explicitly
        data["tiers"].append({**file_tier(tmp_path / "missing"), "path": "/proc/no-such-dir/x"})
        cache.apply_config(load_config_dict(data))
        assert [t.name for t in cache.all_tiers] == ["ram", "nvme", "fallback"]
        assert not cache.all_tiers[1].up and cache.all_tiers[2].up
        # disabling the fallback removes it
        data["fallback_local"]["enabled"] = False
        cache.apply_config(load_config_dict(data))
        assert [t.name for t in cache.all_tiers] == ["ram", "nvme"]


def test_restart_only_changes_are_reported_and_kept_as_running(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        data = cache.config.model_dump(mode="json")
        data["tiers"][0]["path"] = str(tmp_path / "elsewhere")
        data["tiers"][0]["io_threads"] = 2
        data["engine"]["on_error"] = "fail"
        data["dashboard"]["port"] = 9555
        data["promote"] = False
        restart = cache.apply_config(load_config_dict(data))
        assert len(restart) == 3, restart
        assert "tier nvme: backend 'file' -> 'file' or its options changed" in restart[0]
        assert restart[1].startswith("engine:") and restart[2].startswith("dashboard:")
        running = cache.config
        assert running.tiers[0].model_extra["path"] == str(tmp_path / "tier")
        assert running.engine.on_error == "serve" and running.dashboard.port == 9400
        assert running.promote is False
        assert "promote True -> False" in cache.last_reconfiguration.applied


def test_io_threads_change_needs_a_restart(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        data = cache.config.model_dump(mode="json")
        data["tiers"][0]["io_threads"] = 2
        data["tiers"][0]["capacity_gb"] = 2
        restart = cache.apply_config(load_config_dict(data))
        assert restart == ["tier nvme: io_threads 4 -> 2 needs a restart"]
        assert cache.config.tiers[0].io_threads == 4 and cache.config.tiers[0].capacity_gb == 2
