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

Hybrid models (Mamba/linear attention, sliding window, DSA indexers) add sidecar host pools
that SGLang's ``HybridCacheController`` moves with the v2 calls (``batch_exists_v2``,
``batch_get_v2``, ``batch_set_v2``): their pages are blocks of their own in the same
namespace, keyed by the page hash and the pool's tag (``namespace.pool_digest``), read and
written straight from/to the pool's memory like the KV pages of v1.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.engine import EngineTexts, open_for_engine
from lifeboatcache_core.keys import BlockKey
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)

from lifeboatcache_sglang import hit_policy
from lifeboatcache_sglang.host_pages import PageBuffers, PageRegions, view_of
from lifeboatcache_sglang.namespace import namespace_for, page_digest, pool_digest, sidecar_pool_tag
from lifeboatcache_sglang.settings import SGLangStorageSettings, load_lifeboat_config, on_error_of

log = logging.getLogger("lifeboatcache.sglang")
_TEXTS = EngineTexts(
    log=log,
    refuse="lifeboatcache: cannot start the SGLang storage backend: {exc}. "
           "Fix the configuration, or set engine.on_error = 'serve' to serve without the cache",
    serve="lifeboatcache: SGLang storage backend disabled, serving uncached (engine.on_error = 'serve'): %s",
)


def _is_address(location: Any) -> bool:
    """Whether a ``target_location`` is a memory address (Mooncake's form) rather than a tensor."""
    return isinstance(location, int) and not isinstance(location, bool)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A flat byte view of a contiguous host tensor (no copy)."""
    return memoryview(tensor.detach().reshape(-1).view(torch.uint8).numpy())


class _Counters:
    """What SGLang asked and what we answered, so SGLang-side gating can be told from misses."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exists_queried = self.exists_hit = 0
        self.pages_read = self.pages_read_missed = self.pages_written = self.pages_write_failed = 0
        # v2 sidecar pools (Mamba/SWA/indexer pages of hybrid models), all pools together
        self.sidecar_exists_queried = self.sidecar_exists_hit = 0
        self.sidecar_pages_read = self.sidecar_pages_read_missed = 0
        self.sidecar_pages_written = self.sidecar_pages_write_failed = 0
        # drained by get_stats() (SGLang's StorageMetrics shape)
        self.prefetch_pgs: list[int] = []
        self.backup_pgs: list[int] = []
        self.prefetch_bandwidth: list[float] = []
        self.backup_bandwidth: list[float] = []

    def as_dict(self) -> dict[str, int]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class _SidecarPool:
    """A registered v2 host pool: how its pages are keyed and how their bytes are reached.

    ``regions``: the pool describes each page as memory regions (``get_page_buffer_meta``),
    so pages are read and written in place (gathered when a page has several regions).
    ``flat``: the pool has no zero-copy meta (Mamba pools with slot side state, layouts it
    refuses): the page goes through ``get_data_page`` / ``set_from_flat_data_page``, one copy.
    The choice depends only on the pool's geometry, and it is part of the key.
    """

    def __init__(self, name: str, pool: Any, storage_config: HiCacheStorageConfig) -> None:
        self.name = name
        self.pool = pool
        self.page_size = int(getattr(pool, "page_size", 1) or 1)
        try:
            PageRegions.of(pool, torch.arange(self.page_size, dtype=torch.int64), 1)
            self.io = "regions"
        except (NotImplementedError, ValueError, AttributeError, TypeError, AssertionError):
            self.io = "flat"
        self.tag = sidecar_pool_tag(name, pool, storage_config, self.io)

    def digests(self, keys: Sequence[str]) -> list[bytes]:
        return [pool_digest(self.tag, k) for k in keys]

    def buffers(self, host_indices: torch.Tensor, n_pages: int, pages: Sequence[int],
                for_write: bool) -> tuple[list[memoryview], Any]:
        """Buffers for ``pages`` (indices into the transfer) and what ``finish_read`` needs."""
        if self.io == "regions":
            regions = PageBuffers(PageRegions.of(self.pool, host_indices, n_pages), pages)
            if for_write:
                regions.gather()
            return regions.buffers, regions
        slots = [int(host_indices[p * self.page_size]) for p in pages]
        if for_write:
            tensors = [self.pool.get_data_page(slot, flat=True).contiguous().view(torch.uint8) for slot in slots]
        else:
            tensors = [self.pool.get_dummy_flat_data_page().view(torch.uint8) for _ in slots]
        return [_tensor_bytes(t) for t in tensors], (slots, tensors)

    def finish_read(self, state: Any, rows: Sequence[int]) -> None:
        """Move the rows that arrived whole into the pool (regions: scatter; flat: set the page)."""
        if self.io == "regions":
            state.scatter(rows)
            return
        slots, tensors = state
        for row in rows:
            self.pool.set_from_flat_data_page(slots[row], tensors[row])


