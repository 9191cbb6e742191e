"""Small builders shared by the core tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

NS = "testns"


def keys(n: int, namespace: str = NS, start: int = 0) -> list[BlockKey]:
    return [BlockKey(namespace, (start + i).to_bytes(8, "big") * 4) for i in range(n)]


def blobs(n: int, size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(n)]


def file_tier(path: Path, capacity_gb: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {"name": "nvme", "backend": "file", "capacity_gb": capacity_gb, "path": str(path), **extra}


def open_cache(tmp_path: Path, *tiers: dict[str, Any], **top: Any) -> TieredCache:
    tiers = tiers or (file_tier(tmp_path / "tier"),)
    top.setdefault("fallback_local", {"path": str(tmp_path / "fallback"), "capacity_gb": 1})
    cache = TieredCache(load_config_dict({"tiers": list(tiers), **top}), background_index=False)
    return cache
