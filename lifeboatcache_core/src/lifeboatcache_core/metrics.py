"""Per-tier statistics and their Prometheus export (``lifeboatcache_*``).

Counters live as plain integers on each tier (updated under the tier's lock, on the I/O
threads); one collector registered once per process reads every live cache at scrape time.
That keeps the hot path free of prometheus_client calls and lets tests open many caches in
one process without duplicate-registration errors.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from lifeboatcache_core.cache import TieredCache


@dataclass
class TierStats:
    hits: int = 0
    misses: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt_blocks: int = 0
    incompatible_blocks: int = 0
    errors: int = 0
    promotions: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


COUNTERS = {
    "hits": "Blocks served from this tier",
    "misses": "Lookups this tier could not serve",
    "bytes_read": "Stored bytes read from this tier",
    "bytes_written": "Stored bytes written to this tier",
    "puts": "Blocks stored in this tier",
    "evictions": "Blocks evicted to respect capacity",
    "corrupt_blocks": "Blocks that failed an integrity check (served as misses)",
    "incompatible_blocks": "Blocks written by a codec version this process cannot decode",
    "errors": "I/O errors (served as misses)",
    "promotions": "Blocks copied up into this tier after a lower-tier hit",
}

_caches: weakref.WeakSet[TieredCache] = weakref.WeakSet()
_registered = False
_lock = threading.Lock()


class CacheCollector(Collector):
    """Reads the stats of every live TieredCache in this process at scrape time."""

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counters = {
            name: CounterMetricFamily(f"lifeboatcache_{name}", doc, labels=["tier"]) for name, doc in COUNTERS.items()
        }
        gauges = {
            "blocks": GaugeMetricFamily("lifeboatcache_blocks", "Blocks stored in this tier", labels=["tier"]),
            "bytes_used": GaugeMetricFamily("lifeboatcache_bytes_used", "Stored bytes in this tier", labels=["tier"]),
            "capacity_bytes": GaugeMetricFamily(
                "lifeboatcache_capacity_bytes", "Configured capacity of this tier", labels=["tier"]
            ),
            "tier_up": GaugeMetricFamily("lifeboatcache_tier_up", "1 when the tier passes its probe", labels=["tier"]),
            "index_complete": GaugeMetricFamily(
                "lifeboatcache_index_complete", "1 once the tier's index is fully loaded", labels=["tier"]
            ),
        }
        info = GaugeMetricFamily(
            "lifeboatcache_tier_info", "Tier health reason (value 1)", labels=["tier", "backend", "reason"]
        )
        totals: dict[str, dict[str, float]] = {}
        for cache in list(_caches):
            for tier in cache.all_tiers:
                snap = tier.snapshot()
                acc = totals.setdefault(tier.name, {})
                for key, value in snap.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        acc[key] = acc.get(key, 0) + value
                acc["tier_up"] = acc.get("tier_up", 0) + (1 if tier.up else 0)
                acc["index_complete"] = acc.get("index_complete", 0) + (1 if tier.index_complete else 0)
                info.add_metric([tier.name, tier.backend_name, tier.reason or "ok"], 1)
        for tier_name, values in sorted(totals.items()):
            for name, family in counters.items():
                family.add_metric([tier_name], values.get(name, 0))
            for name, family in gauges.items():
                family.add_metric([tier_name], values.get(name, 0))
        yield from counters.values()
        yield from gauges.values()
        yield info


def track(cache: TieredCache) -> None:
    """Make ``cache`` visible to the process-wide collector (registered on first use)."""
    global _registered
    with _lock:
        if not _registered:
            REGISTRY.register(CacheCollector())
            _registered = True
        _caches.add(cache)
