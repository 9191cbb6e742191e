"""CPU per 737,280-byte block (one 32-token SmolLM2 chunk): raw buffered writes vs the file tier's Tier.store.

raw = open(O_EXCL) + one pwritev (header, payload, trailer) + close + rename into 256 shard folders: the file
backend's syscalls and nothing else. tier = Tier.store of the same payloads (reserve, xxh3 digest, header, the same
syscalls, index and manifest). The two alternate, three rounds, each from a dropped page cache (needs root):
    .venv/bin/python bench/results/write-cost-2026-12-05/wb.py 2000
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable

import numpy as np
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

SIZE = 737_280
ROOT = "/work/wb-bench"
_data = np.random.default_rng(0).integers(0, 255, size=SIZE * 64, dtype=np.uint8)
ROWS = [memoryview(_data[i * SIZE:(i + 1) * SIZE]) for i in range(64)]


def raw(n: int, sub: str) -> tuple[float, float]:
    folder = f"{ROOT}/{sub}"
    for shard in range(256):
        os.makedirs(f"{folder}/{shard:02x}", exist_ok=True)
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(n):
        name = secrets.token_hex(16)
        final = f"{folder}/{name[:2]}/{name}.blk"
        tmp = final + ".part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.pwritev(fd, [b"x" * 512, ROWS[i % 64], b"y" * 32], 0)
        os.close(fd)
        os.replace(tmp, final)
    return time.perf_counter() - t0, time.thread_time() - c0


def tier(n: int, sub: str) -> tuple[float, float]:
    cfg = load_config_dict({"tiers": [{"name": "nvme", "backend": "file", "path": f"{ROOT}/{sub}", "capacity_gb": 100}],
                            "fallback_local": {"path": f"{ROOT}/fb{sub}", "capacity_gb": 1}})
    cache = TieredCache(cfg, background_index=False)
    target = cache.tiers[0]
    keys = [BlockKey("ns0", secrets.token_bytes(16)) for _ in range(n)]
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(n):
        target.store(keys[i], ROWS[i % 64], None, None)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    cache.close()
    return wall, cpu


def main(n: int) -> None:
    sides: list[tuple[str, Callable[[int, str], tuple[float, float]]]] = [("raw", raw), ("tier", tier)]
    for rnd in range(3):
        for name, run in sides if rnd % 2 == 0 else sides[::-1]:
            shutil.rmtree(ROOT, ignore_errors=True)
            os.makedirs(ROOT)
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            wall, cpu = run(n, f"{name}{rnd}")
            print(f"{name} round {rnd}: {n} blocks wall {wall:.2f} s cpu {cpu:.2f} s = {cpu / n * 1e3:.3f} ms/block,"
                  f" {n * SIZE / cpu / 1e9:.2f} GB/s of CPU", flush=True)
    shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
