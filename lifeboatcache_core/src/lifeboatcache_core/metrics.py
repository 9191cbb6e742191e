"""Prometheus export (``lifeboatcache_*``): pure functions over the caches' samples.

Counters live as plain integers on each tier and cache (:mod:`lifeboatcache_core.stats`); at
scrape time one collector, registered once per process, asks every live cache for its frozen
``TieredCache.sample()`` and turns it into metric families. Nothing here reads a tier: what a
tier reports is what it put in its ``Tier.sample()``. That keeps the hot path free of
prometheus_client calls and lets tests open many caches in one process without
duplicate-registration errors.

Scrapes go through JSON-able *samples*: one dict per cache (:func:`as_sample` of a
``CacheSample``). The in-process collector turns the samples of this process into metric
families; the node endpoint (the app's :mod:`lifeboatcache.dashboard.metrics_node`) does the
same with the samples other engine processes on the node spool to a shared directory, so one
endpoint serves the whole node.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from lifeboatcache_core.stats import LATENCY_BUCKETS, OPS, CacheSample, TierSample

__all__ = [
    "CACHE_COUNTERS", "COUNTERS", "LATENCY_BUCKETS", "OPS", "RECOVERY_GAUGES", "TIER_GAUGES", "Sample", "Sampled",
    "as_sample", "cache_sample", "derived", "families", "merge_samples", "process_samples", "staging_summary", "track",
    "tracked", "untrack",
]


class Sampled(Protocol):
    """What the collector needs of a cache: its frozen sample (``TieredCache`` is one)."""

    def sample(self) -> CacheSample: ...


Sample = dict[str, Any]


COUNTERS = {
    "hits": "Blocks served from this tier",
    "misses": "Lookups this tier could not serve",
    "bytes_read": "Stored bytes read from this tier",
    "bytes_written": "Stored bytes written to this tier",
    "puts": "Blocks stored in this tier",
    "evictions": "Blocks evicted to respect capacity",
    "corrupt_blocks": "Blocks that failed an integrity check (served as misses)",
    "incompatible_blocks": "Blocks written by a codec version this process cannot decode",
    "tampered_blocks": "Blocks of a keyed tier whose integrity tag did not verify (served as misses)",
    "errors": "I/O errors (served as misses)",
    "promotions": "Blocks copied up into this tier after a lower-tier hit",
    "raw_bytes_written": "Raw (engine) bytes of the blocks stored in this tier, before the codec",
    "declined": "Blocks a full tier declined rather than evict a shallower prefix block (keep_prefixes)",
    "bypassed": "New blocks not stored because the eviction policy's admit() refused them",
    "compacted": "Blocks stored raw below codec_from_fill and re-encoded in place once the tier filled",
    "compacted_bytes_saved": "Stored bytes freed by re-encoding raw blocks in place (compaction)",
    "compacted_bytes_written": "Stored bytes compaction wrote (the re-encoded blocks; not in bytes_written)",
}

#: per-tier gauges: name -> help
TIER_GAUGES = {
    "blocks": "Blocks stored in this tier",
    "bytes_used": "Stored bytes in this tier",
    "capacity_bytes": "Configured capacity of this tier",
    "tier_up": "1 when the tier passes its probe",
    "index_complete": "1 once the tier's index is fully loaded",
    "index_loading": "1 while the tier's index is being rebuilt from storage (recovery in progress)",
}

#: progress of the last index rebuild (restart recovery), per tier; the largest view wins across processes
RECOVERY_GAUGES = {
    "manifest_rows": "Index entries read from the manifest by the last index rebuild",
    "listed": "Stored blocks listed from storage by the last index rebuild",
    "added_from_files": "Blocks the last index rebuild found in storage but not in the manifest",
    "missing_files": "Manifest rows the last index rebuild found without a stored block",
    "seconds": "Duration of the last index rebuild so far",
}

#: cache-level counters (no tier label): name -> help
CACHE_COUNTERS = {
    "lookups": "Get requests (batches) from the engine",
    "lookup_blocks": "Blocks the engine asked for",
    "lookup_hit_blocks": "Blocks served to the engine from any tier",
    "lookup_miss_blocks": "Blocks the engine asked for that no tier could serve",
    "bytes_served": "Raw bytes written into the engine's buffers",
    "lookup_tokens": "Tokens the engine looked up (reported by the adapter)",
    "lookup_hit_tokens": "Tokens the engine got from the cache instead of recomputing (reported by the adapter)",
    "lookup_miss_tokens": "Tokens the engine looked up and had to recompute (reported by the adapter)",
    "put_blocks": "Blocks the engine offered for storage",
    "unstable_skipped": "Blocks not stored because the engine reused their memory before we copied it",
    "staged_bytes": "Raw bytes of blocks predictive staging copied up into a stage = true tier",
    "staged_used_bytes": "Staged raw bytes the engine then asked for (staging that paid off)",
    "staged_wasted_bytes": "Staged raw bytes nobody asked for by their deadline, or released (taken back)",
    "staged_late_arrivals": "Sessions that returned while some of their blocks were still below the top staging tier",
}


# ----------------------------------------------------------------------------- samples


def tier_values(tier: TierSample) -> dict[str, Any]:
    """One tier's part of a JSON sample: its counters and gauges, health, names and histograms."""
    values: dict[str, Any] = tier.stats()
    values.update(
        tier_up=1 if tier.up else 0,
        index_complete=1 if tier.index_complete else 0,
        index_loading=1 if tier.index_loading else 0,
        persistent=tier.persistent,
        backend=tier.backend,
        codec=tier.codec,
        policy=tier.policy,
        reason=tier.reason or "ok",
        latency={op: hist.as_dict() for op, hist in tier.latency.items()},
    )
    values.update({f"recovery_{name}": tier.recovery.get(name, 0) or 0 for name in RECOVERY_GAUGES})
    values["recovery_phase"] = str(tier.recovery.get("phase") or ("done" if tier.index_complete else "pending"))
    return values


