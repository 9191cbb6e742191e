"""Single-thread lossless decode of real SmolLM2 bf16 KV in vLLM's (layer, block, page) layout.

Eight 256-token chunks laid out as vLLM's CPU tier hands them to our tier (30 layers, 2 blocks of
128 tokens, one page each), coded by ``LosslessCodec`` with that layout (so the codec picks its
own format-2 chunks), then decoded ``REPS`` times; prints the ratio, the chunk size the codec
chose and the decode GB/s of raw KV (process CPU time, one thread). Usage:
``python decode_layout.py [REPS]``.
"""
import statistics as st
import sys
import time

import numpy as np
from lifeboatcache_codec_lossless.codec import LosslessCodec
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.codecs import _default_text, smollm2_scorer

LAYOUT = KVLayout("bfloat16", (30, 2, 49152), ("layer", "block", "page"))


def main(reps: int) -> None:
    kv = smollm2_scorer(_default_text(), 2048, 16).exact.view(np.int16)  # (kv, layer, 2048 tokens, 3, 64)
    blocks = []
    for c in range(8):
        part = kv[:, :, c * 256:(c + 1) * 256]
        page = part.reshape(2, 30, 2, 128, 3, 64).transpose(1, 2, 0, 3, 4, 5)  # (layer, block, kv, 128, ...)
        blocks.append(np.ascontiguousarray(page).view(np.uint8).reshape(-1))
    codec = LosslessCodec()
    coded = []
    for b in blocks:
        pieces, params = codec.encode(memoryview(b), LAYOUT)
        coded.append((b"".join(bytes(p) for p in pieces), params))
    dest = np.empty_like(blocks[0])
    for (payload, params), b in zip(coded, blocks, strict=True):
        codec.decode(memoryview(payload), params, LAYOUT, memoryview(dest))
        assert np.array_equal(dest, b)
    times = []
    for _ in range(reps):
        t = time.process_time()
        for payload, params in coded:
            codec.decode(memoryview(payload), params, LAYOUT, memoryview(dest))
        times.append(time.process_time() - t)
    raw = sum(b.nbytes for b in blocks)
    chunk = int.from_bytes(coded[0][0][4:8], "little")
    print(f"chunk {chunk} ratio {raw / sum(len(p) for p, _ in coded):.4f} "
          f"decode GB/s median {raw / st.median(times) / 1e9:.2f} best {raw / min(times) / 1e9:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
