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

The work is one C pass per group (``_fp8.c``: abs-max, then quantize; decode the same way back
into the engine's dtype) with the GIL released, so the cache's I/O threads code blocks in
parallel and never hold the engine's interpreter; this module checks the layout and params and
transposes the rare layout whose groups are not contiguous.

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

from lifeboatcache_codec_fp8 import _fp8

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
#: the C kernel's numbers for source dtypes and formats (``_fp8.c``)
_KIND = {"bfloat16": 0, "float16": 1, "float32": 2}
_FORMAT = {"e4m3": 0, "e5m2": 1}
#: an unsigned integer dtype of each element width: layouts are transposed as bits, never as floats
_BITS = {2: np.dtype(np.uint16), 4: np.dtype(np.uint32)}


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


def _grouping(layout: KVLayout, scale: str) -> tuple[tuple[int, ...] | None, int]:
    """The axis order that puts each group's elements next to each other (None where the block's own
    order does: vLLM's (layer, block, page) rows and (kv, layer, token, head, dim) blocks alike), and
    the number of elements in a group. The kept axes stay in their order, so the group grid's C
    order is the same either way."""
    reduced = _group_axes(layout, scale)
    order = tuple(i for i in range(len(layout.shape)) if i not in reduced) + reduced
    group = int(np.prod([layout.shape[i] for i in reduced]))
    return (None if order == tuple(range(len(order))) else order), group


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
        order, group = _grouping(layout, scale)
        count = int(np.prod(layout.shape))
        exponents = np.empty(count // group, dtype=np.int8)
        codes = np.empty(count, dtype=np.uint8)
        source: Any = raw
        if order is not None:  # a copy with each group contiguous; the codes go back to the block's order
            bits = np.frombuffer(raw, dtype=_BITS[SOURCE_DTYPES[layout.dtype].itemsize]).reshape(layout.shape)
            source = np.ascontiguousarray(bits.transpose(order))
        if not _fp8.quantize(source, _KIND[layout.dtype], group, _FORMAT[fmt], exponents, codes):
            return [raw], {"mode": "raw"}  # NaN or Inf: no scale represents it
        if order is not None:
            grouped_shape = tuple(layout.shape[i] for i in order)
            codes = np.ascontiguousarray(codes.reshape(grouped_shape).transpose(np.argsort(order)))
        params = {"mode": "fp8", "format": fmt, "scale": scale}
        return [memoryview(exponents.view(np.uint8)), memoryview(codes)], params

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
        exponents, codes = data[:n_scales], data[n_scales:]
        order, group = _grouping(layout, scale)
        kind, width = _KIND[layout.dtype], SOURCE_DTYPES[layout.dtype].itemsize
        if order is None:
            _fp8.dequantize(codes, exponents, group, _FORMAT[fmt], kind, dest.cast("B"))
            return
        grouped_shape = tuple(layout.shape[i] for i in order)
        grouped = np.empty(grouped_shape, dtype=_BITS[width])
        codes = np.ascontiguousarray(codes.reshape(layout.shape).transpose(order))
        _fp8.dequantize(codes, exponents, group, _FORMAT[fmt], kind, grouped)
        out = np.frombuffer(dest.cast("B"), dtype=_BITS[width]).reshape(layout.shape)
        out[...] = grouped.transpose(np.argsort(order))