def as_sample(snapshot: CacheSample) -> Sample:
    """Everything the metrics need from one cache's snapshot, as plain JSON-able values."""
    return {
        "tiers": {tier.name: tier_values(tier) for tier in snapshot.tiers},
        "cache": dict(snapshot.counters),
        "job_latency": {op: hist.as_dict() for op, hist in snapshot.job_latency.items()},
    }


def cache_sample(cache: Sampled) -> Sample:
    """:func:`as_sample` of ``cache.sample()``."""
    return as_sample(cache.sample())


def process_samples() -> list[Sample]:
    """One sample per live TieredCache of this process."""
    return [cache_sample(cache) for cache in list(_caches)]


def _add_hist(acc: dict[str, Any], hist: dict[str, Any]) -> None:
    if not acc:
        acc.update(counts=[0] * len(hist["counts"]), sum=0.0, count=0)
    acc["counts"] = [a + b for a, b in zip(acc["counts"], hist["counts"], strict=True)]
    acc["sum"] += hist["sum"]
    acc["count"] += hist["count"]


def merge_samples(samples: Iterable[Sample]) -> Sample:
    """Combine samples (caches, or processes of a node) into one.

    Counters and histograms add up. Gauges of a tier add up when the tier is process-private
    (DRAM: each process holds its own blocks) and take the largest value when it is persistent
    (processes of a node share the directory, so adding would count blocks twice). A tier is up
    only when every process sees it up; the reasons of those that do not are kept.
    """
    tiers: dict[str, dict[str, Any]] = {}
    cache: dict[str, int] = dict.fromkeys(CACHE_COUNTERS, 0)
    job_latency: dict[str, dict[str, Any]] = {op: {} for op in OPS}
    for sample in samples:
        for name, value in sample["cache"].items():
            cache[name] = cache.get(name, 0) + value
        for op, hist in sample["job_latency"].items():
            _add_hist(job_latency.setdefault(op, {}), hist)
        for tier_name, values in sample["tiers"].items():
            acc = tiers.get(tier_name)
            if acc is None:
                acc = tiers[tier_name] = {
                    **dict.fromkeys(COUNTERS, 0), **dict.fromkeys(TIER_GAUGES, 0), "tier_up": 1,
                    "index_complete": 1, "latency": {op: {} for op in OPS}, "reasons": [],
                    "persistent": values["persistent"], "backend": values["backend"],
                    "codec": values["codec"], "policy": values["policy"], "codec_layout": "",
                }
            for name in COUNTERS:
                acc[name] += values.get(name, 0)
            for name in ("blocks", "bytes_used", "capacity_bytes", "index_loading"):
                value = values.get(name, 0)
                acc[name] = max(acc[name], value) if values["persistent"] else acc[name] + value
            for name in RECOVERY_GAUGES:
                acc[f"recovery_{name}"] = max(acc.get(f"recovery_{name}", 0), values.get(f"recovery_{name}", 0))
            phase = values.get("recovery_phase", "done")
            if acc.get("recovery_phase", "done") == "done":
                acc["recovery_phase"] = phase  # a process still recovering shows its phase
            acc["codec_layout"] = acc["codec_layout"] or values.get("codec_layout", "")
            acc["tier_up"] = min(acc["tier_up"], values["tier_up"])
            acc["index_complete"] = min(acc["index_complete"], values["index_complete"])
            if values["reason"] != "ok" and values["reason"] not in acc["reasons"]:
                acc["reasons"].append(values["reason"])
            for op, hist in values["latency"].items():
                _add_hist(acc["latency"].setdefault(op, {}), hist)
    for acc in tiers.values():
        acc["reason"] = "; ".join(acc.pop("reasons")) or "ok"
    return {"tiers": tiers, "cache": cache, "job_latency": job_latency}


