"""``LifeboatHiCacheStorage``: SGLang's HiCache L3 storage backed by a lifeboatcache TieredCache.

Load it with::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "lifeboatcache",
        "module_path": "lifeboatcache_sglang.storage", "class_name": "LifeboatHiCacheStorage",
        "interface_v1": 1, "lifeboat_config": "/etc/lifeboatcache.toml"}'

SGLang calls one instance per scheduler rank from its prefetch and backup threads. Every
call is a batch (up to 128 pages) that blocks that thread, so each one is handed to the
TieredCache as one batched job (spread over the tiers' I/O threads) and waited for.
A page is reported present only once a tier has stored it whole (the tiers publish a key
after the rename), and a damaged page reads as a miss: SGLang then recomputes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.engine import EngineTexts, open_for_engine
from lifeboatcache_core.keys import BlockKey
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

from lifeboatcache_sglang.host_pages import PageBuffers, PageRegions
from lifeboatcache_sglang.namespace import namespace_for, page_digest
from lifeboatcache_sglang.settings import SGLangStorageSettings, load_lifeboat_config, on_error_of

log = logging.getLogger("lifeboatcache.sglang")
_TEXTS = EngineTexts(
    log=log,
    refuse="lifeboatcache: cannot start the SGLang storage backend: {exc}. "
           "Fix the configuration, or set engine.on_error = 'serve' to serve without the cache",
    serve="lifeboatcache: SGLang storage backend disabled, serving uncached (engine.on_error = 'serve'): %s",
)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A flat byte view of a contiguous host tensor (no copy)."""
    return memoryview(tensor.detach().reshape(-1).view(torch.uint8).numpy())


