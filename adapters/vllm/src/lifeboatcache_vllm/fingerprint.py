"""What makes stored vLLM KV non-interchangeable: the namespace of a ``LifeboatTier``.

vLLM's block hashes cover tokens (and LoRA/multimodal/salt), not the weights, the platform
or the attention backend, so a new checkpoint under the same name would silently reuse
stale KV, and CPU pages are not byte-compatible with GPU pages. The namespace adds all of
that (DESIGN §4).
"""

from __future__ import annotations

from typing import Any

from lifeboatcache_core.fingerprint import weights_fingerprint
from lifeboatcache_core.keys import Namespace

__all__ = ["namespace_for", "weights_fingerprint"]


def namespace_for(config: Any, blocks_per_chunk: int, platform: str, replicated_layout: bool = False) -> Namespace:
    """The namespace of chunks described by vLLM's ``OffloadingConfig``.

    One stored block is one primary-tier row: every worker's part of a chunk (so the world
    size and parallel layout matter, the scheduler's rank does not). A replicated layout
    (vLLM sets it for MLA under TP alone: every rank holds the whole latent KV, one copy per
    row) has the same row bytes at every TP size, so its namespace names none: a TP=4 engine
    reads what a TP=2 one stored, as vLLM's fs tier does (its test_fs_tier
    ``test_fs_tier_cross_tp_round_trip``).
    """
    parallel = config.parallel
    tp, world_size = (1, 1) if replicated_layout else (parallel.tp_size, parallel.world_size)
    groups = [[g.tokens_per_block, len(g.layer_names)] for g in config.groups]
    tokens_per_block = config.groups[0].tokens_per_block if config.groups else 0
    return Namespace(
        engine="vllm",
        model=config.model.name,
        weights_fingerprint=weights_fingerprint(config.model.name),
        kv_format="vllm-offload-row-1",
        dtype=str(config.model.dtype).removeprefix("torch."),
        layout=str(getattr(config, "kv_cache_layout", None) or "default"),
        block_tokens=tokens_per_block * blocks_per_chunk,
        rank=0,
        world_size=world_size,
        platform=platform,
        extra={
            "groups": groups,
            "tokens_per_hash": config.cache.tokens_per_hash,
            "worker_kv_bytes_per_block": config.worker_kv_bytes_per_block,
            "tp": tp, "pp": parallel.pp_size, "pcp": parallel.pcp_size, "dcp": parallel.dcp_size,
            "replicated_layout": replicated_layout,
            "canonical_layout": bool(getattr(config, "canonical_layout", False)),
        },
    )