def staging_summary(cache: dict[str, int]) -> dict[str, Any]:
    """What predictive staging did, from a sample's cache counters (shares None before anything was staged).

    Every staged copy ends in exactly one of three states: used (the engine asked for it),
    wasted (taken back unused), or still held for its session; so ``held_bytes`` is what is
    staged now and waiting, and ``used_share + wasted_share`` is below 1 by the held share.
    """
    staged = cache.get("staged_bytes", 0)
    used = cache.get("staged_used_bytes", 0)
    wasted = cache.get("staged_wasted_bytes", 0)
    return {
        "staged_bytes": staged,
        "used_bytes": used,
        "wasted_bytes": wasted,
        "held_bytes": max(0, staged - used - wasted),
        "late_arrivals": cache.get("staged_late_arrivals", 0),
        "used_share": used / staged if staged else None,
        "wasted_share": wasted / staged if staged else None,
    }


def derived(sample: Sample) -> dict[str, Any]:
    """Ratios computed from a merged sample: hit rates, compression, occupancy (0 when undefined), staging."""
    c = sample["cache"]
    return {
        "hit_rate_blocks": c["lookup_hit_blocks"] / c["lookup_blocks"] if c["lookup_blocks"] else 0.0,
        "hit_rate_tokens": c["lookup_hit_tokens"] / c["lookup_tokens"] if c["lookup_tokens"] else 0.0,
        "staging": staging_summary(c),
        "tiers": {
            name: {
                "compression_ratio": t["raw_bytes_written"] / t["bytes_written"] if t["bytes_written"] else 0.0,
                "occupancy": t["bytes_used"] / t["capacity_bytes"] if t["capacity_bytes"] else 0.0,
            }
            for name, t in sample["tiers"].items()
        },
    }


# ----------------------------------------------------------------------------- families

_Family = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily


def _buckets(hist: dict[str, Any]) -> list[tuple[str, float]]:
    out, running = [], 0
    for bound, count in zip(LATENCY_BUCKETS, hist["counts"], strict=False):
        running += count
        out.append((repr(bound), running))
    out.append(("+Inf", hist["count"]))
    return out


