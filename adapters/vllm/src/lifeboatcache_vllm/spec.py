"""``LifeboatOffloadingSpec``: vLLM's tiering spec with lifeboatcache's defaults and a CPU worker.

Selected by ``kv_connector_extra_config = {"spec_name": "LifeboatOffloadingSpec",
"spec_module_path": "lifeboatcache_vllm.spec", ...}`` (the auto-enable plugin writes that).
Over ``TieringOffloadingSpec`` it

- chooses the offloaded chunk: ``engine.vllm.native_block_tokens`` = "auto" gives one engine block
  per chunk, as vLLM does by default. A prompt is served from the offload tiers in whole
  chunks only, so every request recomputes the part of its prefix past the last whole chunk:
  on agent sessions (16 agents, 8 rounds of the kv-cache-tester traces, 32-token blocks)
  256-token chunks made vLLM recompute 29.5k prompt tokens, 64-token ones 18.9k and one-block
  ones 17.6k, for vLLM's fs tier and ours alike (bench/results, sixth round). An explicit
  ``block_size``/``blocks_per_chunk`` in the extra config always wins;
- sizes vLLM's CPU tier from ``engine.vllm.native_cpu_gb`` when ``cpu_bytes_to_use`` is not given
  (default: a quarter of RAM, at most 16 GiB);
- computes the namespace fingerprint once (``lifeboat_namespace``) for ``LifeboatTier``;
- returns :class:`~lifeboatcache_vllm.worker.CpuOffloadingWorker` on vLLM's CPU platform,
  where the stock spec refuses to offload, and there unlinks the CPU tier's /dev/shm file as
  soon as the whole engine has mapped it, so that no exit path can leak it
  (:mod:`lifeboatcache_vllm.region`). On CUDA-alike and XPU platforms vLLM's worker and region
  handling are used unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from lifeboatcache_core.errors import ConfigError
from lifeboatcache_core.keys import Namespace
from vllm.platforms import current_platform
from vllm.v1.kv_offload.base import CanonicalKVCaches, OffloadingManager, OffloadingWorker
from vllm.v1.kv_offload.config import OffloadingConfig
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from lifeboatcache_vllm.fingerprint import namespace_for
from lifeboatcache_vllm.region import WorkerRegion, drop_name, region_path, sweep_dead_regions
from lifeboatcache_vllm.settings import EXTRA_KEY, VllmSettings, cpu_bytes, resolve_config, vllm_settings

log = logging.getLogger("lifeboatcache.vllm")


def _engine_settings(extra: Any) -> VllmSettings:
    try:
        return vllm_settings(resolve_config(extra.get(EXTRA_KEY)))
    except (ConfigError, OSError, ValueError):
        return VllmSettings()  # the tier reports the broken config (and honours on_error) itself


def chunk_blocks(config: OffloadingConfig, native_block_tokens: int | str) -> int:
    """Engine blocks per offloaded chunk for ``engine.vllm.native_block_tokens``."""
    if native_block_tokens == "auto":
        return 1
    sizes = {g.tokens_per_block for g in config.groups}
    tokens = int(native_block_tokens)
    if len(sizes) != 1:
        raise ConfigError(f"engine.vllm.native_block_tokens = {tokens} needs one KV block size; this model has "
                          f"{sorted(sizes)}; use native_block_tokens = 'auto'")
    (size,) = sizes
    if tokens <= 0 or tokens % size:
        raise ConfigError(f"engine.vllm.native_block_tokens = {tokens} must be a positive multiple of the engine's "
                          f"block size ({size} tokens); use {max(size, tokens // size * size)} or 'auto'")
    return tokens // size


def platform_name() -> str:
    """The device family whose KV page bytes we store (CPU pages differ from GPU pages)."""
    return str(getattr(current_platform, "device_type", "") or current_platform.device_name)


class LifeboatOffloadingSpec(TieringOffloadingSpec):
    """Tiering spec: CPU primary tier + lifeboatcache below it (see the module doc)."""

    def __init__(self, config: OffloadingConfig) -> None:
        extra = config.extra_config
        settings = _engine_settings(extra)
        if not extra.get("cpu_bytes_to_use"):  # vLLM requires it; ours has a default
            config = dataclasses.replace(config, extra_config={**extra, "cpu_bytes_to_use": cpu_bytes(settings)})
        if extra.get("block_size") is None and extra.get("blocks_per_chunk") is None:
            blocks = chunk_blocks(config, settings.native_block_tokens)
            config = dataclasses.replace(config, cache=dataclasses.replace(config.cache, blocks_per_chunk=blocks))
        super().__init__(config)
        self.lifeboat_namespace: Namespace = namespace_for(
            config, self.blocks_per_chunk, platform_name(), self.replicated_layout
        )

    def _uses_stock_worker(self) -> bool:
        return bool(current_platform.is_cuda_alike() or current_platform.is_xpu())

    def get_manager(self) -> OffloadingManager:
        """vLLM's tiering manager; on the CPU path the region's name is dropped once it is mapped.

        The workers created and mapped the file while registering their KV caches; this
        (EngineCore's scheduler) maps it last, by name. From then on nothing opens it again,
        so it is unlinked, also when building the manager fails: the engine cannot start then.
        If the file does not exist yet, this call creates it and workers still have to join
        by name: vLLM's own cleanup keeps that case.
        """
        if self._manager is not None or self._uses_stock_worker():
            return super().get_manager()
        path = region_path(self._engine_id)
        workers_mapped = os.path.exists(path)
        if not workers_mapped:
            log.warning("lifeboatcache: %s did not exist before the scheduler; it is left to vLLM's cleanup", path)
        try:
            return super().get_manager()
        finally:
            if workers_mapped:
                drop_name(path)

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._uses_stock_worker():
            return super().get_worker(kv_caches)
        if self._worker is None:
            if self.config.canonical_layout:
                raise ValueError("canonical_layout is not supported on the CPU backend; remove it from "
                                 "kv_connector_extra_config")
            from lifeboatcache_vllm.worker import CpuOffloadingWorker

            rank = 0 if self.replicated_layout else self.config.parallel.rank
            sweep_dead_regions(self.num_chunks * self.kv_bytes_per_chunk)
            region = WorkerRegion(
                engine_id=self._engine_id, num_chunks=self.num_chunks, rank=rank,
                kv_bytes_per_chunk=self.kv_bytes_per_chunk, cpu_page_size=self.cpu_page_size_per_worker,
            )
            try:
                self._worker = CpuOffloadingWorker(kv_caches, self.blocks_per_chunk, region)  # type: ignore[assignment]
            except Exception:
                region.cleanup()
                raise
        return self._worker  # type: ignore[return-value]
