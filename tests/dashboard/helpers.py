"""Builders shared by the dashboard tests: a small real cache and traffic of known size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

TOKEN = "test-token-0123456789abcdef"
BLOCK = 4096


def open_cache(tmp_path: Path, **top: Any) -> TieredCache:
    data = {
        "tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tmp_path / "tier")}],
        "fallback_local": {"path": str(tmp_path / "fallback"), "capacity_gb": 1},
        **top,
    }
    return TieredCache(load_config_dict(data), background_index=False)


def keys(n: int, start: int = 0) -> list[BlockKey]:
    return [BlockKey("dashns", (start + i).to_bytes(8, "big") * 4) for i in range(n)]


def traffic(cache: TieredCache, stored: int, looked_up: int, start: int = 0) -> None:
    """Store ``stored`` blocks, then look up ``looked_up`` (the first ``stored`` of them hit)."""
    cache.put(keys(stored, start), [os.urandom(BLOCK) for _ in range(stored)])
    cache.get(keys(looked_up, start), [bytearray(BLOCK) for _ in range(looked_up)])
