"""``lbq``: low-bit (4/3/2) asymmetric group quantization of KV, KIVI-style; ``int2``: its plain baseline.

KIVI (Liu et al., 2024) observed that keys have a few channels of consistently large
magnitude while values do not, so it quantizes K per channel (groups run along the tokens of
one channel) and V per token (groups run along the channels of one token). ``lbq`` does the
same by default (``k_groups = "channel"``); ``"token"`` groups K like V. A layout without
``kv``/``token``/``dim`` axes (e.g. vLLM's opaque ``layer, block, page`` rows) is quantized in
contiguous groups along its last axis, which is always valid, just not KIVI's grouping.

Payload, per half of the block (K then V; a block without a ``kv`` axis is one half) and per
run of its rows that share a bit width (one run, unless a subclass keeps some rows at more bits:
oscar's precise layers): the packed codes (row-major over the groups), the float16 scales, the
float16 zeros — or, where ``params["ranges"] == "log8"`` (oscar's blocks since 2026-12-07), each
row's grid in two bytes (``groups.quantize_rows_log8``: the uint8 exponents, then the int8
midpoints), the run's base in ``params["range_base"][half]``. Every length
follows from the layout and ``params``, so the payload carries no header of its own. Blocks
that cannot be quantized faithfully (no layout, not a float dtype, NaN/Inf, values beyond
float16) are stored raw.

Error bound (``error_bound``): a value is rounded to the nearest of ``2**bits`` levels spanning
its group's [min, max], so it moves by at most half a step, ``(max - min) / (2 (2**bits - 1))
<= max|x| / (2**bits - 1)`` of its group; float16 scales/zeros and the rounding back to the
block's dtype add at most ``2**-7 * max|x|`` (0.0745 at 4 bits, 0.150 at 3, 0.341 at 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from lifeboatcache_core.abc import Codec, KVLayout, PluginConfig
from lifeboatcache_core.chunkfile import Buffer
from lifeboatcache_core.errors import CorruptBlockError
from pydantic import Field

from lifeboatcache_codec_lbq import kvarray
from lifeboatcache_codec_lbq.groups import (
    BITS,
    FP16_SAFE,
    dequantize_rows,
    dequantize_rows_log8,
    levels,
    packed_size,
    quantize_rows,
    quantize_rows_log8,
)

#: relative error added by float16 scale/zero rounding and by rounding back to bf16
ROUNDING_SLACK = 2.0**-7
#: each row's grid in two bytes (see ``groups.quantize_rows_log8``), not a float16 scale and zero
LOG8 = "log8"


def _log8(params: dict[str, Any]) -> bool:
    return params.get("ranges") == LOG8


class LbqConfig(PluginConfig):
    """Options of the ``lbq`` codec (a tier's ``codec_options``)."""

    bits: Literal[2, 3, 4] = Field(4, description="bits per value: 4 (3.6x on bf16), 3 (4.6x) or 2 (6.4x)")
    group_size: int = Field(64, ge=8, le=4096, description="values per group sharing one scale and zero")
    k_groups: Literal["channel", "token"] = Field(
        "channel", description="K groups run along tokens of one channel (KIVI) or along channels of one token")


class Int2Config(LbqConfig):
    """The plain 2-bit baseline: groups of 32 along the channels of each token, K and V alike."""

    bits: Literal[2, 3, 4] = 2
    group_size: int = Field(32, ge=8, le=4096)
    k_groups: Literal["channel", "token"] = "token"


class GroupQuantCodec(Codec):
    """Shared encode/decode of group-quantized codecs; subclasses choose the groups."""

    lossless = False
    mode: ClassVar[str]

    # ------------------------------------------------------------------ subclass hooks

    def _params(self, layout: KVLayout, x: np.ndarray) -> dict[str, Any]:
        """The params of a block about to be encoded (everything decode needs)."""
        raise NotImplementedError

    def _check_params(self, params: dict[str, Any]) -> None:
        """Raise CorruptBlockError for params this version does not understand."""
        raise NotImplementedError

    def _grouping(self, half: str, layout: KVLayout, params: dict[str, Any]) -> tuple[int, int]:
        """(axis of the half's own axes along which groups run, group length)."""
        raise NotImplementedError

    def _forward(self, half: str, x: np.ndarray, layout: KVLayout, params: dict[str, Any]) -> np.ndarray:
        """Transform applied to a half before grouping (identity here)."""
        return x

    def _inverse(self, half: str, x: np.ndarray, layout: KVLayout, params: dict[str, Any]) -> np.ndarray:
        return x

    def _clip(self, half: str, layout: KVLayout, params: dict[str, Any], n_rows: int) -> float | np.ndarray:
        return 1.0

    def _bit_runs(self, half: str, layout: KVLayout, params: dict[str, Any], n_rows: int) -> list[tuple[int, int, int]]:
        """Consecutive rows of a half sharing one bit width, as (first, end, bits): all at ``params["bits"]`` here."""
        return [(0, n_rows, params["bits"])]

    def _can_quantize(self, layout: KVLayout | None) -> bool:
        return kvarray.quantizable(layout)

    # ------------------------------------------------------------------ codec

    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        if layout is None or not self._can_quantize(layout):
            return [raw], {"mode": "raw"}
        x = kvarray.load(raw, layout)
        peak = np.max(np.abs(x))
        if not np.isfinite(peak) or peak > FP16_SAFE:
            return [raw], {"mode": "raw"}
        params = self._params(layout, x)
        pieces: list[Buffer] = []
        for half, index in kvarray.halves(layout):
            part = self._forward(half, x[index], layout, params)
            axis, group = self._grouping(half, layout, params)
            rows = kvarray.to_rows(part, axis, group)
            clip = self._clip(half, layout, params, rows.shape[0])
            bases = []
            for first, end, bits in self._bit_runs(half, layout, params, rows.shape[0]):
                run_clip = clip if np.isscalar(clip) else clip[first:end]
                if _log8(params):
                    packed, e, m, base = quantize_rows_log8(rows[first:end], bits, run_clip)
                    pieces += [memoryview(packed), memoryview(e), memoryview(m.view(np.uint8))]
                    bases.append(base)
                else:
                    packed, scale, zero = quantize_rows(rows[first:end], bits, run_clip)
                    pieces += [memoryview(packed), memoryview(scale.view(np.uint8)), memoryview(zero.view(np.uint8))]
            if _log8(params):
                params.setdefault("range_base", {})[half] = bases
        return pieces, params

    def decode(self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None,
               dest: memoryview) -> None:
        if params.get("mode") == "raw" and len(params) == 1:
            if payload.nbytes != dest.nbytes:
                raise CorruptBlockError(f"{self.name}: raw payload has {payload.nbytes} bytes, expected {dest.nbytes}")
            dest.cast("B")[:] = payload.cast("B") if payload.format != "B" else payload
            return
        if params.get("mode") != self.mode:
            raise CorruptBlockError(f"{self.tag}: params not understood: {params!r}")
        self._check_params(params)
        if layout is None or not self._can_quantize(layout) or kvarray.raw_size(layout) != dest.nbytes:
            raise CorruptBlockError(f"{self.name}: layout {layout} does not describe a {dest.nbytes}-byte float block")
        shape = kvarray.half_shape(layout)
        plan = []
        for half, index in kvarray.halves(layout):
            axis, group = self._grouping(half, layout, params)
            n_rows, width = kvarray.rows_shape(shape, axis, group)
            plan.append((half, index, axis, width, self._bit_runs(half, layout, params, n_rows)))
        log8 = _log8(params)
        grid_bytes = 1 if log8 else 2  # per row, twice: (e, m) or (scale, zero)
        bases = _range_bases(params, [(half, len(runs)) for half, _, _, _, runs in plan]) if log8 else {}
        expected = sum(packed_size((end - first) * width, bits) + 2 * grid_bytes * (end - first)
                       for _, _, _, width, runs in plan for first, end, bits in runs)
        if payload.nbytes != expected:
            raise CorruptBlockError(f"{self.name}: payload has {payload.nbytes} bytes, expected {expected}")
        data = np.frombuffer(payload, dtype=np.uint8)
        out = np.empty(layout.shape, dtype=np.float32)
        offset = 0
        for half, index, axis, width, runs in plan:
            decoded = []
            for i, (first, end, bits) in enumerate(runs):
                n_rows = end - first
                size = packed_size(n_rows * width, bits)
                packed = data[offset: offset + size]
                offset += size
                grid = grid_bytes * n_rows
                first_half, second_half = data[offset: offset + grid], data[offset + grid: offset + 2 * grid]
                offset += 2 * grid
                if log8:
                    decoded.append(dequantize_rows_log8(packed, bits, width, first_half, second_half.view(np.int8),
                                                        bases[half][i]))
                else:
                    decoded.append(dequantize_rows(packed, bits, width, first_half.view(np.float16),
                                                   second_half.view(np.float16)))
            rows = decoded[0] if len(decoded) == 1 else np.concatenate(decoded)
            out[index] = self._inverse(half, kvarray.from_rows(rows, shape, axis), layout, params)
        kvarray.store(out, layout, dest)


def _range_bases(params: dict[str, Any], runs: list[tuple[str, int]]) -> dict[str, list[int]]:
    """``params["range_base"]``, checked: one int per run of each half."""
    bases = params.get("range_base")
    if (not isinstance(bases, dict) or set(bases) != {half for half, _ in runs}
            or any(not isinstance(bases[half], list) or len(bases[half]) != count
                   or not all(type(b) is int and abs(b) < 1 << 16 for b in bases[half]) for half, count in runs)):
        raise CorruptBlockError(f"log8 range bases {bases!r} do not match the block's runs {runs}")
    return bases


class LbqCodec(GroupQuantCodec):
    """4/3/2-bit asymmetric groups, K per channel and V per token (KIVI)."""

    name = "lbq"
    version = 1
    mode = "lbq"
    config_model: ClassVar[type[PluginConfig]] = LbqConfig

    def __init__(self, config: PluginConfig | None = None) -> None:
        super().__init__(config)
        self.options: LbqConfig = self.config  # type: ignore[assignment]

    def error_bound(self, layout: KVLayout | None) -> float:
        if layout is None or not kvarray.quantizable(layout):
            return 0.0
        # half a step of a grid spanning at most [-max|x|, max|x|], rounded up for float16 scales
        return 1.0 / levels(self.options.bits) + ROUNDING_SLACK

    def _params(self, layout: KVLayout, x: np.ndarray) -> dict[str, Any]:
        return {"mode": self.mode, "bits": self.options.bits, "group": self.options.group_size,
                "k": self.options.k_groups}

    def _check_params(self, params: dict[str, Any]) -> None:
        if (set(params) != {"mode", "bits", "group", "k"} or params["bits"] not in BITS
                or not isinstance(params["group"], int) or not 1 <= params["group"] <= 1 << 20
                or params["k"] not in ("channel", "token")):
            raise CorruptBlockError(f"{self.tag}: params not understood: {params!r}")

    def _grouping(self, half: str, layout: KVLayout, params: dict[str, Any]) -> tuple[int, int]:
        axes = kvarray.half_axes(layout)
        along = "token" if half == "k" and params["k"] == "channel" else "dim"
        return kvarray.group_axis(axes, along), params["group"]


class Int2Codec(LbqCodec):
    """Plain 2-bit groups of 32 per token: the baseline that rotation-based 2-bit must beat."""

    name = "int2"
    version = 1
    config_model: ClassVar[type[PluginConfig]] = Int2Config
