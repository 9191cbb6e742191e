"""Would decoding a lossless block as its read arrives lift ``bench tiers --codec lossless`` reads? (issue 16)

``bench tiers`` reads batches of as many blocks as it has threads, one block per thread, and the tier
reads each stored block whole, then decodes it: the four reads run together, then the four decodes,
and nothing overlaps. This simulates the alternative with real SmolLM2 bf16 KV (256-token blocks):
each block is coded as ``SEGMENTS`` independent pieces stored back to back in one O_DIRECT file,
page aligned, and three sides run interleaved, batch by batch, on cold files:

- raw: the raw block read with O_DIRECT (the raw disk side of ``bench tiers``);
- whole: the stored block read in one call, then its pieces decoded (what the tier does today);
- streamed: piece k read, then decoded, then piece k+1 (what a streaming decode would do).

    python stream_sim.py [SEGMENTS] [DIRECTORY]   # DIRECTORY exists, on the disk under test; its files are removed
"""

from __future__ import annotations

import mmap
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lifeboatcache_codec_lossless.codec import LosslessCodec
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.tiers import _drop_page_cache, smollm2_kv_blocks

THREADS = 4  # and blocks per batch, as bench tiers' default
FILES = 64
REPS = 6
SEGMENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
ROOT = Path(sys.argv[2] if len(sys.argv) > 2 else "/work/tprof")


def align(n: int) -> int:
    return (n + 4095) // 4096 * 4096


def write_direct(path: Path, data: bytes) -> None:
    buf = mmap.mmap(-1, align(len(data)))
    buf.write(data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        os.pwrite(fd, buf, 0)
    finally:
        os.close(fd)


def main() -> None:
    blocks, layout = smollm2_kv_blocks()
    size = len(blocks[0])
    step = size // SEGMENTS
    segment_layout = KVLayout(layout.dtype, (layout.shape[0] * layout.shape[1] // SEGMENTS, *layout.shape[2:]),
                              ("unit", *layout.axes[2:]))
    codec = LosslessCodec()
    coded = []  # per distinct block: [(payload, params)] per segment
    for raw in blocks[:THREADS]:
        pieces = []
        for k in range(SEGMENTS):
            (payload,), params = codec.encode(memoryview(raw)[k * step:(k + 1) * step], segment_layout)
            pieces.append((bytes(payload), params))
        coded.append(pieces)
    offsets: dict[int, list[tuple[int, int]]] = {}
    for i in range(FILES):
        data, spans = bytearray(), []
        for payload, _ in coded[i % THREADS]:
            spans.append((len(data), len(payload)))
            data += payload + bytes(align(len(data) + len(payload)) - len(data) - len(payload))
        write_direct(ROOT / f"t{i}", bytes(data))
        write_direct(ROOT / f"r{i}", blocks[i % THREADS])
        offsets[i] = spans
    scratch = [mmap.mmap(-1, align(size) + 4096 * SEGMENTS) for _ in range(THREADS)]
    dests = [bytearray(size) for _ in range(THREADS)]

    def decode(i: int, slot: int, k: int) -> None:
        start, length = offsets[i][k]
        codec.decode(memoryview(scratch[slot])[start:start + length], coded[i % THREADS][k][1], segment_layout,
                     memoryview(dests[slot])[k * step:(k + 1) * step])

    def raw(i: int, slot: int) -> None:
        fd = os.open(ROOT / f"r{i}", os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [memoryview(scratch[slot])[:size]], 0)
        finally:
            os.close(fd)

    def whole(i: int, slot: int) -> None:
        start, length = offsets[i][-1]
        fd = os.open(ROOT / f"t{i}", os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [memoryview(scratch[slot])[:align(start + length)]], 0)
        finally:
            os.close(fd)
        for k in range(SEGMENTS):
            decode(i, slot, k)

    def streamed(i: int, slot: int) -> None:
        fd = os.open(ROOT / f"t{i}", os.O_RDONLY | os.O_DIRECT)
        try:
            for k, (start, length) in enumerate(offsets[i]):
                os.preadv(fd, [memoryview(scratch[slot])[start:align(start + length)]], start)
                decode(i, slot, k)
        finally:
            os.close(fd)

    sides = (raw, whole, streamed)
    seconds = dict.fromkeys((side.__name__ for side in sides), 0.0)
    with ThreadPoolExecutor(THREADS) as pool:
        for rep in range(REPS):
            _drop_page_cache()
            for side in sides if rep % 2 == 0 else sides[::-1]:
                for first in range(0, FILES, THREADS):
                    started = time.perf_counter()
                    list(pool.map(side, range(first, first + THREADS), range(THREADS)))
                    seconds[side.__name__] += time.perf_counter() - started
    for name, value in seconds.items():
        print(f"{name} {value:.3f} s; logical/raw {seconds['raw'] / value:.3f}")
    for i in range(FILES):
        (ROOT / f"t{i}").unlink()
        (ROOT / f"r{i}").unlink()


if __name__ == "__main__":
    main()
