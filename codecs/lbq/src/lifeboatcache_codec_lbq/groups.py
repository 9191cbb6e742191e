"""Asymmetric low-bit quantization of row groups, packed densely (the C kernel ``_groups.c``).

Every codec in this package reduces a block to a 2-D float32 array whose rows are the
quantization groups, and stores per row a float16 ``scale`` and ``zero`` (the row minimum):
``x ~ code * scale + zero`` with ``code`` in ``[0, 2**bits - 1]`` — or, "log8", the row's grid
in two bytes: its half-range a power of 2**(1/16) (a uint8 above a base shared by the rows of
one call) and its midpoint in 1/32 steps of the half-range (an int8). Four bytes a row are half
a bit per value on 64-value rows, 20 % of a 2-bit code; log8 costs a quarter bit and widens
the grid by at most 4.4 % (the half-range rounded up) plus 1/64 of it (the midpoint's rounding). Codes are packed 8 to
``bits`` bytes (little-endian bit order), so 3-bit codes really take 3 bits. The work is done
in C with the GIL released (one pass for a row's range, one for its codes, packed as they
are made), so the cache's I/O threads quantize blocks in parallel.
"""

from __future__ import annotations

import numpy as np

from lifeboatcache_codec_lbq import _groups

#: bit widths the packer supports (8 codes fill exactly ``bits`` bytes)
BITS = (2, 3, 4)
#: groups whose scale/zero would not fit float16 are not quantized (the codec stores raw)
FP16_SAFE = 60000.0


def levels(bits: int) -> int:
    return (1 << bits) - 1


def packed_size(count: int, bits: int) -> int:
    """Bytes that ``count`` codes of ``bits`` take (padded to whole groups of 8 codes)."""
    return -(-count // 8) * bits


def _encode_buffers(x: np.ndarray, bits: int, clip: float | np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
    """The kernel's inputs for rows ``x``: (float32 rows, clip factors, whether to clip, room for the packed codes)."""
    rows = np.ascontiguousarray(x, dtype=np.float32)
    clips = np.ascontiguousarray(np.asarray(clip, dtype=np.float32).reshape(-1))
    return rows, clips, not bool(np.all(clips >= 1.0)), np.empty(packed_size(rows.size, bits), dtype=np.uint8)


def quantize_rows(x: np.ndarray, bits: int, clip: float | np.ndarray = 1.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize each row of ``x`` (float32, 2-D) to ``bits``; return (packed codes, scale, zero).

    ``clip`` < 1 shrinks each row's [min, max] around its midpoint before quantizing (a
    scalar, or one value per row): a 2-bit grid fitted to the extremes wastes its 4 levels on
    outliers. The float16 scale is rounded *up* so the row's maximum never overflows the grid.
    """
    rows, clips, apply_clip, packed = _encode_buffers(x, bits, clip)
    scale = np.empty(len(rows), dtype=np.float16)
    zero = np.empty(len(rows), dtype=np.float16)
    _groups.quantize(rows, rows.shape[1], bits, clips, apply_clip, packed, scale, zero)
    return packed, scale, zero


def dequantize_rows(packed: np.ndarray, bits: int, width: int, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """float32 rows ``code * scale + zero`` of codes :func:`quantize_rows` packed: ``len(scale)`` rows of ``width``."""
    out = np.empty((len(scale), width), dtype=np.float32)
    _groups.dequantize(np.ascontiguousarray(packed, dtype=np.uint8), width, bits,
                       np.ascontiguousarray(scale, dtype=np.float16), np.ascontiguousarray(zero, dtype=np.float16), out)
    return out


def quantize_rows_log8(x: np.ndarray, bits: int, clip: float | np.ndarray = 1.0
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """As :func:`quantize_rows`, each row's grid in two bytes: (packed codes, e uint8, m int8, base).

    A row's half-range is ``2**((e + base) / 16)`` (rounded up: the grid covers the row), its
    midpoint ``m * half / 32``. ``base`` puts the widest row at ``e = 255``; rows more than 16
    octaves narrower get a wider grid than they need (their error stays below the widest row's).
    A row whose midpoint lies beyond 127/32 of its half-range is widened until it fits.
    """
    rows, clips, apply_clip, packed = _encode_buffers(x, bits, clip)
    e = np.empty(len(rows), dtype=np.uint8)
    m = np.empty(len(rows), dtype=np.int8)
    base = _groups.quantize_log8(rows, rows.shape[1], bits, clips, apply_clip, packed, e, m)
    return packed, e, m, base


def dequantize_rows_log8(packed: np.ndarray, bits: int, width: int, e: np.ndarray, m: np.ndarray,
                         base: int) -> np.ndarray:
    """float32 rows of codes :func:`quantize_rows_log8` packed: ``len(e)`` rows of ``width``."""
    out = np.empty((len(e), width), dtype=np.float32)
    _groups.dequantize_log8(np.ascontiguousarray(packed, dtype=np.uint8), width, bits,
                            np.ascontiguousarray(e, dtype=np.uint8), np.ascontiguousarray(m, dtype=np.int8), base, out)
    return out
