"""CPU per load of a lossless file tier, as the engine loads (buffered, blocks in the page cache).

One process, one tier (``codec = "lossless"``, buffered file backend), real SmolLM2 bf16 KV in
32-token blocks (737 KB each, the grid's engine chunk); every block is stored once, then read back
``ROUNDS`` times through ``TieredCache.get`` in batches of the read pool's size. Prints the process
CPU seconds per 1,000 loads (every thread: the read pool decodes) and the wall time.

    python fetch_cpu.py DIRECTORY      # DIRECTORY on the disk under test; its files are removed
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

from lifeboatcache.bench.tiers import smollm2_kv_blocks

BLOCKS = 128
ROUNDS = 8
THREADS = 4


def main() -> None:
    root = Path(sys.argv[1]) / "fetch-cpu"
    shutil.rmtree(root, ignore_errors=True)
    blocks, layout = smollm2_kv_blocks(block_tokens=32)
    cache = TieredCache(load_config_dict({
        "tiers": [{"name": "nvme", "backend": "file", "path": str(root), "capacity_gb": 4, "codec": "lossless",
                   "io_threads": THREADS}],
        "fallback_local": {"enabled": False},
    }), background_index=False)
    try:
        keys = [BlockKey("bench", i.to_bytes(4, "big") * 8) for i in range(BLOCKS)]
        bufs = [memoryview(bytearray(blocks[i % len(blocks)])) for i in range(BLOCKS)]
        assert all(cache.put(keys, bufs, layout=layout))
        dests = [memoryview(bytearray(len(blocks[0]))) for _ in range(THREADS)]
        for i in range(0, BLOCKS, THREADS):  # warm: page cache, scratch maps, codec state
            assert all(cache.get(keys[i:i + THREADS], dests))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(ROUNDS):
            for i in range(0, BLOCKS, THREADS):
                assert all(cache.get(keys[i:i + THREADS], dests))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        assert bytes(dests[0]) == blocks[(BLOCKS - THREADS) % len(blocks)]
    finally:
        cache.close()
        shutil.rmtree(root, ignore_errors=True)
    loads = ROUNDS * BLOCKS
    print(json.dumps({"loads": loads, "block_bytes": len(blocks[0]),
                      "cpu_s_per_1000_loads": round(cpu / loads * 1000, 3),
                      "wall_s_per_1000_loads": round(wall / loads * 1000, 3), "load_avg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
