"""CPU seconds per 1,000 ``Tier.fetch`` calls of a file tier's blocks from the page cache, 5 passes.

    python fetchloop.py CODEC          # none or lossless; PROF=1 prints a cProfile of 3,000 fetches first

Run with and without ``PYTHONPATH=<old worktree>/lifeboatcache_core/src:<old>/backends/file/src``,
alternated (how db6fabe's one-key fast path was found and checked).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

CHUNK = 737_280


def main(codec: str) -> None:
    root = Path(tempfile.mkdtemp(dir="/work"))
    tier = {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(root / "t"), "codec": codec}
    config = load_config_dict({"tiers": [tier], "fallback_local": {"path": str(root / "fb"), "capacity_gb": 1}})
    values = np.random.default_rng(0).standard_normal(CHUNK // 2).astype(np.float32)
    raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    try:
        with TieredCache(config, background_index=False) as cache:
            keys = [BlockKey("b", i.to_bytes(8, "big") * 4) for i in range(8)]
            cache.put(keys, [raw] * 8)
            tier_ = cache.all_tiers[0]
            dest = memoryview(bytearray(CHUNK))
            for _ in range(200):
                tier_.fetch(keys[0], dest)
            if os.environ.get("PROF"):
                profile = cProfile.Profile()
                profile.enable()
                for i in range(3000):
                    tier_.fetch(keys[i % 8], dest)
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(14)
            passes = []
            for _ in range(5):
                started = time.process_time()
                for i in range(1000):
                    tier_.fetch(keys[i % 8], dest)
                passes.append(round(time.process_time() - started, 3))
            print(tier_.fetch.__code__.co_filename, codec, "ms per fetch", passes)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main(sys.argv[1])
