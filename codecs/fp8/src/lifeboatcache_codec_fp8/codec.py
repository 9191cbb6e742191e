"""KV blocks as fp8 (e4m3 by default, or e5m2) with power-of-two scales.

Encoding: ``x -> fp8(x / 2**e)`` where ``2**e`` is the smallest power of two that brings the
group's abs-max under the format's largest finite value. Power-of-two scales (as in the OCP
MX formats) cost one byte each, are exact to apply and to undo, and keep the top binade of the
format in use, so the error is fp8's own rounding: at most 2**-4 of the value for e4m3, 2**-3
for e5m2. Groups are either one per (layer, K/V) slice of the block (``scale = "block"``,
vLLM's per-tensor scales; 2.0x on bf16) or one per (token, head) vector (``"token_head"``,
1.97x on bf16, for models whose heads differ wildly in range).

A block already in fp8, a block without a layout, one holding NaN/Inf, or one whose groups
are so small that scales and codes would not be smaller than the input is stored as it is
(``mode = "raw"``): the codec never makes a block worse than the engine gave it.

Payload: the scale exponents (one int8 per group, C order of the group grid), then the fp8
codes (C order of the block). ``params`` record the format and the grouping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import ml_dtypes
import numpy as np
from lifeboatcache_core.abc import Codec, KVLayout, PluginConfig
from lifeboatcache_core.chunkfile import Buffer
from lifeboatcache_core.errors import CorruptBlockError
from pydantic import Field

#: numpy dtypes of the float formats we quantize (bf16 through ml_dtypes)
SOURCE_DTYPES: dict[str, np.dtype] = {
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
}
FP8_DTYPES: dict[str, np.dtype] = {
    "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
FP8_LAYOUT_NAMES = {"float8_e4m3fn", "float8_e5m2"}
#: largest finite value and relative rounding error (half an ulp) of each format
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FP8_REL_ERR = {"e4m3": 2.0**-4, "e5m2": 2.0**-3}
#: float32 value of each of the 256 codes: a table lookup decodes 2x faster than a dtype cast
_DECODE_TABLE = {
    fmt: np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32) for fmt, dtype in FP8_DTYPES.items()
}


class Fp8Config(PluginConfig):
    """Options of the ``fp8`` codec (a tier's ``codec_options``)."""

    format: Literal["e4m3", "e5m2"] = Field("e4m3", description="e4m3: 3 mantissa bits; e5m2: wider range")
    scale: Literal["block", "token_head"] = Field(
        "block", description="one scale per (layer, K/V) slice of a block, or one per (token, head) vector")


def _group_axes(layout: KVLayout, scale: str) -> tuple[int, ...]:
    """The axes a scale is shared over (reduced) for this grouping."""
    axes = layout.axes
    if scale == "token_head":
        return (axes.index("dim") if "dim" in axes else len(axes) - 1,)
    return tuple(i for i, name in enumerate(axes) if name not in ("layer", "kv"))


def _scale_shape(layout: KVLayout, scale: str) -> tuple[int, ...]:
    reduced = _group_axes(layout, scale)
    return tuple(1 if i in reduced else n for i, n in enumerate(layout.shape))


class Fp8Codec(Codec):
    """bf16/fp16/fp32 KV to fp8 with power-of-two scales; fp8 KV passes through."""

    name = "fp8"
    version = 1
    lossless = False
    config_model = Fp8Config

    def __init__(self, config: PluginConfig | None = None) -> None:
        super().__init__(config)
        self.options: Fp8Config = self.config  # type: ignore[assignment]

    def error_bound(self, layout: KVLayout | None) -> float:
        if layout is None or layout.dtype not in SOURCE_DTYPES:
            return 0.0  # stored raw
        # fp8 rounding, then rounding the result back to the block's own dtype
        return FP8_REL_ERR[self.options.format] + 2.0**-8

    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        if layout is None or layout.dtype not in SOURCE_DTYPES:
            return [raw], {"mode": "raw"}
        fmt, scale = self.options.format, self.options.scale
        if int(np.prod(_scale_shape(layout, scale))) + int(np.prod(layout.shape)) >= raw.nbytes:
            return [raw], {"mode": "raw"}  # a scale per element or two: fp8 would save nothing
        x = np.frombuffer(raw, dtype=SOURCE_DTYPES[layout.dtype]).reshape(layout.shape).astype(np.float32)
        amax = np.max(np.abs(x), axis=_group_axes(layout, scale), keepdims=True)
        if not np.isfinite(amax).all():
            return [raw], {"mode": "raw"}
        with np.errstate(divide="ignore"):
            exponent = np.ceil(np.log2(amax / FP8_MAX[fmt]))
        exponent = np.clip(np.nan_to_num(exponent, neginf=0.0), -126, 127).astype(np.int8)
        codes = np.ldexp(x, -exponent.astype(np.int32)).astype(FP8_DTYPES[fmt])
        params = {"mode": "fp8", "format": fmt, "scale": scale}
        return [exponent.tobytes(), codes.view(np.uint8).tobytes()], params

    def decode(self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None,
               dest: memoryview) -> None:
        mode = params.get("mode")
        if mode == "raw" and len(params) == 1:
            if payload.nbytes != dest.nbytes:
                raise CorruptBlockError(f"fp8: raw payload has {payload.nbytes} bytes, expected {dest.nbytes}")
            dest.cast("B")[:] = payload.cast("B")
            return
        fmt, scale = params.get("format"), params.get("scale")
        if mode != "fp8" or fmt not in FP8_DTYPES or scale not in ("block", "token_head") or len(params) != 3:
            raise CorruptBlockError(f"fp8@{self.version}: params not understood: {params!r}")
        if layout is None or layout.dtype not in SOURCE_DTYPES:
            raise CorruptBlockError(f"fp8: block has no float layout to decode into (layout {layout})")
        count = int(np.prod(layout.shape))
        scale_shape = _scale_shape(layout, scale)
        n_scales = int(np.prod(scale_shape))
        if dest.nbytes != count * SOURCE_DTYPES[layout.dtype].itemsize:
            raise CorruptBlockError(f"fp8: layout {layout.shape} {layout.dtype} does not fill {dest.nbytes} bytes")
        if payload.nbytes != n_scales + count:
            raise CorruptBlockError(f"fp8: payload has {payload.nbytes} bytes, expected {n_scales + count}")
        data = np.frombuffer(payload, dtype=np.uint8)
        exponent = data[:n_scales].view(np.int8).reshape(scale_shape).astype(np.int32)
        values = np.ldexp(_DECODE_TABLE[fmt][data[n_scales:]].reshape(layout.shape), exponent)
        out = np.frombuffer(dest.cast("B"), dtype=SOURCE_DTYPES[layout.dtype]).reshape(layout.shape)
        out[...] = values
