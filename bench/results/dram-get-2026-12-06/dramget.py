"""A DRAM tier's get and put latency: BLOCKS blocks of KIB KiB, REPS jobs each; p50, p99 and mean.

    .venv/bin/python bench/results/dram-get-2026-12-06/dramget.py BLOCKS KIB REPS [IO_THREADS [BELOW_DIR]]

One TieredCache with one DRAM tier (``io_threads`` 4 unless given, the default), over a
write-through file tier at ``BELOW_DIR`` when given (every get then served by DRAM with a copy
below); the same blocks are put then got ``REPS`` times, each job timed alone (wall clock around
the blocking call).
"""

from __future__ import annotations

import json
import os
import sys
import time

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey


def quantiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
            "p99_ms": round(ordered[int(0.99 * len(ordered))] * 1e3, 3),
            "mean_ms": round(sum(ordered) / len(ordered) * 1e3, 3)}


def main() -> None:
    blocks, kib, reps = (int(a) for a in sys.argv[1:4])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    below = [{"name": "file", "backend": "file", "path": sys.argv[5], "capacity_gb": 1.0}] if len(sys.argv) > 5 else []
    config = load_config_dict({
        "tiers": [{"name": "dram", "backend": "dram", "capacity_gb": 2 * blocks * kib / 2**20 + 0.01,
                   "io_threads": threads}, *below],
        "fallback_local": {"enabled": False, "path": "/tmp/dramget-fallback", "capacity_gb": 1}})
    keys = [BlockKey("ns", i.to_bytes(8, "big") * 4) for i in range(blocks)]
    payloads = [os.urandom(kib * 1024) for _ in range(blocks)]
    buffers = [bytearray(kib * 1024) for _ in range(blocks)]
    puts: list[float] = []
    gets: list[float] = []
    with TieredCache(config, background_index=False) as cache:
        for _ in range(reps):
            started = time.perf_counter()
            ok = cache.put(keys, payloads)
            puts.append(time.perf_counter() - started)
            started = time.perf_counter()
            ok += cache.get(keys, buffers)
            gets.append(time.perf_counter() - started)
            assert all(ok) and buffers[-1] == payloads[-1]
    print(json.dumps({"blocks": blocks, "kib": kib, "reps": reps, "io_threads": threads,
                      "get": quantiles(gets), "put": quantiles(puts)}))


if __name__ == "__main__":
    main()
