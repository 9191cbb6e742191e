"""Wall time of one engine-like get from an S3 tier on moto behind the loopback proxy (20 ms a request).

A returning request reads its chunks from the bottom tier in one ``TieredCache.get``; this times
that get for 4 and 32 chunks, with the tier's default ``io_threads`` (4). The proxy adds latency
only (no rate limit): the question is how many round trips a get waits for, and the proxy's rate
limit is per request, not shared, so with one it would reward concurrency it does not model.

    python get_latency.py CODEC REPS > out.json     (run by run.sh, old and new interleaved)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import boto3
import numpy as np
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

from lifeboatcache.loopback import FaultProxy, MotoServer

CHUNK = 737_280  # one vLLM chunk of SmolLM2-135M bf16 KV (256 tokens)
LATENCY_S = 0.020


def chunks(n: int, seed: int) -> list[bytes]:
    """bf16-like bytes (a lossless codec compresses them as it would KV)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n * CHUNK // 2).astype(np.float32)
    raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return [raw[i * CHUNK:(i + 1) * CHUNK] for i in range(n)]


def main(codec: str, reps: int) -> dict[str, object]:
    creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(creds)
    work = Path(tempfile.mkdtemp(prefix="s3-get-"))
    moto = MotoServer(work, env=creds)
    proxy = FaultProxy(moto.port).start()
    try:
        bucket = f"get-{os.getpid()}"
        boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        tier = {"name": "s3", "backend": "s3", "capacity_gb": 1, "codec": codec, "url": f"s3://{bucket}/kv",
                "endpoint_url": f"http://127.0.0.1:{proxy.port}", "region": "us-east-1",
                "access_key_id": "bench", "secret_access_key": "bench", "max_pool_connections": 64}
        config = load_config_dict({"tiers": [tier], "fallback_local": {"path": str(work / "fb"), "capacity_gb": 1}})
        with TieredCache(config, background_index=False) as cache:
            keys = [BlockKey("bench", i.to_bytes(8, "big") * 4) for i in range(32)]
            data = chunks(32, 0)
            assert all(cache.put(keys, data))
            proxy.shape(LATENCY_S)
            out: dict[str, object] = {"codec": codec, "latency_ms": LATENCY_S * 1000, "chunk_bytes": CHUNK,
                                      "tier": str(cache.all_tiers[0].backend.__class__.__module__),
                                      "load_start": os.getloadavg()[0]}
            for n in (4, 32):
                bufs = [bytearray(CHUNK) for _ in range(n)]
                times = []
                for _ in range(reps):
                    started = time.perf_counter()
                    assert all(cache.get(keys[:n], bufs))
                    times.append(time.perf_counter() - started)
                assert bytes(bufs[-1]) == data[n - 1]
                out[f"get{n}_ms"] = [round(t * 1000, 1) for t in times]
                out[f"get{n}_median_ms"] = round(statistics.median(times) * 1000, 1)
            out["requests"] = proxy.requests
            out["load_end"] = os.getloadavg()[0]
            return out
    finally:
        proxy.stop()
        moto.stop()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2])), indent=1))