def families(sample: Sample) -> Iterator[_Family]:
    """The ``lifeboatcache_*`` metric families of one merged sample."""
    ratios = derived(sample)
    counters = {
        name: CounterMetricFamily(f"lifeboatcache_{name}", doc, labels=["tier"]) for name, doc in COUNTERS.items()
    }
    gauges = {
        name: GaugeMetricFamily(f"lifeboatcache_{name}", doc, labels=["tier"]) for name, doc in TIER_GAUGES.items()
    }
    compression = GaugeMetricFamily(
        "lifeboatcache_compression_ratio", "Raw bytes / stored bytes written to this tier (0 before any write)",
        labels=["tier"],
    )
    occupancy = GaugeMetricFamily(
        "lifeboatcache_occupancy_ratio", "Stored bytes / capacity of this tier", labels=["tier"]
    )
    info = GaugeMetricFamily(
        "lifeboatcache_tier_info", "Tier health reason (value 1)", labels=["tier", "backend", "reason"]
    )
    codec_info = GaugeMetricFamily(
        "lifeboatcache_tier_codec_info",
        "The tier's codec and the KV layout of the last block it encoded (value 1; layout empty before any)",
        labels=["tier", "codec", "layout"],
    )
    recovery = {
        name: GaugeMetricFamily(f"lifeboatcache_recovery_{name}", doc, labels=["tier"])
        for name, doc in RECOVERY_GAUGES.items()
    }
    recovery_phase = GaugeMetricFamily(
        "lifeboatcache_recovery_phase", "Phase of the tier's index rebuild (value 1; done when finished)",
        labels=["tier", "phase"],
    )
    io_latency = HistogramMetricFamily(
        "lifeboatcache_io_latency_seconds",
        "Per-block I/O time (encode/decode + storage) of each tier, observed once per batch slice",
        labels=["tier", "op"],
    )
    for tier_name, values in sorted(sample["tiers"].items()):
        for name, family in counters.items():
            family.add_metric([tier_name], values.get(name, 0))
        for name, family in gauges.items():
            family.add_metric([tier_name], values.get(name, 0))
        compression.add_metric([tier_name], ratios["tiers"][tier_name]["compression_ratio"])
        occupancy.add_metric([tier_name], ratios["tiers"][tier_name]["occupancy"])
        info.add_metric([tier_name, values["backend"], values["reason"]], 1)
        codec_info.add_metric([tier_name, values["codec"], values.get("codec_layout", "")], 1)
        for name, family in recovery.items():
            family.add_metric([tier_name], values.get(f"recovery_{name}", 0))
        recovery_phase.add_metric([tier_name, values.get("recovery_phase", "done")], 1)
        for op, hist in sorted(values["latency"].items()):
            if hist:
                io_latency.add_metric([tier_name, op], _buckets(hist), hist["sum"])
    yield from counters.values()
    yield from gauges.values()
    yield from (compression, occupancy, info, codec_info, io_latency, recovery_phase)
    yield from recovery.values()
    for name, doc in CACHE_COUNTERS.items():
        family = CounterMetricFamily(f"lifeboatcache_{name}", doc)
        family.add_metric([], sample["cache"].get(name, 0))
        yield family
    hit_rate = GaugeMetricFamily(
        "lifeboatcache_hit_rate", "Share of looked-up blocks/tokens served from the cache (since start)",
        labels=["unit"],
    )
    hit_rate.add_metric(["blocks"], ratios["hit_rate_blocks"])
    hit_rate.add_metric(["tokens"], ratios["hit_rate_tokens"])
    yield hit_rate
    job_latency = HistogramMetricFamily(
        "lifeboatcache_job_latency_seconds", "Submit-to-finish time of engine put/get batches", labels=["op"]
    )
    for op, hist in sorted(sample["job_latency"].items()):
        if hist:
            job_latency.add_metric([op], _buckets(hist), hist["sum"])
    yield job_latency


# ----------------------------------------------------------------------------- collectors

_caches: weakref.WeakSet[Sampled] = weakref.WeakSet()
_registered = False
_lock = threading.Lock()


class CacheCollector(Collector):
    """Reads the stats of every live TieredCache in this process at scrape time."""

    def collect(self) -> Iterator[_Family]:
        yield from families(merge_samples(process_samples()))


def track(cache: Sampled) -> None:
    """Make ``cache`` visible to the process-wide collector (registered on first use)."""
    global _registered
    with _lock:
        if not _registered:
            REGISTRY.register(CacheCollector())
            _registered = True
        _caches.add(cache)


def tracked() -> list[Sampled]:
    """The caches open in this process: for an in-process driver that has no handle on the cache
    an engine adapter opened (the vLLM offline runner's cache steps)."""
    with _lock:
        return list(_caches)


def untrack(cache: Sampled) -> None:
    """Stop exporting ``cache`` (it was closed): its numbers leave the next scrape."""
    with _lock:
        _caches.discard(cache)
