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
from lifeboatcache_codec_lbq.groups import (
    dequantize_rows,
    dequantize_rows_log8,
    packed_size,
    quantize_rows,
    quantize_rows_log8,
)


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


# ----------------------------------------------------------------------------- log8 rows

#: 2**(k/16) as the kernel's float constants
OCTAVE16 = np.array([1.0, 1.04427378, 1.09050773, 1.13878863, 1.18920712, 1.24185781, 1.29683955, 1.35425555,
                     1.41421356, 1.47682615, 1.54221083, 1.61049033, 1.68179283, 1.75625216, 1.83400809,
                     1.91520656], dtype=np.float32)
LOG8_FLOOR = -16 * 160


def log8_half(t: np.ndarray) -> np.ndarray:
    return np.ldexp(OCTAVE16[t % 16], t // 16).astype(np.float32)


def reference_quantize_log8(x: np.ndarray, bits: int, clip: float | np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """log8 in numpy: t the smallest with 2**(t/16) >= max(half-range, |mid| * 32/127), found by search."""
    top = np.float32((1 << bits) - 1)
    lo, hi = x.min(axis=1), x.max(axis=1)
    if not np.all(np.asarray(clip) >= 1.0):
        mid = (hi + lo) * np.float32(0.5)
        half = (hi - lo) * (np.float32(0.5) * np.asarray(clip, dtype=np.float32))
        lo, hi = mid - half, mid + half
    mid, half = (hi + lo) * np.float32(0.5), (hi - lo) * np.float32(0.5)
    need = np.maximum(half, np.abs(mid) * np.float32(32.0 / 127.0))
    t = np.full(len(x), LOG8_FLOOR)
    for r in np.flatnonzero(need > 0):
        t[r] = int(np.ceil(16 * np.log2(float(need[r]))))
        while log8_half(np.array(t[r])) < need[r]:
            t[r] += 1
        while log8_half(np.array(t[r] - 1)) >= need[r]:
            t[r] -= 1
    base = int(t.max()) - 255
    e = np.maximum(t - base, 0).astype(np.uint8)
    h = log8_half(e.astype(np.int64) + base)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(h > 0, np.clip(np.rint(mid / (h / np.float32(32))), -127, 127), 0).astype(np.int8)
    zero, step = m.astype(np.float32) * (h / np.float32(32)) - h, (h + h) / top
    inverse = np.divide(np.float32(1), step, out=np.zeros_like(step), where=step > 0)
    codes = np.clip(np.rint((x - zero[:, None]) * inverse[:, None]), 0, top).astype(np.uint8)
    return codes, e, m, base


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize(("n_rows", "width"), [(1, 1), (7, 3), (64, 32), (300, 64), (5, 13)])
def test_log8_grids_codes_and_decoded_rows_are_numpys(bits: int, n_rows: int, width: int) -> None:
    for seed in range(3):
        x = rows_of(n_rows, width, seed)
        for clip in (1.0, 0.85, np.random.default_rng(seed).choice(np.array([0.7, 1.0], np.float32), n_rows)):
            codes, e, m, base = reference_quantize_log8(x, bits, clip)
            packed, got_e, got_m, got_base = quantize_rows_log8(x, bits, clip)
            assert (got_base, got_e.tobytes(), got_m.tobytes()) == (base, e.tobytes(), m.tobytes()), "grids"
            assert packed.tobytes() == reference_pack(codes, bits), "packed codes"
            h = log8_half(e.astype(np.int64) + base)
            zero, step = m.astype(np.float32) * (h / np.float32(32)) - h, (h + h) / np.float32((1 << bits) - 1)
            expected = reference_dequantize(codes, step, zero)
            assert dequantize_rows_log8(packed, bits, width, e, m, base).tobytes() == expected.tobytes()


@settings(max_examples=40, deadline=None)
@given(bits=st.sampled_from([2, 3, 4]), n_rows=st.integers(1, 40), width=st.integers(2, 70),
       seed=st.integers(0, 2**16))
def test_a_log8_row_decodes_within_half_a_step_of_a_grid_no_wider_than_it_says(bits: int, n_rows: int, width: int,
                                                                               seed: int) -> None:
    """Unclipped, each value moves by at most half a step plus the midpoint's rounding (h/64), and
    the grid is at most 2**(1/16) wider than the row needs, where the row is within 16 octaves
    of the widest (the others share the widest's floor)."""
    x = rows_of(n_rows, width, seed)
    packed, e, m, base = quantize_rows_log8(x, bits, 1.0)
    decoded = dequantize_rows_log8(packed, bits, width, e, m, base)
    h = log8_half(e.astype(np.int64) + base).astype(np.float64)
    lo, hi = x.min(axis=1).astype(np.float64), x.max(axis=1).astype(np.float64)
    need = np.maximum((hi - lo) / 2, np.abs(hi + lo) / 2 * 32 / 127)
    assert np.all(h >= need)
    assert np.all((h <= need * 2 ** (1 / 16) * (1 + 1e-6)) | (e == 0))
    step = 2 * h / ((1 << bits) - 1)
    assert np.all(np.abs(decoded - x) <= (step / 2 + h / 64)[:, None] * (1 + 1e-5) + 1e-30)
    assert e.max() == 255 or np.all(need == 0)


def test_log8_buffers_that_do_not_match_are_refused() -> None:
    from lifeboatcache_codec_lbq import _groups

    rows = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="do not match"):  # a float16 scale's room is not log8's
        _groups.quantize_log8(rows, 8, 2, np.ones(1, np.float32), False, np.empty(8, np.uint8),
                              np.empty(8, np.uint8), np.empty(8, np.int8))
    with pytest.raises(ValueError, match="do not match"):
        _groups.dequantize_log8(np.empty(8, np.uint8), 8, 2, np.empty(4, np.uint8), np.empty(3, np.int8), 0,
                                np.empty((4, 8), np.float32))


def test_log8_rows_of_zeros_decode_to_zeros() -> None:
    """A call whose rows are all zero has no widest row to set base by: every grid is the empty
    one below the smallest float32 (half-range 2**-160, which float32 holds as 0)."""
    x = np.zeros((3, 8), dtype=np.float32)
    packed, e, m, base = quantize_rows_log8(x, 2, 1.0)
    assert base + 255 == -16 * 160 and not m.any() and not packed.any()
    assert not dequantize_rows_log8(packed, 2, 8, e, m, base).any()
