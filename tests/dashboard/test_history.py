"""Recent events come from changes between samples: a tier going down and up, corrupt blocks."""

from __future__ import annotations

from pathlib import Path

from lifeboatcache_core.metrics import cache_sample, merge_samples

from lifeboatcache.dashboard.history import History

from .helpers import open_cache, traffic


def test_events_follow_tier_health_and_damage(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        history = History(lambda: merge_samples([cache_sample(cache)]), keep=3)
        history.observe(history._read_sample())
        traffic(cache, stored=2, looked_up=2)
        tier = cache.all_tiers[0]
        tier.mark_down("export unreachable (test)")
        history.observe(history._read_sample())
        assert tier.open()
        with tier.lock:
            tier.stats.corrupt_blocks += 2
        history.observe(history._read_sample())
        messages = [(e["level"], e["message"]) for e in history.recent_events()]
        assert messages == [("error", "tier nvme is down: export unreachable (test)"),
                            ("info", "tier nvme is up again"),
                            ("warning", "tier nvme: 2 corrupt block(s) set aside")]
        for _ in range(3):
            history.observe(history._read_sample())
        points = history.recent_points()
        assert len(points) == 3 and points[-1]["lookup_hit_blocks"] == 2
        assert points[-1]["tiers"]["nvme"]["capacity_bytes"] == 1024**3
