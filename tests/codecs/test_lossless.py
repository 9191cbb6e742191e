"""The lossless codec: exact for any bytes in any dtype, never larger than its input."""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lifeboatcache_codec_lossless.codec import LosslessCodec, LosslessConfig
from lifeboatcache_core.abc import KVLayout
from lifeboatcache_core.errors import CorruptBlockError

AXES = ("kv", "layer", "token", "head", "dim")
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1, "uint8": 1}
SPECIALS = {  # NaN, +-Inf, -0, smallest denormal and largest finite, per width
    2: [0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x7F7F, 0x7E00, 0x7C00, 0x03FF],
    4: [0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x7F7FFFFF],
    1: [0x7F, 0xFF, 0x80, 0x01, 0x7C, 0xFC],
}


def _elements(draw: st.DrawFn, count: int, width: int) -> bytes:
    """KV-like values, bit patterns from the dtype's corners, or uniform noise."""
    kind = draw(st.sampled_from(["kv", "specials", "noise", "zeros", "constant"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    if kind == "zeros":
        return bytes(count * width)
    if kind == "noise":
        return rng.integers(0, 256, count * width, dtype=np.uint8).tobytes()
    if kind == "constant":
        return np.full(count, rng.integers(0, 2 ** (8 * width)), dtype=dtype).tobytes()
    if kind == "specials":
        return rng.choice(np.array(SPECIALS[width], dtype=dtype), count).tobytes()
    x = (rng.standard_normal(count) * 3).astype(np.float32)
    if width == 4:
        return x.tobytes()
    if width == 2:
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return (x.view(np.uint32) >> 24).astype(np.uint8).tobytes()


@st.composite
def blocks(draw: st.DrawFn) -> tuple[KVLayout, bytes]:
    dtype = draw(st.sampled_from(sorted(ITEMSIZE)))
    shape = (2, draw(st.integers(1, 3)), draw(st.integers(1, 40)), draw(st.integers(1, 3)),
             draw(st.sampled_from([1, 8, 64])))
    return KVLayout(dtype, shape, AXES), _elements(draw, int(np.prod(shape)), ITEMSIZE[dtype])


def round_trip(codec: LosslessCodec, raw: bytes, layout: KVLayout | None) -> tuple[bytes, int]:
    pieces, params = codec.encode(memoryview(raw), layout)
    payload = b"".join(bytes(p) for p in pieces)
    dest = bytearray(len(raw))
    codec.decode(memoryview(payload), params, layout, memoryview(dest))
    return bytes(dest), len(payload)


@pytest.mark.parametrize("config", [LosslessConfig(), LosslessConfig(compressor="zstd"),
                                    LosslessConfig(compressor="lz4"), LosslessConfig(compressor="zstd", level=9)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=blocks())
def test_exact_and_never_larger(config: LosslessConfig, block: tuple[KVLayout, bytes]) -> None:
    layout, raw = block
    codec = LosslessCodec(config)
    out, stored = round_trip(codec, raw, layout)
    assert out == raw
    assert stored <= len(raw)


def test_without_layout_it_compresses_bytes() -> None:
    raw = bytes(range(256)) * 64
    out, stored = round_trip(LosslessCodec(), raw, None)
    assert out == raw and stored < len(raw) // 10


def test_incompressible_block_is_stored_raw() -> None:
    raw = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    pieces, params = LosslessCodec().encode(memoryview(raw), KVLayout("bfloat16", (1 << 15,), ("dim",)))
    assert params == {"planes": 0} and b"".join(bytes(p) for p in pieces) == raw


def test_exponent_plane_is_what_compresses() -> None:
    """On bf16 KV-like data the split beats plain zstd on interleaved bytes by a wide margin."""
    x = (np.random.default_rng(2).standard_normal(1 << 18) * 2).astype(np.float32)
    raw = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    layout = KVLayout("bfloat16", (1 << 18,), ("dim",))
    _, split = round_trip(LosslessCodec(), raw, layout)
    _, plain = round_trip(LosslessCodec(), raw, None)
    assert len(raw) / split > 1.25 and split < plain * 0.92


@pytest.mark.parametrize("params", [
    {"planes": 2, "methods": ["zstd", "brotli"], "lengths": [1, 1]},
    {"planes": 3, "methods": ["raw"] * 3, "lengths": [1, 1, 1]},
    {"planes": 2, "methods": ["raw", "raw"], "lengths": [1, 1], "future": True},
    {"planes": 0, "extra": 1},
    {},
])
def test_params_it_does_not_understand_are_corrupt(params: dict) -> None:
    with pytest.raises(CorruptBlockError):
        LosslessCodec().decode(memoryview(b"xy"), params, KVLayout("bfloat16", (1,), ("dim",)),
                               memoryview(bytearray(2)))


def test_garbage_compressed_plane_is_corrupt() -> None:
    x = (np.random.default_rng(3).standard_normal(4096)).astype(np.float32)
    raw = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    layout = KVLayout("bfloat16", (4096,), ("dim",))
    codec = LosslessCodec(LosslessConfig(compressor="zstd"))
    pieces, params = codec.encode(memoryview(raw), layout)
    assert "zstd" in params["methods"]
    payload = bytearray(b"".join(bytes(p) for p in pieces))
    zstd_at = sum(params["lengths"][: params["methods"].index("zstd")])
    payload[zstd_at: zstd_at + 8] = b"\xff" * 8  # the zstd frame's magic and header
    with pytest.raises(CorruptBlockError):
        codec.decode(memoryview(bytes(payload)), params, layout, memoryview(bytearray(len(raw))))


def _kv_like(count: int, seed: int = 4) -> bytes:
    """bf16 values with a per-channel scale, like K: what the codec is for."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((count // 64, 64)) * rng.uniform(0.1, 8, 64)).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def test_format_1_blocks_still_decode_with_the_default_codec() -> None:
    """Blocks a tier stored with format 1 (zstd planes, the default before) decode after the upgrade."""
    raw = _kv_like(1 << 16)
    layout = KVLayout("bfloat16", (2, 1, 256, 2, 64), AXES)
    pieces, params = LosslessCodec(LosslessConfig(compressor="zstd")).encode(memoryview(raw), layout)
    assert params["planes"] == 2 and "zstd" in params["methods"]
    dest = bytearray(len(raw))
    LosslessCodec().decode(memoryview(b"".join(bytes(p) for p in pieces)), params, layout, memoryview(dest))
    assert dest == raw


def test_format_2_is_the_default_and_beats_format_1() -> None:
    raw = _kv_like(1 << 18)
    layout = KVLayout("bfloat16", (2, 2, 256, 2, 64), AXES)
    _, params = LosslessCodec().encode(memoryview(raw), layout)
    assert params == {"format": 2}
    out, stored = round_trip(LosslessCodec(), raw, layout)
    _, stored_v1 = round_trip(LosslessCodec(LosslessConfig(compressor="zstd")), raw, layout)
    assert out == raw and stored < stored_v1


def test_a_vllm_chunk_is_coded_one_huffman_table_per_layer() -> None:
    """vLLM's (layer, block, page) chunk: one format-2 chunk per layer, across its pages. Each
    chunk costs the decoder a table build, and one layer's values share a scale: a table per
    page would only decode slower."""
    layers, pages, page = 3, 2, 16384
    scaled = [np.frombuffer(_kv_like(pages * page), np.uint16) + np.uint16(layer << 7) for layer in range(layers)]
    raw = np.concatenate(scaled).tobytes()
    layout = KVLayout("bfloat16", (layers, pages, page), ("layer", "block", "page"))
    pieces, params = LosslessCodec().encode(memoryview(raw), layout)
    payload = b"".join(bytes(p) for p in pieces)
    assert int.from_bytes(payload[4:8], "little") == pages * page
    dest = bytearray(len(raw))
    LosslessCodec().decode(memoryview(payload), params, layout, memoryview(dest))
    assert dest == raw


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 10_000), flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), max_size=4))
def test_damaged_format_2_payload_is_corrupt_never_a_crash(cut: int, flips: list[tuple[int, int]]) -> None:
    """The C decoder checks every length it reads: a truncated payload is corrupt, a flipped one
    is corrupt or decodes to some bytes of the right size (the tier's digest catches those)."""
    raw = _kv_like(1 << 14)
    layout = KVLayout("bfloat16", (2, 1, 64, 2, 64), AXES)
    pieces, params = LosslessCodec().encode(memoryview(raw), layout)
    payload = bytearray(b"".join(bytes(p) for p in pieces))
    dest = bytearray(len(raw))
    if cut:
        del payload[-1 - cut % len(payload):]
        with pytest.raises(CorruptBlockError):
            LosslessCodec().decode(memoryview(bytes(payload)), params, layout, memoryview(dest))
        return
    for at, xor in flips:
        payload[at % len(payload)] ^= xor
    try:
        LosslessCodec().decode(memoryview(bytes(payload)), params, layout, memoryview(dest))
    except CorruptBlockError:
        return
    assert len(dest) == len(raw)


def test_format_2_runs_without_the_gil() -> None:
    """Another Python thread runs while blocks encode: the cache's I/O threads code blocks in parallel.

    No timing: with a switch interval of minutes the interpreter never takes the GIL from the
    encoding thread, which encodes block after block until the main thread says it ran. Holding
    the GIL in C, the main thread could only run once all ``ROUNDS`` encodes were done.
    """
    rounds = 200
    raw = _kv_like(1 << 22)  # 8 MiB
    layout = KVLayout("bfloat16", (2, 4, 1024, 8, 64), AXES)
    codec = LosslessCodec()
    started, main_ran, done = threading.Event(), threading.Event(), []

    def encode() -> None:
        started.set()
        while not main_ran.is_set() and len(done) < rounds:
            codec.encode(memoryview(raw), layout)
            done.append(1)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(300.0)
    try:
        worker = threading.Thread(target=encode)
        worker.start()
        started.wait()
        main_ran.set()
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(done) < rounds


def _stream_block() -> tuple[KVLayout, bytes, bytes, dict]:
    raw = _kv_like(1 << 17)
    layout = KVLayout("bfloat16", (2, 4, 128, 2, 64), AXES)  # 8 chunks: one per layer's K or V
    pieces, params = LosslessCodec().encode(memoryview(raw), layout)
    return layout, raw, b"".join(bytes(p) for p in pieces), params


def test_format_2_stream_decodes_each_chunk_once_its_pieces_have_arrived() -> None:
    """Fed the first half of a payload, the stream has already written the first chunks into dest
    (and nothing past what arrived): decoding overlaps the read of the rest of the block."""
    layout, raw, payload, params = _stream_block()
    dest = bytearray(len(raw))
    stream = LosslessCodec().stream_decoder(params, layout, memoryview(dest), len(payload))
    assert stream is not None
    stream.feed(memoryview(payload)[:16])  # the header, not yet its piece table: nothing to do
    assert dest == bytearray(len(raw))
    stream.feed(memoryview(payload)[: len(payload) // 2])
    chunk = len(raw) // 8
    done = next(i for i in range(9) if i == 8 or dest[i * chunk:(i + 1) * chunk] != raw[i * chunk:(i + 1) * chunk])
    assert 2 <= done < 8, f"{done} of 8 chunks decoded from half the payload"
    assert dest[done * chunk:] == bytearray(len(raw) - done * chunk), "decoded a chunk that had not arrived"
    stream.finish(memoryview(payload))
    assert dest == raw


def test_format_1_and_raw_blocks_decode_only_whole() -> None:
    layout, raw, _, _ = _stream_block()
    codec = LosslessCodec(LosslessConfig(compressor="zstd"))
    _, params = codec.encode(memoryview(raw), layout)
    assert codec.stream_decoder(params, layout, memoryview(bytearray(len(raw))), 10) is None
    assert LosslessCodec().stream_decoder({"planes": 0}, layout, memoryview(bytearray(len(raw))), 10) is None


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**9), max_size=5),
       flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1, max_size=4))
def test_a_damaged_payload_fed_in_pieces_is_corrupt_never_a_crash(cuts: list[int],
                                                                    flips: list[tuple[int, int]]) -> None:
    """Streamed bytes are decoded before the tier has checked their digest: a flipped piece table
    or piece must raise or decode to bytes of the right size, at any cut, never read past the
    prefix it was given."""
    layout, raw, good, params = _stream_block()
    payload = bytearray(good)
    for at, xor in flips:
        payload[at % len(payload)] ^= xor
    dest = bytearray(len(raw))
    stream = LosslessCodec().stream_decoder(params, layout, memoryview(dest), len(payload))
    assert stream is not None
    try:
        for cut in sorted(c % (len(payload) + 1) for c in cuts):
            stream.feed(memoryview(bytes(payload[:cut])))  # a copy: bytes past the cut do not exist
        stream.finish(memoryview(bytes(payload)))
    except CorruptBlockError:
        return
    assert len(dest) == len(raw)


def _skewed_bytes(rng: np.random.Generator, count: int, kind: str) -> bytes:
    """Byte planes whose Huffman codes run from 1 bit (two symbols) to huff0's longest (11)."""
    if kind == "two":
        return rng.integers(0, 2, count, dtype=np.uint8).tobytes()
    if kind == "geometric":  # long tails: codes of every length up to 11 bits
        return np.minimum(rng.geometric(0.35, count), 255).astype(np.uint8).tobytes()
    if kind == "zipf":
        return np.minimum(rng.zipf(1.6, count), 255).astype(np.uint8).tobytes()
    return (np.minimum(np.abs(rng.standard_normal(count)) * 3, 40)).astype(np.uint8).tobytes()  # exponent-like


@pytest.mark.parametrize("kind", ["two", "geometric", "zipf", "exponent"])
@pytest.mark.parametrize("count", [1023, 1024, 1027, 5001, 65_536, 131_072])
def test_huffman_pieces_of_every_code_length_and_size_decode_exactly(kind: str, count: int) -> None:
    """The decoder that resolves several symbols per lookup (used from 1,024 symbols a piece; huff0's
    own below) must give back every byte, whatever the code lengths and wherever a stream's
    segment ends (sizes that are not a multiple of four leave the last stream shorter)."""
    from lifeboatcache_codec_lossless import _planes

    rng = np.random.default_rng(count)
    raw = _skewed_bytes(rng, count, kind)
    payload = _planes.encode(memoryview(raw), 1, min(count, _planes.MAX_CHUNK), 0.97)
    assert payload is not None, "the test data must compress, or no Huffman piece is stored"
    dest = bytearray(count)
    _planes.decode(payload, dest)
    assert dest == raw


@pytest.mark.parametrize("offset", [0, 1, 8])
def test_format_2_decodes_into_a_buffer_at_any_alignment(offset: int) -> None:
    """Two-byte elements are joined with streaming stores into a 16-byte aligned destination and
    with plain stores into any other: the same bytes either way (an engine's row may start anywhere)."""
    raw = _kv_like(1 << 16)
    layout = KVLayout("bfloat16", (2, 2, 64, 4, 64), AXES)
    pieces, params = LosslessCodec().encode(memoryview(raw), layout)
    assert params == {"format": 2}
    backing = np.zeros(len(raw) + 64, dtype=np.uint8)
    start = (-backing.ctypes.data) % 64 + offset
    dest = memoryview(backing)[start:start + len(raw)]
    LosslessCodec().decode(memoryview(b"".join(bytes(p) for p in pieces)), params, layout, dest)
    assert bytes(dest) == raw


@pytest.mark.parametrize("stop", [1, 4096, 100_000])
@pytest.mark.parametrize("low_bytes", ["noise", "noise then zeros"])
def test_format_2_coded_a_chunk_at_a_time_is_the_one_call_payload(stop: int, low_bytes: str) -> None:
    """Resumed chunk after chunk, the encoder codes exactly what one call does: the run of
    chunks each plane was stored raw in (which decides when a raw plane is tried again: low
    bytes that turn to zeros after two noisy chunks stay raw until the retry) is carried over,
    and bytes past the piece table never change once coded."""
    raw = _kv_like(1 << 20)
    if low_bytes != "noise":
        elements = np.frombuffer(raw, dtype=np.uint16).copy()
        elements[2 * 16384:] &= 0xFF00
        raw = elements.tobytes()
    layout = KVLayout("bfloat16", (2, 32, 128, 2, 64), AXES)  # 64 chunks, mantissa planes raw
    codec = LosslessCodec()
    pieces, params = codec.encode(memoryview(raw), layout)
    whole = b"".join(bytes(p) for p in pieces)
    assert params == {"format": 2}
    out = memoryview(mmap.mmap(-1, len(raw)))
    encoder = codec.stream_encoder(memoryview(raw), layout, out)
    assert encoder is not None
    settled: list[tuple[int, bytes]] = []
    coded = 0
    while not encoder.finished:
        coded = encoder.step(coded + stop)
        settled.append((coded, bytes(out[encoder.head_len: coded])))
    assert len(settled) > 3 if stop < 100_000 else len(settled) > 1
    assert encoder.length == len(whole) and bytes(out[: len(whole)]) == whole
    for upto, seen in settled:
        assert whole[encoder.head_len: upto] == seen, "a settled byte changed after it was coded"


def test_format_2_stream_encoder_falls_back_to_raw_bytes_that_do_not_shrink() -> None:
    raw = np.random.default_rng(5).integers(0, 256, 1 << 18, dtype=np.uint8).tobytes()
    layout = KVLayout("bfloat16", (2, 4, 128, 2, 64), AXES)
    encoder = LosslessCodec().stream_encoder(memoryview(raw), layout, memoryview(mmap.mmap(-1, len(raw))))
    assert encoder is not None
    while not encoder.finished:
        encoder.step(1 << 30)
    pieces, params = encoder.result()
    assert encoder.length is None and params == {"planes": 0} and b"".join(bytes(p) for p in pieces) == raw
