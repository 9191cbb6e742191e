"""The lbq codecs' C kernel (``_groups.c``), held to the numpy arithmetic it replaced, byte for byte.

The reference below is the numpy code of ``groups.py`` before the kernel: per row a float16
zero (the minimum) and scale (rounded up one float16 step where the grid would not reach the
maximum), codes ``clip(rint((x - zero) / scale), 0, 2**bits - 1)``, packed 8 to ``bits``
bytes little-endian, and decoded as ``code * scale + zero`` in float32. Rows mix ranges from
constant (scale 0) to wide, with per-row and scalar clip factors, and widths that leave a
partial run of 8 codes at the end.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lifeboatcache_codec_lbq.groups import dequantize_rows, packed_size, quantize_rows


def reference_quantize(x: np.ndarray, bits: int, clip: float | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    top = (1 << bits) - 1
    lo, hi = x.min(axis=1), x.max(axis=1)
    if not np.all(np.asarray(clip) >= 1.0):
        mid = (hi + lo) * 0.5
        half = (hi - lo) * (0.5 * np.asarray(clip, dtype=np.float32))
        lo, hi = mid - half, mid + half
    zero = lo.astype(np.float16)
    scale = ((hi - zero.astype(np.float32)) / top).astype(np.float16)
    short = scale.astype(np.float32) * top < hi - zero.astype(np.float32)
    scale[short] = np.nextafter(scale[short], np.float16(np.inf))
    scale32 = scale.astype(np.float32)
    inverse = np.divide(1.0, scale32, out=np.zeros_like(scale32), where=scale32 > 0)
    codes = np.clip(np.rint((x - zero.astype(np.float32)[:, None]) * inverse[:, None]), 0, top).astype(np.uint8)
    return codes, scale, zero


def reference_pack(codes: np.ndarray, bits: int) -> bytes:
    flat = np.concatenate([codes.reshape(-1), np.zeros(-codes.size % 8, dtype=np.uint8)])
    eights = flat.reshape(-1, 8).astype(np.uint32)
    words = eights[:, 0].copy()
    for i in range(1, 8):
        words |= eights[:, i] << np.uint32(bits * i)
    return words.view(np.uint8).reshape(-1, 4)[:, :bits].tobytes()


def reference_dequantize(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    out = codes.astype(np.float32)
    out *= scale.astype(np.float32)[:, None]
    out += zero.astype(np.float32)[:, None]
    return out


def rows_of(n_rows: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, width)) * np.exp2(rng.integers(-12, 12, (n_rows, 1)))
    x += rng.integers(-3, 4, (n_rows, 1)) * np.exp2(rng.integers(-4, 8, (n_rows, 1)))  # rows off zero
    x[0] = x[0, 0]  # a constant row: zero scale, every code 0
    if n_rows > 1:
        x[1] = np.float16(x[1, 0]).astype(np.float64)  # ... one whose value is a float16 exactly
    return x.astype(np.float32)


def check(x: np.ndarray, bits: int, clip: float | np.ndarray) -> None:
    codes, scale, zero = reference_quantize(x, bits, clip)
    packed, got_scale, got_zero = quantize_rows(x, bits, clip)
    assert got_zero.tobytes() == zero.tobytes(), "zeros"
    assert got_scale.tobytes() == scale.tobytes(), "scales"
    assert len(packed) == packed_size(x.size, bits)
    assert packed.tobytes() == reference_pack(codes, bits), "packed codes"
    decoded = dequantize_rows(packed, bits, x.shape[1], got_scale, got_zero)
    assert decoded.tobytes() == reference_dequantize(codes, scale, zero).tobytes(), "decoded rows"


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize(("n_rows", "width"), [(1, 1), (7, 3), (64, 32), (300, 64), (5, 13)])
def test_scales_zeros_codes_and_decoded_rows_are_numpys(bits: int, n_rows: int, width: int) -> None:
    for seed in range(3):
        x = rows_of(n_rows, width, seed)
        check(x, bits, 1.0)
        check(x, bits, 0.85)  # one clip factor for every row
        clips = np.random.default_rng(seed).choice(np.array([0.7, 0.9, 1.0], dtype=np.float32), n_rows)
        check(x, bits, clips)  # one per row, some 1.0: those rows go through the clip arithmetic too


@settings(max_examples=40, deadline=None)
@given(bits=st.sampled_from([2, 3, 4]), n_rows=st.integers(1, 40), width=st.integers(1, 70),
       seed=st.integers(0, 2**16))
def test_any_shape_packs_and_round_trips_as_numpy_does(bits: int, n_rows: int, width: int, seed: int) -> None:
    check(rows_of(n_rows, width, seed), bits, 1.0)


def test_mismatched_buffers_are_refused_not_overrun() -> None:
    from lifeboatcache_codec_lbq import _groups

    rows = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="do not match"):
        _groups.quantize(rows, 8, 4, np.ones(1, np.float32), False, np.empty(15, np.uint8),
                         np.empty(4, np.float16), np.empty(4, np.float16))
    with pytest.raises(ValueError, match="clip values"):
        _groups.quantize(rows, 8, 4, np.ones(3, np.float32), True, np.empty(16, np.uint8),
                         np.empty(4, np.float16), np.empty(4, np.float16))
