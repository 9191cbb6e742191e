"""The fp8 codec's C kernel, held to ml_dtypes code for code.

The reference below is the arithmetic the codec promises, written with numpy and ml_dtypes:
the scale exponent of a group is the smallest ``e`` in [-126, 127] with ``amax <= FMT_MAX *
2**e`` (found by exact comparison), the code of ``x`` is ml_dtypes' round-to-nearest-even of
``x * 2**-e``, and decoding is ``value(code) * 2**e`` rounded to the block's dtype, saturating
at its largest finite value. The blocks mix magnitudes across groups, put some values in
fp8's subnormal range, hold all-zero groups and groups whose abs-max is an exact power of
two times the format's max (where a float log2 is one off), and come in layouts whose groups
are not contiguous (the codec transposes those).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from lifeboatcache_codec_fp8.codec import FP8_DTYPES, FP8_MAX, SOURCE_DTYPES, Fp8Codec, Fp8Config, _group_axes
from lifeboatcache_core.abc import KVLayout

LAYOUTS = {
    "engine-rows": KVLayout("bfloat16", (3, 2, 96), ("layer", "block", "page")),
    "kv-first": KVLayout("bfloat16", (2, 3, 8, 2, 16), ("kv", "layer", "token", "head", "dim")),
    "token-first": KVLayout("bfloat16", (8, 2, 3, 16, 2), ("token", "kv", "layer", "dim", "head")),
}


def reference_exponents(amax: np.ndarray, fmt: str) -> np.ndarray:
    """Smallest e with amax <= max * 2**e, by exact float64 comparison (0 for a zero group)."""
    top = FP8_MAX[fmt]
    e = np.zeros(amax.shape, dtype=np.int64)
    nonzero = amax > 0
    e[nonzero] = np.ceil(np.log2(amax[nonzero] / top)).astype(np.int64)
    e += np.where(nonzero & (amax > np.ldexp(top, e)), 1, 0)  # log2 rounded down across a power of two
    e -= np.where(nonzero & (amax <= np.ldexp(top, e - 1)), 1, 0)  # ... or up
    return np.clip(e, -126, 127)


def reference(x: np.ndarray, layout: KVLayout, fmt: str, scale: str) -> tuple[bytes, np.ndarray]:
    """(payload, decoded block) as the codec promises them."""
    wide = x.astype(np.float64)
    amax = np.max(np.abs(wide), axis=_group_axes(layout, scale), keepdims=True)
    e = reference_exponents(amax, fmt)
    codes = np.ldexp(wide, -e).astype(np.float32).astype(FP8_DTYPES[fmt])
    dtype = SOURCE_DTYPES[layout.dtype]
    biggest = float(ml_dtypes.finfo(dtype).max) if dtype == SOURCE_DTYPES["bfloat16"] else float(np.finfo(dtype).max)
    decoded = np.clip(np.ldexp(codes.astype(np.float64), e), -biggest, biggest).astype(np.float32).astype(dtype)
    return e.astype(np.int8).tobytes() + codes.view(np.uint8).tobytes(), decoded


def kv_block(layout: KVLayout, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(layout.shape)
    # each element its own magnitude, 2**-20 .. 2**10, so groups hold values far below their amax
    # (fp8 subnormals and zeros) and groups differ by orders of magnitude
    x *= np.exp2(rng.integers(-20, 11, layout.shape))
    flat = x.reshape(-1)
    flat[: layout.shape[-1]] = 0.0  # zeros, and (block grouping) a group of zeros where its slice is zero
    return x.astype(SOURCE_DTYPES[layout.dtype])


@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scale", ["block", "token_head"])
def test_codes_scales_and_decoded_values_are_those_of_ml_dtypes(layout_name: str, dtype: str, fmt: str,
                                                                scale: str) -> None:
    base = LAYOUTS[layout_name]
    layout = KVLayout(dtype, base.shape, base.axes)
    codec = Fp8Codec(Fp8Config(format=fmt, scale=scale))
    for seed in range(3):
        x = kv_block(layout, seed)
        if seed == 2:
            edge = np.array([np.ldexp(FP8_MAX[fmt], -3), np.ldexp(FP8_MAX[fmt], -5)], dtype=np.float32).astype(x.dtype)
            bits = edge.view(np.uint32 if x.itemsize == 4 else np.uint16)
            bits[1] += 1  # the next value above max * 2**-5: in float32, log2 of it / max rounds to -5
            x.reshape(-1)[0] = edge[0]  # an abs-max exactly max * 2**-3: the exponent must not round up
            x.reshape(-1)[-1] = edge[1]  # ... nor round down here
        expected_payload, expected = reference(x, layout, fmt, scale)
        pieces, params = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), layout)
        assert params == {"mode": "fp8", "format": fmt, "scale": scale}
        payload = b"".join(bytes(p) for p in pieces)
        n_scales = len(expected_payload) - x.size
        assert payload[:n_scales] == expected_payload[:n_scales], "scale exponents"
        got_codes = np.frombuffer(payload[n_scales:], np.uint8)
        want_codes = np.frombuffer(expected_payload[n_scales:], np.uint8)
        assert np.array_equal(got_codes, want_codes), f"{np.count_nonzero(got_codes != want_codes)} codes differ"
        out = np.empty_like(x)
        codec.decode(memoryview(payload), params, layout, memoryview(out.view(np.uint8).reshape(-1)))
        assert out.tobytes() == expected.tobytes()


def test_float16_that_rounds_past_its_largest_value_saturates() -> None:
    """65504 has no e4m3 code at its scale: it rounds up to 256 * 2**8 = 65536, past fp16's
    range; the decoded value is fp16's largest finite, never Inf."""
    layout = KVLayout("float16", (1, 1, 4, 1, 8), ("kv", "layer", "token", "head", "dim"))
    x = np.full(layout.shape, 65504.0, dtype=np.float16)
    codec = Fp8Codec()
    pieces, params = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), layout)
    out = np.empty_like(x)
    codec.decode(memoryview(b"".join(bytes(p) for p in pieces)), params, layout,
                 memoryview(out.view(np.uint8).reshape(-1)))
    assert params["mode"] == "fp8" and np.all(out == np.float16(65504.0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_block_holding_nan_or_inf_anywhere_is_stored_raw(bad: float, dtype: str) -> None:
    base = LAYOUTS["kv-first"]
    layout = KVLayout(dtype, base.shape, base.axes)
    x = kv_block(layout, 7)
    x.reshape(-1)[-1] = bad  # in the last group: the kernel must read every group before it says
    raw = x.view(np.uint8).reshape(-1)
    pieces, params = Fp8Codec().encode(memoryview(raw), layout)
    assert params == {"mode": "raw"} and b"".join(bytes(p) for p in pieces) == raw.tobytes()
