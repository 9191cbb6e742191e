"""CPU of a store that a full lossless tier declines (bb3e2a5's A/B: run once with each commit's tier.py).

A file tier with the lossless codec is filled with real SmolLM2 bf16 chunks (32 tokens, 737 KB) stored at
prefix depths 0-3, then made full; 400 new chunks at depth 10 are offered through ``TieredCache.put`` and
every one is declined (``keep_prefixes``: no victim may go for a deeper block). Prints CPU per declined
store, the put job included. Run from the repository root with the project's venv.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lifeboatcache_core.abc import BlockHint

from lifeboatcache.bench.tiers import smollm2_kv_blocks

sys.path.insert(0, "tests")
from core.helpers import file_tier, keys, open_cache


def main() -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        blocks, layout = smollm2_kv_blocks(block_tokens=32)
    chunks = [np.frombuffer(b, dtype=np.uint8) for b in blocks]
    with tempfile.TemporaryDirectory() as work, open_cache(
            Path(work), file_tier(Path(work) / "t", io_threads=1, codec="lossless", capacity_gb=0.02)) as cache:
        tier = cache.tiers[0]
        for depth in range(40):
            cache.put(keys(1, start=depth), [chunks[depth % len(chunks)]], layout=layout,
                      hints=[BlockHint(depth=depth % 4)])
        tier.resize(tier.used + 1000)
        before = tier.stats.declined
        started = time.process_time()
        for i in range(400):
            cache.put(keys(1, start=1000 + i), [chunks[i % len(chunks)]], layout=layout, hints=[BlockHint(depth=10)])
        cpu = time.process_time() - started
        print(f"declined {tier.stats.declined - before} of 400: {cpu / 400 * 1e3:.3f} ms CPU per declined store")


if __name__ == "__main__":
    main()
