"""Asymmetric low-bit quantization of row groups, and dense bit packing of the codes.

Every codec in this package reduces a block to a 2-D float32 array whose rows are the
quantization groups, and stores per row a float16 ``scale`` and ``zero`` (the row minimum):
``x ~ code * scale + zero`` with ``code`` in ``[0, 2**bits - 1]``. Codes are packed 8 to
``bits`` bytes (little-endian bit order), so 3-bit codes really take 3 bits.
"""

from __future__ import annotations

import numpy as np

#: bit widths the packer supports (8 codes fill exactly ``bits`` bytes)
BITS = (2, 3, 4)
#: groups whose scale/zero would not fit float16 are not quantized (the codec stores raw)
FP16_SAFE = 60000.0


def levels(bits: int) -> int:
    return (1 << bits) - 1


def quantize_rows(x: np.ndarray, bits: int, clip: float | np.ndarray = 1.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize each row of ``x`` (float32, 2-D) to ``bits``; return (codes, scale, zero).

    ``clip`` < 1 shrinks each row's [min, max] around its midpoint before quantizing (a
    scalar, or one value per row): a 2-bit grid fitted to the extremes wastes its 4 levels on
    outliers. The float16 scale is rounded *up* so the row's maximum never overflows the grid.
    """
    lo = x.min(axis=1)
    hi = x.max(axis=1)
    if not np.all(np.asarray(clip) >= 1.0):
        mid = (hi + lo) * 0.5
        half = (hi - lo) * (0.5 * np.asarray(clip, dtype=np.float32))
        lo, hi = mid - half, mid + half
    zero = lo.astype(np.float16)
    scale = ((hi - zero.astype(np.float32)) / levels(bits)).astype(np.float16)
    short = scale.astype(np.float32) * levels(bits) < hi - zero.astype(np.float32)
    scale[short] = np.nextafter(scale[short], np.float16(np.inf))
    scale32 = scale.astype(np.float32)
    inverse = np.divide(1.0, scale32, out=np.zeros_like(scale32), where=scale32 > 0)
    codes = (x - zero.astype(np.float32)[:, None]) * inverse[:, None]
    np.rint(codes, out=codes)
    np.clip(codes, 0, levels(bits), out=codes)
    return codes.astype(np.uint8), scale, zero


def dequantize_rows(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """float32 rows ``code * scale + zero``."""
    out = codes.astype(np.float32)
    out *= scale.astype(np.float32)[:, None]
    out += zero.astype(np.float32)[:, None]
    return out


def packed_size(count: int, bits: int) -> int:
    """Bytes that ``count`` codes of ``bits`` take (padded to whole groups of 8 codes)."""
    return -(-count // 8) * bits


def pack(codes: np.ndarray, bits: int) -> bytes:
    """Pack uint8 codes (< 2**bits) densely: each run of 8 codes becomes ``bits`` bytes."""
    flat = codes.reshape(-1)
    pad = -flat.size % 8
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, dtype=np.uint8)])
    eights = flat.reshape(-1, 8).astype(np.uint32)
    words = eights[:, 0].copy()
    for i in range(1, 8):
        words |= eights[:, i] << np.uint32(bits * i)
    return words.view(np.uint8).reshape(-1, 4)[:, :bits].tobytes()


def unpack(data: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack`: the first ``count`` codes as uint8."""
    groups = data.reshape(-1, bits)
    words = np.zeros((groups.shape[0], 4), dtype=np.uint8)
    words[:, :bits] = groups
    packed = words.view(np.uint32).reshape(-1, 1)
    shifts = np.arange(0, 8 * bits, bits, dtype=np.uint32)
    codes = ((packed >> shifts) & np.uint32(levels(bits))).astype(np.uint8)
    return codes.reshape(-1)[:count]
