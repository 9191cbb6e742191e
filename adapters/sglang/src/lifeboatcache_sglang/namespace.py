"""What makes SGLang HiCache pages non-interchangeable: the namespace of one backend instance.

SGLang's page key is a SHA-256 chain over token ids only: it does not name the model, the
rank, the dtype or the host layout (``HiCacheFile`` leaves that as a TODO). Two ranks ask
for the same key for different shards, and a page stored by ``page_first`` has another
byte order than one stored by ``layer_first``. The namespace adds all of that, plus the
weights fingerprint, so a page is only ever served to a reader that can use its bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lifeboatcache_core.fingerprint import weights_fingerprint
from lifeboatcache_core.keys import Namespace

#: bumped when the byte meaning of a stored page changes
KV_FORMAT = "sglang-hicache-1"
DIGEST_BYTES = 32


def page_digest(key: str) -> bytes:
    """SGLang's 64-hex page hash as its 32 bytes; any other key string hashed to 32 bytes."""
    if len(key) == 2 * DIGEST_BYTES:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode()).digest()


def pool_digest(pool_tag: bytes, key: str) -> bytes:
    """The digest of a sidecar pool's page (Mamba/SWA/indexer state of hybrid models).

    Stored as its own block in the KV pages' namespace: the pool's tag (its name and the
    geometry that decides its bytes) is hashed in, so a Mamba page and the KV page of the
    same prefix, or two builds with different state shapes, never share a key.
    """
    return hashlib.sha256(b"lifeboatcache-sglang-pool\0" + pool_tag + b"\0" + page_digest(key)).digest()


def sidecar_pool_tag(name: str, pool: Any, storage_config: Any, io: str) -> bytes:
    """What keys a sidecar pool's pages: name, geometry, byte path (``regions`` or ``flat``).

    Mamba state is TP-sharded even when the model's KV is rank-replicated (MLA), so its tag
    carries the TP rank when the namespace does not.
    """
    geometry = pool_geometry(pool)
    for attr in ("num_mamba_layers", "temporal_state_shape", "conv_state_shapes", "temporal_dtype"):
        value = getattr(pool, attr, None)
        if value is not None:
            geometry[attr] = str(value)
    geometry["io"] = io
    if name == "mamba" and storage_config.is_mla_model:
        geometry["tp"] = [int(storage_config.tp_rank), int(storage_config.tp_size)]
    return json.dumps({"name": name, **geometry}, sort_keys=True).encode()


def pool_geometry(pool: Any) -> dict[str, Any]:
    """The host pool facts that decide a page's bytes (class, layout, dtype, shape, size)."""
    if pool is None:
        return {}
    out: dict[str, Any] = {"pool": type(pool).__name__}
    for attr in ("layout", "page_size", "layer_num", "head_num", "head_dim", "v_head_dim",
                 "kv_lora_rank", "qk_rope_head_dim", "storage_format_tag"):
        value = getattr(pool, attr, None)
        if isinstance(value, (int, str)):
            out[attr] = value
    dtype = getattr(pool, "dtype", None)
    if dtype is not None:
        out["dtype"] = str(dtype).removeprefix("torch.")
    size_per_token = getattr(pool, "get_size_per_token", None)
    if callable(size_per_token):
        out["bytes_per_token"] = int(size_per_token())
    return out


def namespace_for(storage_config: Any, model_path: str | None, pool: Any = None) -> Namespace:
    """The namespace of one scheduler rank's pages.

    MLA pages are rank-replicated (every TP rank reads the one object the writer stored),
    so their namespace leaves the TP rank out; MHA pages are per-shard.
    """
    model = storage_config.model_name or ""
    mla = bool(storage_config.is_mla_model)
    geometry = pool_geometry(pool)
    page_tokens = int(geometry.get("page_size", 0))
    fingerprint_source = model_path if model_path is not None else (model if Path(model).exists() else "")
    extra = {
        "mla": mla,
        "pp": [storage_config.pp_rank, storage_config.pp_size],
        "attn_cp": [storage_config.attn_cp_rank, storage_config.attn_cp_size],
        "dcp": [getattr(storage_config, "dcp_rank", 0), getattr(storage_config, "dcp_size", 1),
                getattr(storage_config, "logical_page_size", None)],
        "page_first": bool(storage_config.is_page_first_layout),
        "split_heads": [bool(getattr(storage_config, "should_split_heads", False)),
                        getattr(storage_config, "tp_lcm_size", None)],
        **{k: v for k, v in geometry.items() if k not in ("dtype", "layout", "page_size")},
    }
    return Namespace(
        engine="sglang",
        model=model,
        weights_fingerprint=weights_fingerprint(fingerprint_source),
        kv_format=KV_FORMAT,
        dtype=str(geometry.get("dtype", "")),
        layout=str(geometry.get("layout", "")),
        block_tokens=page_tokens,
        rank=0 if mla else int(storage_config.tp_rank),
        world_size=1 if mla else int(storage_config.tp_size),
        platform="host",
        digest_bytes=DIGEST_BYTES,
        extra=extra,
    )
