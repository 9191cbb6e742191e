"""Exact compression of KV blocks: split each element into byte planes, compress each plane.

Why planes: in a bf16 element the exponent varies little between neighbouring values while the
mantissa is close to random. Compressing the bytes interleaved hides the exponent's structure;
compressed apart, the exponent plane shrinks to about a third and the mantissa plane is stored as
it is. On real SmolLM2 KV this gives ~1.49x where zstd on the raw bytes gives ~1.28x
(../shared/reference/smollm2.md). fp8 elements are one byte, so they form a single plane.

Two stored formats, told apart by the block's ``params`` (the codec tag stays ``lossless@1`` so
that blocks stored before format 2 still decode):

- **format 2** (``compressor = "huff0"``, the default; ``params = {"format": 2}``): the C
  extension ``_planes`` rotates each 2- or 4-byte element left by one bit (the whole exponent
  then sits in the top byte, as ZipNN's sign-bit reorder does), splits chunks of elements into
  byte planes and codes each plane with huff0 (zstd's Huffman coder), all in one pass per chunk
  and with the GIL released, so the cache's I/O threads encode and decode blocks in parallel.
  Chunks follow the layout (one layer's K or V at a time when the layout says where that is),
  so each Huffman table fits the values it codes. The payload carries its own piece table.
- **format 1** (``compressor = "zstd"`` or ``"lz4"``, and every block stored before format 2):
  planes split with numpy, each compressed with zstd or lz4; the planes' methods and lengths
  are in ``params`` and the payload has no header. A block without a layout (or of a dtype
  not listed in ``ELEMENT_WIDTH``) is format 1 with zstd whatever the compressor: unknown bytes
  may repeat, which Huffman alone cannot use.

Either way a plane that does not shrink by ``min_gain`` is stored raw, and a block none of
whose planes shrink is stored as the raw bytes (``params = {"planes": 0}``): a block never grows.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

import lz4.block
import numpy as np
import zstandard
from lifeboatcache_core.abc import Codec, KVLayout, PluginConfig, StreamDecoder, StreamEncoder
from lifeboatcache_core.chunkfile import Buffer
from lifeboatcache_core.errors import CorruptBlockError
from pydantic import Field

from lifeboatcache_codec_lossless import _planes

#: bytes per element by dtype name (KVLayout.dtype); other dtypes are compressed as bytes
ELEMENT_WIDTH = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint8": 1,
    "int8": 1,
}
METHODS = ("raw", "zstd", "lz4")
#: format 2 codes a plane in chunks of at most this many elements (huff0's block limit)
MAX_CHUNK = _planes.MAX_CHUNK
#: a layout unit (a run of trailing axes) at least this long is a chunk of its own
MIN_UNIT = 16 * 1024
#: bytes of a plane compressed on trial before compressing all of it
PROBE_BYTES = 64 * 1024
#: zstd level 1 as tuned for exponent planes: a plane of 3-bit-entropy bytes has few long
#: repeats, so short matches only cost search time. On real SmolLM2 bf16 KV (256-token blocks)
#: min_match 7 with a 1 Ki-entry hash table gives 1.475x at 1.4x the speed of plain level 1
#: (1.459x); the window never needs to exceed a plane of one block.
LEVEL1_PARAMS = {"window_log": 17, "hash_log": 10, "chain_log": 10, "search_log": 1, "min_match": 7,
                 "strategy": zstandard.STRATEGY_FAST}


class LosslessConfig(PluginConfig):
    """Options of the ``lossless`` codec (a tier's ``codec_options``)."""

    compressor: Literal["huff0", "zstd", "lz4"] = Field(
        "huff0", description="huff0: format 2 in C (best ratio and speed); zstd / lz4: format 1, planes "
                             "compressed from Python")
    level: int = Field(1, ge=1, le=22, description="zstd level (zstd only); above 3 buys little on KV")
    min_gain: float = Field(
        0.03, ge=0.0, lt=1.0,
        description="a plane is stored compressed only if that saves at least this fraction of it")


class LosslessCodec(Codec):
    """Byte-plane split, then huff0 (format 2, default), zstd or lz4 per plane; exact for every dtype."""

    name = "lossless"
    version = 1
    lossless = True
    config_model = LosslessConfig

    def __init__(self, config: PluginConfig | None = None) -> None:
        super().__init__(config)
        self.options: LosslessConfig = self.config  # type: ignore[assignment]
        self._local = threading.local()  # zstd contexts are not thread-safe; tiers encode in pools

    # ------------------------------------------------------------------ helpers

    def _zstd(self) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        pair = getattr(self._local, "zstd", None)
        if pair is None:
            level = self.options.level
            params = zstandard.ZstdCompressionParameters.from_level(
                level, write_content_size=True, **(LEVEL1_PARAMS if level == 1 else {}))
            pair = (zstandard.ZstdCompressor(compression_params=params), zstandard.ZstdDecompressor())
            self._local.zstd = pair
        return pair

    def _pack(self, data: Buffer) -> bytes:
        if self.options.compressor != "lz4":
            return self._zstd()[0].compress(data)
        return lz4.block.compress(data, store_size=False)

    @property
    def _method(self) -> str:
        """Format 1's method for a compressed plane: huff0 falls back to zstd where it does not apply."""
        return "lz4" if self.options.compressor == "lz4" else "zstd"

    def _compress(self, plane: Buffer) -> tuple[str, Buffer]:
        """The plane compressed with the configured method, or raw when that gains too little.

        A large plane is first judged by its first ``PROBE_BYTES``: the mantissa plane of bf16
        KV never compresses, and probing it saves half of the encode time.
        """
        size = memoryview(plane).nbytes
        limit = 1.0 - self.options.min_gain
        if size >= 4 * PROBE_BYTES and len(self._pack(memoryview(plane)[:PROBE_BYTES])) > PROBE_BYTES * limit:
            return "raw", plane
        packed = self._pack(plane)
        if len(packed) <= size * limit:
            return self._method, packed
        return "raw", plane

    def _decompress(self, method: str, data: memoryview, size: int) -> Buffer:
        if method == "raw":
            if data.nbytes != size:
                raise CorruptBlockError(f"lossless: raw plane has {data.nbytes} bytes, expected {size}")
            return data
        try:
            if method == "zstd":
                out = self._zstd()[1].decompress(data, max_output_size=size)
            else:
                out = lz4.block.decompress(data, uncompressed_size=size)
        except (zstandard.ZstdError, lz4.block.LZ4BlockError) as exc:
            raise CorruptBlockError(f"lossless: {method} plane does not decompress: {exc}") from None
        if len(out) != size:
            raise CorruptBlockError(f"lossless: {method} plane decompressed to {len(out)} bytes, expected {size}")
        return out

    # ------------------------------------------------------------------ codec

    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        return self.encode_into(raw, layout, None)

    def encode_into(self, raw: memoryview, layout: KVLayout | None,
                    out: memoryview | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        """Format 2 is coded straight into ``out`` when given (one view of it is the payload)."""
        raw = raw.cast("B") if raw.format != "B" or raw.ndim != 1 else raw
        if not raw.nbytes:
            return [raw], {"planes": 0}
        format2 = self._format2_args(raw, layout)
        if format2 is not None:
            payload: Buffer | None
            if out is None:
                payload = _planes.encode(*format2)
            else:
                length = _planes.encode_into(*format2, out)
                payload = out[:length] if length else None
            if payload is None:
                return [raw], {"planes": 0}
            return [payload], {"format": 2}
        width = ELEMENT_WIDTH.get(layout.dtype, 1) if layout is not None else 1
        if width > 1 and raw.nbytes % width:
            width = 1
        planes: list[Buffer] = [raw] if width == 1 else _split(raw, width)
        methods, pieces = zip(*(self._compress(p) for p in planes), strict=True)
        if all(m == "raw" for m in methods):
            return [raw], {"planes": 0}
        params = {"planes": width, "methods": list(methods), "lengths": [memoryview(p).nbytes for p in pieces]}
        return list(pieces), params

    def stream_encoder(self, raw: memoryview, layout: KVLayout | None, out: memoryview) -> StreamEncoder | None:
        """Format 2 codes chunk by chunk into ``out`` (its piece table, at the front, is the head);
        format 1 codes only whole."""
        raw = raw.cast("B") if raw.format != "B" or raw.ndim != 1 else raw
        format2 = self._format2_args(raw, layout) if raw.nbytes else None
        return None if format2 is None else _Format2Encoder(*format2, out)

    def _format2_args(self, raw: memoryview, layout: KVLayout | None) -> tuple[memoryview, int, int, float] | None:
        """``_planes``' (raw, element width, chunk elements, keep) for a block coded in format 2;
        None for format 1 (zstd or lz4 configured, no layout, a dtype not in ``ELEMENT_WIDTH``)."""
        if self.options.compressor != "huff0" or layout is None or layout.dtype not in ELEMENT_WIDTH:
            return None
        width = ELEMENT_WIDTH[layout.dtype]
        if raw.nbytes % width:
            width = 1
        return raw, width, chunk_elements(layout, raw.nbytes // width), 1.0 - self.options.min_gain

    def decode(self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None,
               dest: memoryview) -> None:
        dest = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        width = params.get("planes")
        if width == 0 and set(params) == {"planes"}:
            if payload.nbytes != dest.nbytes:
                raise CorruptBlockError(f"lossless: raw payload has {payload.nbytes} bytes, expected {dest.nbytes}")
            dest[:] = payload
            return
        if params.get("format") == 2 and len(params) == 1:
            try:
                _planes.decode(payload, dest)
            except ValueError as exc:
                raise CorruptBlockError(f"lossless: {exc}") from None
            return
        methods, lengths = params.get("methods"), params.get("lengths")
        if (not isinstance(width, int) or width not in (1, 2, 4) or set(params) != {"planes", "methods", "lengths"}
                or not isinstance(methods, list) or not isinstance(lengths, list)
                or len(methods) != width or len(lengths) != width
                or any(m not in METHODS for m in methods)
                or any(not isinstance(n, int) or n < 0 for n in lengths)):
            raise CorruptBlockError(f"lossless@{self.version}: params not understood: {params!r}")
        if sum(lengths) != payload.nbytes:
            raise CorruptBlockError(f"lossless: payload has {payload.nbytes} bytes, params say {sum(lengths)}")
        if dest.nbytes % width:
            raise CorruptBlockError(f"lossless: {dest.nbytes} bytes do not split into {width} planes")
        plane_size = dest.nbytes // width
        offset = 0
        if width == 1:
            dest[:] = self._decompress(methods[0], payload, plane_size)
            return
        planes = []
        for method, length in zip(methods, lengths, strict=True):
            planes.append(np.frombuffer(self._decompress(method, payload[offset: offset + length], plane_size),
                                        dtype=np.uint8))
            offset += length
        _interleave(planes, dest)

    def stream_decoder(self, params: dict[str, Any], layout: KVLayout | None, dest: memoryview,
                       payload_len: int) -> StreamDecoder | None:
        """Format 2 decodes chunk by chunk as the payload arrives (its piece table leads it);
        format 1 and raw blocks decode only whole."""
        if params.get("format") != 2 or len(params) != 1:
            return None
        return _Format2Stream(dest, payload_len)


class _Format2Encoder:
    """A format-2 payload coded into ``out`` a few chunks per ``step`` (``StreamEncoder``), from a
    (chunk, offset) cursor kept here."""

    __slots__ = ("_chunk", "_chunks", "_keep", "_next", "_pos", "_raw", "_width", "finished", "head_len",
                 "length", "out")

    def __init__(self, raw: memoryview, width: int, chunk: int, keep: float, out: memoryview) -> None:
        self._raw, self._width, self._chunk, self._keep, self.out = raw, width, chunk, keep, out
        self._chunks, self.head_len = _planes.table_len(raw.nbytes, width, chunk)
        self._next = self._pos = 0
        self.finished = False
        self.length: int | None = None

    def step(self, stop: int) -> int:
        if self.finished:
            return self.length or 0
        self._next, self._pos = _planes.encode_step(self._raw, self._width, self._chunk, self._keep, self.out,
                                                    self._next, self._pos, stop)
        if self._pos == 0 or self._next == self._chunks:  # 0: coding does not pay, the block goes raw
            self.finished = True
            self.length = self._pos or None
        return self._pos

    def result(self) -> tuple[Sequence[Buffer], dict[str, Any]]:
        if self.length is None:
            return [self._raw], {"planes": 0}
        return [self.out[: self.length]], {"format": 2}


class _Format2Stream:
    """A format-2 payload decoded as it is read: every chunk whose pieces have all arrived is
    decoded at once, from a (chunk, offset) cursor kept here, the rest by ``finish``."""

    __slots__ = ("_dest", "_next", "_payload_len", "_pos")

    def __init__(self, dest: memoryview, payload_len: int) -> None:
        self._dest = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
        self._payload_len = payload_len
        self._next = 0
        self._pos = 0

    def feed(self, prefix: memoryview) -> None:
        self._advance(prefix)

    def finish(self, payload: memoryview) -> None:
        if payload.nbytes != self._payload_len:
            raise CorruptBlockError(f"lossless: payload has {payload.nbytes} bytes, expected {self._payload_len}")
        self._advance(payload)

    def _advance(self, prefix: memoryview) -> None:
        try:
            self._next, self._pos = _planes.decode_prefix(prefix, self._dest, self._payload_len,
                                                          self._next, self._pos)
        except ValueError as exc:
            raise CorruptBlockError(f"lossless: {exc}") from None


def chunk_elements(layout: KVLayout | None, elements: int) -> int:
    """Elements per format-2 chunk: one layer's share of the block where the layout shows it.

    Values of one layer share a scale, so one Huffman table per layer codes them as well as
    tables for smaller units do, and every chunk costs its decoder a table read and a lookup
    table build (~7 us a chunk, a quarter of decoding a 48 Ki-element chunk). On SmolLM2 bf16 KV
    in vLLM's (layer, block, page) layout of a 256-token chunk, one table per layer (98,304
    elements) against one per 128-token page: ratio 1.4655 against 1.4653, decode 1.1-1.2x faster.
    The unit is the axes after the last "layer" axis where they hold at least ``MIN_UNIT``
    elements; otherwise the shortest run of trailing axes that does (for the benchmark's (kv,
    layer, token, head, dim) both are one layer's K or V: 1.488x against 1.482x with fixed
    128 Ki chunks). A unit over ``MAX_CHUNK`` is cut evenly.
    """
    unit = elements
    if layout is not None and layout.shape and _prod(layout.shape) == elements:
        unit = 0
        if "layer" in layout.axes:
            last_layer = len(layout.axes) - 1 - layout.axes[::-1].index("layer")
            unit = _prod(layout.shape[last_layer + 1:])
        if unit < MIN_UNIT:
            unit = 1
            for size in reversed(layout.shape):
                unit *= max(size, 1)
                if unit >= MIN_UNIT:
                    break
    unit = max(unit, 1)
    pieces = -(-unit // MAX_CHUNK)
    return max(1, min(MAX_CHUNK, -(-unit // pieces)))


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for size in shape:
        out *= size
    return out


def _split(raw: memoryview, width: int) -> list[Buffer]:
    """Little-endian elements of ``width`` bytes as byte planes, lowest byte first.

    Two-byte elements (bf16/fp16) are split with a shift and a narrowing cast on uint16, which
    runs at memory speed where a strided byte copy per plane takes twice as long.
    """
    if width == 2:
        elements = np.frombuffer(raw, dtype=np.uint16)
        return [elements.astype(np.uint8).data, (elements >> 8).astype(np.uint8).data]
    bytes_ = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    return [np.ascontiguousarray(bytes_[:, i]).data for i in range(width)]


def _interleave(planes: list[np.ndarray], dest: memoryview) -> None:
    """Write byte planes back as little-endian elements into ``dest``.

    Two planes (bf16/fp16, the common case) are joined with a shift and an or on uint16,
    three times faster than two strided byte copies.
    """
    if len(planes) == 2:
        out16 = np.frombuffer(dest, dtype=np.uint16)
        np.left_shift(planes[1], 8, out=out16, dtype=np.uint16)
        np.bitwise_or(out16, planes[0], out=out16)
        return
    out = np.frombuffer(dest, dtype=np.uint8).reshape(-1, len(planes))
    for i, plane in enumerate(planes):
        out[:, i] = plane
