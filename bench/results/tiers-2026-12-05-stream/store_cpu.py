"""CPU per stored block of a lossless file tier (buffered, as the vLLM tier's default; and O_DIRECT), one thread.

Real SmolLM2 bf16 KV (bench tiers' 5.9 MB blocks, distinct keys), ``TieredCache.put`` of one block at a time with
``io_threads = 1``, the process's CPU time (all threads) per block. Run once per side; ``store_cpu.sh`` alternates
the tree before (through PYTHONPATH) and after:
    .venv/bin/python bench/results/tiers-2026-12-05-stream/store_cpu.py BLOCKS O_DIRECT(0|1)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict

from lifeboatcache.bench import engine_like_key
from lifeboatcache.bench.tiers import smollm2_kv_blocks

ROOT = "/work/store-cpu"


def main(blocks: int, o_direct: bool) -> None:
    kv, layout = smollm2_kv_blocks()
    shutil.rmtree(ROOT, ignore_errors=True)
    config = load_config_dict({
        "tiers": [{"name": "t", "backend": "file", "path": ROOT, "capacity_gb": 64, "codec": "lossless",
                   "io_threads": 1, "o_direct": o_direct}],
        "fallback_local": {"enabled": False},
    })
    with TieredCache(config, background_index=False) as cache:
        cache.put([engine_like_key("warm", 0)], [kv[0]], layout=layout)  # first store: scratch maps, rotations
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(blocks):
            if cache.put([engine_like_key("cpu", i)], [kv[i % len(kv)]], layout=layout) != [True]:
                raise RuntimeError("store failed")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    shutil.rmtree(ROOT, ignore_errors=True)
    print(json.dumps({"blocks": blocks, "o_direct": o_direct, "cpu_ms_per_block": round(cpu / blocks * 1000, 3),
                      "wall_ms_per_block": round(wall / blocks * 1000, 3), "load_avg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] == "1")