class _Counters:
    """What SGLang asked and what we answered, so SGLang-side gating can be told from misses."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exists_queried = self.exists_hit = 0
        self.pages_read = self.pages_read_missed = self.pages_written = self.pages_write_failed = 0
        # drained by get_stats() (SGLang's StorageMetrics shape)
        self.prefetch_pgs: list[int] = []
        self.backup_pgs: list[int] = []
        self.prefetch_bandwidth: list[float] = []
        self.backup_bandwidth: list[float] = []

    def as_dict(self) -> dict[str, int]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class LifeboatHiCacheStorage(HiCacheStorage):
    """HiCache storage over a TieredCache; one per scheduler rank."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        self.storage_config = storage_config
        self.mem_pool_host: Any = None
        self.counters = _Counters()
        self.cache: TieredCache | None = None
        self.namespace_id = ""
        extra = storage_config.extra_config

        def prepare() -> LifeboatConfig:
            self.settings = SGLangStorageSettings.from_extra_config(extra)
            return load_lifeboat_config(self.settings)

        def ready(cache: TieredCache) -> None:
            self._set_namespace(cache)
            self._check_replicated_reads(cache)

        self.cache = open_for_engine(prepare, on_error=lambda: on_error_of(extra), texts=_TEXTS, ready=ready)

    # ------------------------------------------------------------------ set-up

    def _set_namespace(self, cache: TieredCache) -> None:
        ns = namespace_for(self.storage_config, self.settings.lifeboat_model_path, self.mem_pool_host)
        self.namespace_id = cache.register_namespace(ns)
        log.info("lifeboatcache: SGLang rank %d/%d uses namespace %s (model %s, layout %s, dtype %s)",
                 self.storage_config.tp_rank, self.storage_config.tp_size, self.namespace_id,
                 ns.model or "?", ns.layout or "?", ns.dtype or "?")

    def _check_replicated_reads(self, cache: TieredCache) -> None:
        """MLA pages are written by one rank and read by all: the readers must see its writes."""
        cfg = self.storage_config
        if cfg.is_mla_model and cfg.tp_size > 1 and not any(t.shared for t in cache.config.tiers):
            log.warning("lifeboatcache: MLA model with TP %d: one rank stores the pages, and no tier is "
                        "`shared = true`, so the other ranks only find pages stored before they started "
                        "(SGLang then counts a miss for all ranks); set shared = true on the persistent tiers",
                        cfg.tp_size)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """The host pool decides the page bytes (dtype, layout, geometry): key by them."""
        super().register_mem_pool_host(mem_pool_host)
        if self.cache is not None:
            self._set_namespace(self.cache)

    @property
    def enabled(self) -> bool:
        return self.cache is not None

    def _keys(self, keys: Sequence[str]) -> list[BlockKey]:
        ns = self.namespace_id
        return [BlockKey(ns, page_digest(k)) for k in keys]

    # ------------------------------------------------------------------ presence

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """Leading pages present (index lookups only; a miss ends the prefix)."""
        if self.cache is None or not keys:
            return 0
        hits = self.cache.contains_prefix(self._keys(keys))
        with self.counters.lock:
            self.counters.exists_queried += len(keys)
            self.counters.exists_hit += hits
        return hits

    # ------------------------------------------------------------------ zero-copy (interface_v1)

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Store pages straight from the host pool; pages already stored are not written again."""
        if self.cache is None or self.mem_pool_host is None or not keys:
            return [False] * len(keys)
        start = time.perf_counter()
        block_keys = self._keys(keys)
        present = self.cache.exists(block_keys)
        todo = [i for i, p in enumerate(present) if not p]
        results = list(present)
        if todo:
            pages = PageBuffers(PageRegions.of(self.mem_pool_host, host_indices, len(keys)), todo)
            pages.gather()
            stored = self.cache.put([block_keys[i] for i in todo], pages.buffers)
            for i, ok in zip(todo, stored, strict=True):
                results[i] = ok
        self._count_write(results, len(todo), start)
        return results

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Read pages straight into the host pool; ``results[i]`` is whether page ``i`` arrived whole."""
        if self.cache is None or self.mem_pool_host is None or not keys:
            return [False] * len(keys)
        start = time.perf_counter()
        pages = PageBuffers(PageRegions.of(self.mem_pool_host, host_indices, len(keys)), range(len(keys)))
        results = self.cache.get(self._keys(keys), pages.buffers)
        pages.scatter([i for i, ok in enumerate(results) if ok])
        self._count_read(results, start, pages.regions.page_bytes)
        return results

    # ------------------------------------------------------------------ generic path (tensors)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any = None,
                  target_sizes: Any = None) -> list[torch.Tensor | None]:
        """Read pages into the caller's flat page tensors (SGLang's dummy pages)."""
        if self.cache is None or not keys or target_locations is None:
            return [None] * len(keys)
        start = time.perf_counter()
        targets = list(target_locations)
        results = self.cache.get(self._keys(keys), [_tensor_bytes(t) for t in targets])
        self._count_read(results, start, targets[0].numel() * targets[0].element_size())
        return [t if ok else None for t, ok in zip(targets, results, strict=True)]

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Store flat page tensors; True only when every page is stored."""
        if self.cache is None or not keys or values is None:
            return False
        start = time.perf_counter()
        block_keys = self._keys(keys)
        present = self.cache.exists(block_keys)
        todo = [i for i, p in enumerate(present) if not p]
        results = list(present)
        if todo:
            tensors = [values[i].contiguous() for i in todo]
            stored = self.cache.put([block_keys[i] for i in todo], [_tensor_bytes(t) for t in tensors])
            for i, ok in zip(todo, stored, strict=True):
                results[i] = ok
        self._count_write(results, len(todo), start)
        return all(results)

    # ------------------------------------------------------------------ stats, lifecycle

    def _count_write(self, results: list[bool], written: int, start: float) -> None:
        failed = results.count(False)
        c = self.counters
        with c.lock:
            c.pages_written += written - failed
            c.pages_write_failed += failed
            if self.storage_config.enable_storage_metrics:
                c.backup_pgs.append(len(results))
                c.backup_bandwidth.append(self._gbps(written, start))
        if failed:
            log.warning("lifeboatcache: %d of %d pages not stored (namespace %s)", failed, len(results),
                        self.namespace_id)

    def _count_read(self, results: list[bool], start: float, page_bytes: int) -> None:
        hits = sum(results)
        c = self.counters
        with c.lock:
            c.pages_read += hits
            c.pages_read_missed += len(results) - hits
            if self.storage_config.enable_storage_metrics:
                c.prefetch_pgs.append(len(results))
                elapsed = max(time.perf_counter() - start, 1e-9)
                c.prefetch_bandwidth.append(hits * page_bytes / elapsed / 1e9)

    def _gbps(self, pages: int, start: float) -> float:
        pool = self.mem_pool_host
        per_token = pool.get_size_per_token() if pool is not None else 0
        page_bytes = per_token * getattr(pool, "page_size", 0)
        return pages * page_bytes / max(time.perf_counter() - start, 1e-9) / 1e9

    def get_stats(self) -> Any:
        """SGLang's ``StorageMetrics`` (pages and GB/s per batch since the last call), for --enable-metrics."""
        from sglang.srt.observability.metrics_collector import StorageMetrics

        metrics = StorageMetrics()
        c = self.counters
        with c.lock:
            for name in ("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth"):
                getattr(metrics, name).extend(getattr(c, name))
                getattr(c, name).clear()
        return metrics

    def stats(self) -> dict[str, Any]:
        """Our counters and the tiers' stats (for logs, the dashboard and tests)."""
        return {"sglang": self.counters.as_dict(), "tiers": self.cache.stats() if self.cache else {}}

    def clear(self) -> None:
        """``POST /hicache/storage-backend/clear``: lifeboatcache keeps its tiers (they are shared and
        persistent); evict with the tier's capacity or ``lifeboatcache`` tools instead."""
        log.warning("lifeboatcache: clear requested; stored pages are kept (tiers are persistent and may be "
                    "shared); lower capacity_gb or remove the tier directory to drop them")

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None
