"""A returning session's load from our file tier alone: 29 chunks of real SmolLM2 bf16 KV.

What ``bench returning`` times around it is the engine; this isolates the tier. Each chunk is
laid out as vLLM's CPU tier hands it over (layer, block, page), 256 tokens (5.9 MB); both tiers
(codec none and lossless) are written once and then loaded ``REPS`` times each, alternating, from
a warm page cache into the same destination rows (8 I/O threads, as ``bench returning``).
Prints the median wall and process CPU time of a load per codec. Usage:
``python tierload.py [REPS] [--o-direct]`` (the KV comes from ``bench codecs``' model and text;
``--o-direct``: both tiers with ``o_direct = true``, so every load reads the disk, not the page
cache; added 2026-12-07).
"""
import os
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lifeboatcache_core.abc import KVLayout
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

from lifeboatcache.bench.codecs import _default_text, smollm2_scorer

CHUNKS = 29  # bench returning's 7,430-token prompt in 256-token chunks
LAYOUT = KVLayout("bfloat16", (30, 2, 49152), ("layer", "block", "page"))


def open_cache(root: Path, codec: str, o_direct: bool) -> TieredCache:
    cfg = {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 20, "path": str(root / "t"),
                      "io_threads": 8, "codec": codec, "o_direct": o_direct}],
           "fallback_local": {"path": str(root / "fb"), "capacity_gb": 1}}
    return TieredCache(load_config_dict(cfg), background_index=False)


def main(reps: int, o_direct: bool = False) -> None:
    kv = smollm2_scorer(_default_text(), 2048, 16).exact.view(np.int16)  # (kv, layer, 2048 tokens, 3, 64)
    chunks = []
    for c in range(CHUNKS):
        part = kv[:, :, (c * 256) % 1792:][:, :, :256]  # (kv, layer, 256 tokens, head, dim)
        page = part.reshape(2, 30, 2, 128, 3, 64).transpose(1, 2, 0, 3, 4, 5)  # (layer, block, kv, 128, ...)
        chunks.append(np.ascontiguousarray(page).view(np.uint8).reshape(-1))
    caches = {}
    for codec in ("none", "lossless"):
        cache = open_cache(Path(tempfile.mkdtemp(prefix=f"tierload-{codec}-")), codec, o_direct)
        keys = [BlockKey("bench", os.urandom(32)) for _ in chunks]
        cache.wait(cache.submit_put(keys, [memoryview(c) for c in chunks], layout=LAYOUT))
        cache.drain()
        caches[codec] = (cache, keys)
    dests = [np.empty_like(c) for c in chunks]
    wall: dict[str, list[float]] = {k: [] for k in caches}
    cpu: dict[str, list[float]] = {k: [] for k in caches}
    for rep in range(reps):
        for codec in (("none", "lossless") if rep % 2 == 0 else ("lossless", "none")):
            cache, keys = caches[codec]
            c0, t0 = time.process_time(), time.perf_counter()
            result = cache.wait(cache.submit_get_into(keys, [memoryview(d) for d in dests]))
            wall[codec].append(time.perf_counter() - t0)
            cpu[codec].append(time.process_time() - c0)
            assert all(result.ok), result
            if rep == 0:
                assert all(np.array_equal(d, c) for d, c in zip(dests, chunks, strict=True))
    for codec in caches:
        print(f"{codec} median {1000 * st.median(wall[codec]):.1f} ms cpu {1000 * st.median(cpu[codec]):.1f} ms",
              [round(1000 * x, 1) for x in sorted(wall[codec])])
    for cache, _ in caches.values():
        cache.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--o-direct"]
    main(int(args[0]) if args else 20, "--o-direct" in sys.argv[1:])
