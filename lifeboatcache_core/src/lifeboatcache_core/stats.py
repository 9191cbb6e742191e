"""Counters, latency histograms and the frozen samples tiers and caches hand out.

The counters are plain integers a :class:`~lifeboatcache_core.tier.Tier` bumps under its own
lock on its I/O threads (the hot path pays an add, no call into prometheus_client). Everything
else reads them through *samples*: ``Tier.sample()`` and ``TieredCache.sample()`` copy what
they own, each under its own lock, into the frozen :class:`TierSample` / :class:`CacheSample`
below, and :mod:`lifeboatcache_core.metrics`, the dashboard and the benches read only those.
So the owner decides what is consistent (counters, index size and capacity come from one lock
hold) and no reader touches a tier's attributes. This module imports nothing of the core: it
sits under the tier, the cache and the metrics alike.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from types import MappingProxyType
from typing import Any

#: upper bounds (seconds) of the latency histograms: 50 µs .. 10 s
LATENCY_BUCKETS: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
OPS = ("put", "get")

#: the cache-level counters, in export order (``lookup_miss_*`` are derived, not stored)
CACHE_COUNTER_NAMES = (
    "lookups", "lookup_blocks", "lookup_hit_blocks", "lookup_miss_blocks", "bytes_served", "lookup_tokens",
    "lookup_hit_tokens", "lookup_miss_tokens", "put_blocks", "unstable_skipped", "staged_bytes",
    "staged_used_bytes", "staged_wasted_bytes", "staged_late_arrivals",
)


class StoreOutcome(Enum):
    """What ``Tier.store`` did with one block.

    Truthy exactly when the tier holds the block after the call (``STORED``, ``HELD``), so
    ``if tier.store(...)`` reads as "the tier has it". The falsy three are told apart for the
    caller that acts on them: a bypassed block goes to the write-back tier below
    (``TieredCache.submit_put``); one declined for room or failed does not.
    """

    STORED = "stored"  #: written now (``stats.puts``)
    HELD = "held"  #: already indexed (content-addressed: the same bytes); only touched
    BYPASSED = "bypassed"  #: the policy's ``admit`` said no: nothing stored, nothing evicted (``stats.bypassed``)
    DECLINED = "declined"  #: no room: too big, a victim refused (``keep_prefixes``, ``evictable``), or full
    FAILED = "failed"  #: the tier is down, or the codec, backend or a shared store failed

    def __bool__(self) -> bool:
        return self is StoreOutcome.STORED or self is StoreOutcome.HELD


@dataclass
class TierStats:
    """A tier's counters: written by that tier only, under its lock."""

    hits: int = 0
    misses: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt_blocks: int = 0
    incompatible_blocks: int = 0
    tampered_blocks: int = 0
    errors: int = 0
    promotions: int = 0
    raw_bytes_written: int = 0
    declined: int = 0
    bypassed: int = 0
    compacted: int = 0
    compacted_bytes_saved: int = 0
    compacted_bytes_written: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class HistogramSample:
    """A :class:`LatencyHistogram` at one moment: per-bucket counts (last: above the largest bound)."""

    counts: tuple[int, ...]
    total: float
    count: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON form the node's metrics spool and :func:`metrics.merge_samples` use."""
        return {"counts": list(self.counts), "sum": self.total, "count": self.count}


class LatencyHistogram:
    """A fixed-bucket histogram of plain ints: ``observe`` is one bisect and two adds under a lock.

    Observed once per batch slice or job, never per block, so it stays off the per-block path.
    """

    __slots__ = ("_lock", "count", "counts", "total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # last slot: above the largest bound
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float, weight: int = 1) -> None:
        """Record ``weight`` events that each took ``seconds``."""
        slot = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            self.counts[slot] += weight
            self.total += seconds * weight
            self.count += weight

    def sample(self) -> HistogramSample:
        with self._lock:
            return HistogramSample(tuple(self.counts), self.total, self.count)


@dataclass
class CacheStats:
    """What one TieredCache did for the engine, across tiers (updated once per batch slice)."""

    lookups: int = 0
    lookup_blocks: int = 0
    lookup_hit_blocks: int = 0
    bytes_served: int = 0
    lookup_tokens: int = 0
    lookup_hit_tokens: int = 0
    put_blocks: int = 0
    unstable_skipped: int = 0
    staged_bytes: int = 0
    staged_used_bytes: int = 0
    staged_wasted_bytes: int = 0
    staged_late_arrivals: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    job_latency: dict[str, LatencyHistogram] = field(
        default_factory=lambda: {op: LatencyHistogram() for op in OPS}, repr=False, compare=False
    )

    def add(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def counters(self) -> dict[str, int]:
        """Every cache counter of :data:`CACHE_COUNTER_NAMES` at one moment, misses derived."""
        with self.lock:
            out = {name: getattr(self, name) for name in CACHE_COUNTER_NAMES if not name.startswith("lookup_miss_")}
        out["lookup_miss_blocks"] = out["lookup_blocks"] - out["lookup_hit_blocks"]
        out["lookup_miss_tokens"] = out["lookup_tokens"] - out["lookup_hit_tokens"]
        return {name: out[name] for name in CACHE_COUNTER_NAMES}


def frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a private copy of ``mapping``: a sample's readers cannot change it."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class TierSample:
    """One tier at one moment, filled by the tier itself (``Tier.sample()``).

    The counters, block count, bytes used, capacity and health come from one hold of the
    tier's lock, so they agree with each other (``bytes_used`` is the bytes of ``blocks``).
    """

    name: str
    backend: str
    codec: str  # tag, name@version, of the codec new writes use
    codec_layout: str  # the KV layout of the last block encoded ("" before any), ``tier.describe_layout``
    policy: str
    persistent: bool
    up: bool
    reason: str  # why the tier is down ("" when up)
    index_complete: bool
    index_loading: bool
    blocks: int
    bytes_used: int
    capacity_bytes: int
    counters: Mapping[str, int]  # every :class:`TierStats` field
    latency: Mapping[str, HistogramSample]  # per op (``OPS``): per-block I/O time, observed per slice
    recovery: Mapping[str, Any]  # the last index rebuild's progress (``RecoveryProgress.as_dict()``)
    manifest_write_errors: int  # failed manifest flushes (rows are kept and retried)

    def stats(self) -> dict[str, Any]:
        """``TieredCache.stats()``'s per-tier dict: the counters, ``blocks``, ``bytes_used``,
        ``capacity_bytes`` and ``codec_layout``."""
        return {**self.counters, "blocks": self.blocks, "bytes_used": self.bytes_used,
                "capacity_bytes": self.capacity_bytes, "codec_layout": self.codec_layout}

    def health(self) -> dict[str, Any]:
        """``TieredCache.health()``'s per-tier dict."""
        return {"tier": self.name, "backend": self.backend, "up": self.up, "reason": self.reason,
                "persistent": self.persistent, "index_complete": self.index_complete,
                "recovery": dict(self.recovery), "manifest_write_errors": self.manifest_write_errors}


@dataclass(frozen=True)
class CacheSample:
    """One cache at one moment (``TieredCache.sample()``): its tiers top first, fallback last."""

    tiers: tuple[TierSample, ...]
    counters: Mapping[str, int]  # every name of :data:`CACHE_COUNTER_NAMES`
    job_latency: Mapping[str, HistogramSample]  # per op: submit-to-finish time of engine batches

    def tier(self, name: str) -> TierSample:
        """The sample of tier ``name`` (KeyError when the cache has none of that name)."""
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(name)
