"""What makes stored vLLM KV non-interchangeable: the namespace of a ``LifeboatTier``.

vLLM's block hashes cover tokens (and LoRA/multimodal/salt), not the weights, the platform
or the attention backend, so a new checkpoint under the same name would silently reuse
stale KV, and CPU pages are not byte-compatible with GPU pages. The namespace adds all of
that (DESIGN §4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xxhash
from lifeboatcache_core.keys import Namespace

#: files whose change means other weights; read as size + head + tail (see weights_fingerprint)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
SAMPLE_BYTES = 1 << 20


def weights_fingerprint(model: str) -> str:
    """A short id of a local checkpoint directory (or file); ``""`` for a hub id.

    Each weight file contributes its name, size, first and last MiB: a safetensors header
    (first bytes) lists every tensor's dtype, shape and offsets and the tail holds real
    weights, so a swapped checkpoint changes the id, while start-up stays O(files), not
    O(bytes) (hashing 100 GB of weights on every start is not acceptable).
    """
    path = Path(model)
    if not path.exists():
        return ""
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
    )
    digest = xxhash.xxh3_128()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.relative_to(path) if file != path else file.name}\0{size}\0".encode())
        with open(file, "rb") as handle:
            digest.update(handle.read(SAMPLE_BYTES))
            if size > 2 * SAMPLE_BYTES:
                handle.seek(size - SAMPLE_BYTES)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def namespace_for(config: Any, blocks_per_chunk: int, platform: str, replicated_layout: bool = False) -> Namespace:
    """The namespace of chunks described by vLLM's ``OffloadingConfig``.

    One stored block is one primary-tier row: every worker's part of a chunk (so the world
    size and parallel layout matter, the scheduler's rank does not).
    """
    parallel = config.parallel
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
        world_size=parallel.world_size,
        platform=platform,
        extra={
            "groups": groups,
            "tokens_per_hash": config.cache.tokens_per_hash,
            "worker_kv_bytes_per_block": config.worker_kv_bytes_per_block,
            "tp": parallel.tp_size, "pp": parallel.pp_size, "pcp": parallel.pcp_size, "dcp": parallel.dcp_size,
            "replicated_layout": replicated_layout,
            "canonical_layout": bool(getattr(config, "canonical_layout", False)),
        },
    )