class LifeboatHiCacheStorage(HiCacheStorage):
    """HiCache storage over a TieredCache; one per scheduler rank."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        self.storage_config = storage_config
        self.mem_pool_host: Any = None
        self.registered_pools: dict[Any, Any] = {}
        self._sidecars: dict[str, _SidecarPool] = {}
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

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A host pool of a hybrid model's group (SGLang registers every entry, the KV anchor too).

        The KV anchor keeps the v1 path; every other pool becomes a sidecar whose pages are
        stored as blocks of their own, keyed by pool name and geometry.
        """
        self.registered_pools[host_pool_name] = host_pool
        name = _pool_name(host_pool_name)
        if name == PoolName.KV.value:
            return
        sidecar = _SidecarPool(name, host_pool, self.storage_config)
        self._sidecars[name] = sidecar
        log.info("lifeboatcache: SGLang rank %d registered host pool %s (%s, page %d, %s)",
                 self.storage_config.tp_rank, name, type(host_pool).__name__, sidecar.page_size, sidecar.io)

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

    # ------------------------------------------------------------------ hybrid pools (v2)

    def _sidecar_keys(self, sidecar: _SidecarPool, keys: Sequence[str]) -> list[BlockKey]:
        ns = self.namespace_id
        return [BlockKey(ns, d) for d in sidecar.digests(keys)]

    def _logical_anchor(self) -> bool:
        """DeepSeek-V4's anchor pool owns indices but no bytes: the sidecars carry every page."""
        pool = self.mem_pool_host
        return pool is not None and hasattr(pool, "kv_buffer") and pool.kv_buffer is None

    def batch_exists_v2(self, keys: list[str], pool_transfers: list[PoolTransfer] | None = None,
                        extra_info: HiCacheStorageExtraInfo | None = None) -> PoolTransferResult:
        """The usable prefix of a hybrid model: the KV prefix, cut to what every sidecar can restore.

        Index lookups only. ``restorable_prefix_pages`` is the full set (a trailing-window pool
        leaves holes: 5 restorable, 3 and 4 not), which SGLang intersects across ranks.
        """
        if self.cache is None or not keys:
            return PoolTransferResult(0, {}, [])
        kv_pages = len(keys) if self._logical_anchor() else self.batch_exists(keys, extra_info)
        hit_count: dict[Any, int] = {PoolName.KV: kv_pages} if kv_pages else {}
        verdicts: list[hit_policy.PoolVerdict] = []
        for transfer in pool_transfers or []:
            verdict = self._pool_verdict(transfer, keys, kv_pages)
            if verdict.boundary:
                hit_count[transfer.name] = verdict.boundary
            verdicts.append(verdict)
        restorable = hit_policy.fold(kv_pages, verdicts)
        return PoolTransferResult(restorable[-1] if restorable else 0, hit_count, restorable)

    def _pool_verdict(self, transfer: PoolTransfer, keys: list[str], kv_pages: int) -> hit_policy.PoolVerdict:
        policy = PoolHitPolicy(transfer.hit_policy)
        sidecar = self._sidecars.get(_pool_name(transfer.name))
        if policy == PoolHitPolicy.BLOCK_GROUPS:
            pool_keys = list(transfer.keys) if transfer.keys else keys
            present = self._present(sidecar, pool_keys)
            return hit_policy.block_groups(present, transfer.block_pages, transfer.group_pages)
        present = self._present(sidecar, keys[:kv_pages])
        if policy == PoolHitPolicy.ALL_PAGES:
            return hit_policy.all_pages(present, kv_pages)
        if policy == PoolHitPolicy.TRAILING_PAGES:
            return hit_policy.trailing_pages(present, kv_pages, len(transfer.keys) if transfer.keys else 1)
        raise ValueError(f"unsupported pool hit policy: {transfer.hit_policy}")

    def _present(self, sidecar: _SidecarPool | None, keys: Sequence[str]) -> list[bool]:
        if sidecar is None or self.cache is None or not keys:
            return [False] * len(keys)
        present = self.cache.exists(self._sidecar_keys(sidecar, keys))
        with self.counters.lock:
            self.counters.sidecar_exists_queried += len(keys)
            self.counters.sidecar_exists_hit += sum(present)
        return present

    def _transfer_plan(self, transfer: PoolTransfer) -> tuple[_SidecarPool, list[str]] | None:
        """The sidecar and keys of one transfer, or None when it cannot be served (logged)."""
        name = _pool_name(transfer.name)
        sidecar = self._sidecars.get(name)
        keys = list(transfer.keys or [])
        if sidecar is None:
            log.error("lifeboatcache: v2 transfer for host pool %s, which SGLang never registered", name)
            return None
        indices = transfer.host_indices
        expected = len(keys) * sidecar.page_size
        if indices is None or indices.numel() != expected:
            log.error("lifeboatcache: pool %s transfer has %d host indices for %d pages of %d slots",
                      name, 0 if indices is None else indices.numel(), len(keys), sidecar.page_size)
            return None
        return sidecar, keys

    def _sidecar_transfers(self, transfers: list[PoolTransfer], results: dict[Any, list[bool]],
                           kv_path: Callable[..., list[bool]], extra_info: HiCacheStorageExtraInfo | None,
                           ) -> Iterator[tuple[PoolTransfer, _SidecarPool, list[str]]]:
        """The sidecar transfers to carry out, with their pool and keys; answers the rest in ``results``.

        The KV pool goes through the v1 path (``kv_path``); a sidecar transfer with no keys or no
        usable plan (no cache, an unregistered pool, mismatched indices) fails page by page.
        """
        for transfer in transfers:
            keys = list(transfer.keys or [])
            if _pool_name(transfer.name) == PoolName.KV.value:
                results[transfer.name] = kv_path(keys, transfer.host_indices, extra_info)
                continue
            plan = self._transfer_plan(transfer) if self.cache is not None else None
            if plan is None or not keys:
                results[transfer.name] = [False] * len(keys)
                continue
            yield transfer, *plan

    def batch_set_v2(self, transfers: list[PoolTransfer],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> dict[Any, list[bool]]:
        """Store each pool's pages from its host pool; pages already stored are not written again.

        All pools' missing pages go to the tiers as one batch. Per pool, per page: stored whole.
        """
        results: dict[Any, list[bool]] = {}
        jobs: list[tuple[Any, list[int]]] = []
        put_keys: list[BlockKey] = []
        put_buffers: list[memoryview] = []
        for transfer, sidecar, keys in self._sidecar_transfers(transfers, results, self.batch_set_v1, extra_info):
            block_keys = self._sidecar_keys(sidecar, keys)
            present = self.cache.exists(block_keys)
            todo = [i for i, p in enumerate(present) if not p]
            results[transfer.name] = list(present)
            if todo:
                buffers, _ = sidecar.buffers(transfer.host_indices, len(keys), todo, for_write=True)
                put_keys += [block_keys[i] for i in todo]
                put_buffers += buffers
                jobs.append((transfer.name, todo))
        stored = self.cache.put(put_keys, put_buffers) if put_keys and self.cache is not None else []
        answers = iter(stored)
        for name, todo in jobs:
            for i in todo:
                results[name][i] = next(answers)
        failed = sum(results[t.name].count(False) for t in transfers if _pool_name(t.name) != PoolName.KV.value)
        with self.counters.lock:
            self.counters.sidecar_pages_written += sum(stored)
            self.counters.sidecar_pages_write_failed += failed
        if failed:
            log.warning("lifeboatcache: %d sidecar pool pages not stored (namespace %s)", failed, self.namespace_id)
        return results

    def batch_get_v2(self, transfers: list[PoolTransfer],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> dict[Any, list[bool]]:
        """Read each pool's pages into its host pool; per pool, per page: arrived whole."""
        results: dict[Any, list[bool]] = {}
        jobs: list[tuple[Any, _SidecarPool, Any, int]] = []
        get_keys: list[BlockKey] = []
        get_buffers: list[memoryview] = []
        for transfer, sidecar, keys in self._sidecar_transfers(transfers, results, self.batch_get_v1, extra_info):
            buffers, state = sidecar.buffers(transfer.host_indices, len(keys), range(len(keys)), for_write=False)
            jobs.append((transfer.name, sidecar, state, len(keys)))
            get_keys += self._sidecar_keys(sidecar, keys)
            get_buffers += buffers
        ok = self.cache.get(get_keys, get_buffers) if get_keys and self.cache is not None else []
        offset = 0
        for name, sidecar, state, n in jobs:
            got = list(ok[offset:offset + n])
            offset += n
            sidecar.finish_read(state, [i for i, hit in enumerate(got) if hit])
            results[name] = got
        hits = sum(ok)
        with self.counters.lock:
            self.counters.sidecar_pages_read += hits
            self.counters.sidecar_pages_read_missed += len(ok) - hits
        return results

    # ------------------------------------------------------------------ generic path (tensors)

    def get(self, key: str, target_location: Any = None,
            target_sizes: Any = None) -> torch.Tensor | bool | None:
        """Read one page into a flat page tensor (returned; None on a miss), or into the memory at
        address ``target_location`` of ``target_sizes`` bytes (Mooncake's zero-copy form, which
        SGLang's own storage tests use): then True when it arrived whole."""
        if _is_address(target_location):
            if self.cache is None:
                return False
            start, size = time.perf_counter(), int(target_sizes)
            results = self.cache.get(self._keys([key]), [view_of(target_location, size)])
            self._count_read(results, start, size)
            return bool(results[0])
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
        """Store one page: a flat page tensor, or the memory at address ``target_location`` of
        ``target_sizes`` bytes (Mooncake's zero-copy form)."""
        if value is None and _is_address(target_location):
            return self._store([key], lambda i: view_of(target_location, int(target_sizes)))
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Store flat page tensors; True only when every page is stored."""
        if values is None or any(v is None for v in values):
            return False
        return self._store(keys, lambda i: _tensor_bytes(values[i].contiguous()))

    def _store(self, keys: list[str], page: Callable[[int], memoryview]) -> bool:
        """Store the pages not stored yet (``page(i)``: key ``i``'s bytes); True when all are stored."""
        if self.cache is None or not keys:
            return False
        start = time.perf_counter()
        block_keys = self._keys(keys)
        present = self.cache.exists(block_keys)
        todo = [i for i, p in enumerate(present) if not p]
        results = list(present)
        if todo:
            stored = self.cache.put([block_keys[i] for i in todo], [page(i) for i in todo])
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


def _pool_name(name: Any) -> str:
    """``PoolName.MAMBA`` or ``"mamba"`` as ``"mamba"`` (SGLang passes both)."""
    return str(getattr(name, "value", name))
