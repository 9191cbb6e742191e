"""fp8, lbq, int2 and oscar: ratios by construction, error bounds, grouping, rotations, raw fallbacks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lifeboatcache_codec_fp8.codec import Fp8Codec, Fp8Config
from lifeboatcache_codec_lbq.lbq import Int2Codec, LbqCodec, LbqConfig
from lifeboatcache_codec_lbq.oscar import _SINGLE_THREADED_BLAS, OscarCodec, OscarConfig, Rotation
from lifeboatcache_core.abc import Codec, KVLayout
from lifeboatcache_core.errors import CorruptBlockError

AXES = ("kv", "layer", "token", "head", "dim")
BLOCK = KVLayout("bfloat16", (2, 2, 256, 3, 64), AXES)  # one 256-token block of a 2-layer model


def kv_like(shape: tuple[int, ...], seed: int = 0, outlier_channels: int = 0) -> np.ndarray:
    """bf16 KV-ish values: per-channel offsets and scales, optionally a few large K channels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x *= rng.uniform(0.3, 3.0, shape[-1]).astype(np.float32)
    x += rng.normal(0, 1.0, shape[-1]).astype(np.float32)
    if outlier_channels:
        x[0, ..., rng.choice(shape[-1], outlier_channels, replace=False)] *= 12.0
    return x.astype(ml_dtypes.bfloat16)


def round_trip(codec: Codec, x: np.ndarray, layout: KVLayout) -> tuple[np.ndarray, int, dict]:
    pieces, params = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), layout)
    payload = b"".join(bytes(p) for p in pieces)
    out = np.empty_like(x)
    codec.decode(memoryview(payload), params, layout, memoryview(out.view(np.uint8).reshape(-1)))
    return out, len(payload), params


def rel_err(x: np.ndarray, y: np.ndarray) -> float:
    a, b = x.astype(np.float32), y.astype(np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


@pytest.mark.parametrize(("codec", "minimum"), [
    (Fp8Codec(), 1.99),
    (Fp8Codec(Fp8Config(scale="token_head")), 1.96),
    (LbqCodec(), 3.5),
    (LbqCodec(LbqConfig(bits=3)), 4.5),
    (LbqCodec(LbqConfig(bits=2)), 6.0),
    (Int2Codec(), 5.3),
])
def test_ratio_on_a_256_token_bf16_block(codec: Codec, minimum: float) -> None:
    x = kv_like(BLOCK.shape)
    _, stored, _ = round_trip(codec, x, BLOCK)
    assert x.nbytes / stored >= minimum


def test_oscar_ratio_and_error_below_int2(tmp_path: Path) -> None:
    x = kv_like(BLOCK.shape, seed=4, outlier_channels=3)
    oscar = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    out, stored, params = round_trip(oscar, x, BLOCK)
    assert x.nbytes / stored >= 6.0
    int2_out, _, _ = round_trip(Int2Codec(), x, BLOCK)
    for half in (0, 1):
        assert rel_err(x[half], out[half]) < 0.8 * rel_err(x[half], int2_out[half])
    assert (tmp_path / f"oscar-{params['rotation']}.npz").is_file()


def test_oscar_rotation_is_orthogonal_stored_once_and_found_after_restart(tmp_path: Path) -> None:
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    first, _, p1 = round_trip(codec, kv_like(BLOCK.shape, seed=1), BLOCK)
    _, _, p2 = round_trip(codec, kv_like(BLOCK.shape, seed=2), BLOCK)
    assert p1["rotation"] == p2["rotation"] and len(list(tmp_path.glob("oscar-*.npz"))) == 1
    rotation = codec.rotation(p1["rotation"])
    for half in ("k", "v"):
        r = rotation.matrix(half).astype(np.float64)
        np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(64), r.shape), atol=1e-5)
    other = KVLayout("bfloat16", (2, 1, 64, 2, 32), AXES)
    _, _, p3 = round_trip(codec, kv_like(other.shape), other)
    assert p3["rotation"] != p1["rotation"]
    # a new process: the block names its rotation, the file provides it
    x = kv_like(BLOCK.shape, seed=1)
    pieces, params = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), BLOCK)
    payload = memoryview(b"".join(bytes(p) for p in pieces))
    out = np.empty_like(x)
    OscarCodec(OscarConfig(rotation_dir=tmp_path)).decode(payload, params, BLOCK,
                                                          memoryview(out.view(np.uint8).reshape(-1)))
    np.testing.assert_array_equal(out, first)
    # ... and encodes new blocks of that shape with the same rotation instead of storing another
    _, _, p4 = round_trip(OscarCodec(OscarConfig(rotation_dir=tmp_path)), kv_like(BLOCK.shape, seed=8), BLOCK)
    assert p4["rotation"] == p1["rotation"] and len(list(tmp_path.glob("oscar-*.npz"))) == 2
    # ... and without the file the block is corrupt (a miss), never garbage
    with pytest.raises(CorruptBlockError, match="rotation"):
        OscarCodec(OscarConfig(rotation_dir=tmp_path / "elsewhere")).decode(
            payload, params, BLOCK, memoryview(out.view(np.uint8).reshape(-1)))


def test_k_per_channel_groups_run_along_tokens() -> None:
    """K constant along tokens (per channel) is exact per channel, not per token."""
    x = kv_like(BLOCK.shape).astype(np.float32)
    x[0] = x[0, :, :1, :, :]  # every token's K equals token 0's
    x = x.astype(ml_dtypes.bfloat16)
    per_channel, _, _ = round_trip(LbqCodec(LbqConfig(bits=2)), x, BLOCK)
    per_token, _, _ = round_trip(LbqCodec(LbqConfig(bits=2, k_groups="token")), x, BLOCK)
    assert rel_err(x[0], per_channel[0]) < 2e-3 < rel_err(x[0], per_token[0])


@settings(max_examples=30, deadline=None)
@given(bits=st.sampled_from([2, 3, 4]), group=st.integers(8, 80), tokens=st.integers(1, 70),
       dim=st.sampled_from([8, 24, 64]), k_groups=st.sampled_from(["channel", "token"]),
       dtype=st.sampled_from(["bfloat16", "float16", "float32"]), seed=st.integers(0, 2**16))
def test_lbq_stays_within_its_bound(bits: int, group: int, tokens: int, dim: int, k_groups: str,
                                     dtype: str, seed: int) -> None:
    layout = KVLayout(dtype, (2, 2, tokens, 2, dim), AXES)
    x = kv_like(layout.shape, seed).astype(np.float32).astype({"bfloat16": ml_dtypes.bfloat16}.get(dtype, dtype))
    codec = LbqCodec(LbqConfig(bits=bits, group_size=group, k_groups=k_groups))
    out, _, _ = round_trip(codec, x, layout)
    a, b = x.astype(np.float32), out.astype(np.float32)
    assert np.max(np.abs(a - b)) <= codec.error_bound(layout) * np.max(np.abs(a)) + 1e-6


@pytest.mark.parametrize("make", [Fp8Codec, LbqCodec, Int2Codec])
def test_non_finite_blocks_are_stored_exactly(make: type[Codec]) -> None:
    x = kv_like(BLOCK.shape).astype(np.float32)
    x[1, 0, 5, 0, 3] = np.nan
    x[0, 1, 7, 2, 0] = -np.inf
    x = x.astype(ml_dtypes.bfloat16)
    out, stored, params = round_trip(make(), x, BLOCK)
    assert params == {"mode": "raw"} and stored == x.nbytes
    assert out.view(np.uint16).tobytes() == x.view(np.uint16).tobytes()


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_input_passes_through(dtype: str) -> None:
    layout = KVLayout(dtype, BLOCK.shape, AXES)
    raw = np.random.default_rng(0).integers(0, 256, int(np.prod(BLOCK.shape)), dtype=np.uint8)
    pieces, params = Fp8Codec().encode(memoryview(raw), layout)
    assert params == {"mode": "raw"} and b"".join(bytes(p) for p in pieces) == raw.tobytes()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_error_is_fp8_rounding(fmt: str) -> None:
    x = kv_like(BLOCK.shape, seed=9)
    codec = Fp8Codec(Fp8Config(format=fmt, scale="token_head"))
    out, _, _ = round_trip(codec, x, BLOCK)
    a, b = x.astype(np.float32), out.astype(np.float32)
    big = np.abs(a) > np.max(np.abs(a)) * 2**-6  # normal range of every scaled group
    assert np.max(np.abs(a - b)[big] / np.abs(a)[big]) <= codec.error_bound(BLOCK)


@pytest.mark.parametrize(("codec", "params"), [
    (Fp8Codec(), {"mode": "fp8", "format": "e3m4", "scale": "block"}),
    (Fp8Codec(), {"mode": "fp8", "format": "e4m3", "scale": "block", "v": 2}),
    (LbqCodec(), {"mode": "lbq", "bits": 5, "group": 64, "k": "channel"}),
    (LbqCodec(), {"mode": "oscar", "bits": 2, "rotation": "x"}),
    (Int2Codec(), {"mode": "lbq", "bits": 2, "group": 32}),
    (OscarCodec(), {"mode": "oscar", "bits": 3, "rotation": "x"}),
])
def test_params_it_does_not_understand_are_corrupt(codec: Codec, params: dict) -> None:
    with pytest.raises(CorruptBlockError):
        codec.decode(memoryview(bytes(1000)), params, BLOCK, memoryview(bytearray(BLOCK_BYTES)))


BLOCK_BYTES = int(np.prod(BLOCK.shape)) * 2


def test_opaque_engine_rows_lbq_quantizes_oscar_keeps_raw(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """vLLM's native rows are described as (layer, block, page): lbq groups along the page,
    oscar (which needs head vectors) stores them unchanged and says why, once."""
    layout = KVLayout("bfloat16", (2, 4, 2048), ("layer", "block", "page"))
    x = kv_like(layout.shape, seed=5)
    lbq = LbqCodec()
    out, stored, params = round_trip(lbq, x, layout)
    assert params["mode"] == "lbq" and x.nbytes / stored >= 3.5
    a, b = x.astype(np.float32), out.astype(np.float32)
    assert np.max(np.abs(a - b)) <= lbq.error_bound(layout) * np.max(np.abs(a))
    oscar = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    for _ in range(2):
        out, stored, params = round_trip(oscar, x, layout)
        assert params == {"mode": "raw"} and out.tobytes() == x.tobytes()
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "no 'dim' axis" in caplog.records[0].message


def test_oscar_keeps_sink_tokens_exact(tmp_path: Path) -> None:
    x = kv_like(BLOCK.shape, seed=6).astype(np.float32)
    x[:, :, 0] *= 0.1  # an attention sink: far smaller norms than its block in every layer and head
    x = x.astype(ml_dtypes.bfloat16)
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    out, stored, params = round_trip(codec, x, BLOCK)
    assert params["exact_tokens"] == [0] and x.nbytes / stored >= 6.0
    assert out[:, :, 0].tobytes() == x[:, :, 0].tobytes()
    assert out[:, :, 1:].tobytes() != x[:, :, 1:].tobytes()
    pieces, params = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), BLOCK)
    payload = b"".join(bytes(p) for p in pieces)
    for cut in (1, 1000, len(payload) - 1):  # the sink bytes sit at the end: any cut is caught
        with pytest.raises(CorruptBlockError):
            codec.decode(memoryview(payload[:cut]), params, BLOCK, memoryview(bytearray(x.nbytes)))
    with pytest.raises(CorruptBlockError):
        codec.decode(memoryview(payload), {**params, "exact_tokens": [0, 256]}, BLOCK,
                     memoryview(bytearray(x.nbytes)))
    no_sinks = OscarCodec(OscarConfig(rotation_dir=tmp_path, exact_tokens=0))
    assert no_sinks.encode(memoryview(x.view(np.uint8).reshape(-1)), BLOCK)[1]["exact_tokens"] == []


@settings(max_examples=25, deadline=None)
@given(fmt=st.sampled_from(["e4m3", "e5m2"]), scale=st.sampled_from(["block", "token_head"]),
       tokens=st.integers(1, 40), dim=st.sampled_from([1, 8, 64]), magnitude=st.sampled_from([1e-3, 1.0, 300.0]),
       dtype=st.sampled_from(["bfloat16", "float16", "float32"]), seed=st.integers(0, 2**16))
def test_fp8_stays_within_its_bound(fmt: str, scale: str, tokens: int, dim: int, magnitude: float, dtype: str,
                                    seed: int) -> None:
    layout = KVLayout(dtype, (2, 2, tokens, 2, dim), AXES)
    x = (kv_like(layout.shape, seed).astype(np.float32) * magnitude).astype(
        {"bfloat16": ml_dtypes.bfloat16}.get(dtype, dtype))
    codec = Fp8Codec(Fp8Config(format=fmt, scale=scale))
    out, stored, _ = round_trip(codec, x, layout)
    a, b = x.astype(np.float32), out.astype(np.float32)
    assert np.max(np.abs(a - b)) <= codec.error_bound(layout) * np.max(np.abs(a))
    assert stored <= x.nbytes


def test_oscar_from_many_threads_leaves_blas_threading_as_it_was(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]

    before = blas_threads()
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    x = kv_like(BLOCK.shape, seed=3)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: round_trip(codec, x, BLOCK)[0].tobytes(), range(4)))
    assert len(set(outs)) == 1  # one calibration, same bytes from every thread
    assert _SINGLE_THREADED_BLAS.restored(timeout_s=10)  # after the limiter's linger
    assert blas_threads() == before


def test_oscar_blocks_back_to_back_limit_blas_once_not_per_call(tmp_path: Path) -> None:
    """Toggling BLAS's thread count between calls woke its worker threads, which spun on the
    cores the codec threads needed; the limit lingers while blocks keep coming."""
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    x = kv_like(BLOCK.shape, seed=4)
    round_trip(codec, x, BLOCK)  # calibration
    assert _SINGLE_THREADED_BLAS.restored(timeout_s=10)
    before = _SINGLE_THREADED_BLAS.limited
    for _ in range(10):
        round_trip(codec, x, BLOCK)
    assert _SINGLE_THREADED_BLAS.limited - before == 1
    assert _SINGLE_THREADED_BLAS.restored(timeout_s=10)


def test_oscar_precise_layers_are_stored_at_more_bits_and_the_rest_as_before(tmp_path: Path) -> None:
    """A layer named in precise_k keeps its keys at precise_bits: its error falls, its bytes grow by
    exactly the extra bits, and every other layer and half decodes to what plain oscar gives."""
    layout = KVLayout("bfloat16", (2, 4, 256, 3, 64), AXES)
    x = kv_like(layout.shape, seed=7, outlier_channels=2)
    plain, plain_stored, _ = round_trip(OscarCodec(OscarConfig(rotation_dir=tmp_path)), x, layout)
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path, precise_k=[2], precise_bits=4))
    out, stored, params = round_trip(codec, x, layout)
    assert params["precise"] == {"k": [2], "v": []} and params["precise_bits"] == 4
    assert stored - plain_stored == 256 * 3 * 64 * (4 - 2) // 8  # one layer's keys, 2 bits more a value
    assert rel_err(x[0, 2], out[0, 2]) < 0.3 * rel_err(x[0, 2], plain[0, 2])
    others = [(0, 0), (0, 1), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert all(np.array_equal(out[h, n], plain[h, n]) for h, n in others)
    assert x.nbytes / stored >= 5.0


def test_oscar_stores_each_rows_grid_in_two_bytes_and_still_reads_float16_grids(tmp_path: Path) -> None:
    """log8 (the default since 2026-12-07): two bytes a row's grid instead of four, 7.1x instead of
    6.4x at about the same error; a block written with float16 grids (before) decodes as it did."""
    x = kv_like(BLOCK.shape, seed=5, outlier_channels=2)
    old_codec = OscarCodec(OscarConfig(rotation_dir=tmp_path, ranges="float16"))
    old, old_stored, old_params = round_trip(old_codec, x, BLOCK)
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    new, stored, params = round_trip(codec, x, BLOCK)
    rows = 2 * 2 * 256 * 3  # (kv, layer, token, head): one 64-value row each
    assert params["ranges"] == "log8" and "ranges" not in old_params
    assert old_stored - stored == 2 * rows and x.nbytes / stored >= 7.0
    for half in (0, 1):
        assert rel_err(x[half], new[half]) < 1.1 * rel_err(x[half], old[half])
    pieces, _ = old_codec.encode(memoryview(x.view(np.uint8).reshape(-1)), BLOCK)
    again = np.empty_like(x)
    codec.decode(memoryview(b"".join(bytes(p) for p in pieces)), old_params, BLOCK,
                 memoryview(again.view(np.uint8).reshape(-1)))
    assert np.array_equal(again.view(np.uint16), old.view(np.uint16))
    pieces, _ = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), BLOCK)
    payload = memoryview(b"".join(bytes(p) for p in pieces))
    dest = memoryview(np.empty_like(x).view(np.uint8).reshape(-1))
    for bad in ({**params, "ranges": "log7"}, {k: v for k, v in params.items() if k != "range_base"},
                {**params, "range_base": {"k": params["range_base"]["k"]}},
                {**params, "range_base": {**params["range_base"], "v": [1.5]}},
                {**params, "range_base": {**params["range_base"], "v": [0, 0]}}):
        with pytest.raises(CorruptBlockError):
            codec.decode(payload, bad, BLOCK, dest)


def test_oscar_four_bit_layers_sit_at_4_bits_beside_the_3_bit_precise_ones(tmp_path: Path) -> None:
    """four_bit_k keeps its layers at 4 bits whatever precise_bits says: 2 bits a value more than
    plain for them, 1 more for the precise ones, the other layers as plain oscar stores them."""
    layout = KVLayout("bfloat16", (2, 4, 256, 3, 64), AXES)
    x = kv_like(layout.shape, seed=8, outlier_channels=2)
    plain, plain_stored, _ = round_trip(OscarCodec(OscarConfig(rotation_dir=tmp_path)), x, layout)
    three, _, _ = round_trip(OscarCodec(OscarConfig(rotation_dir=tmp_path, precise_k=[1, 2])), x, layout)
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path, precise_k=[1], four_bit_k=[2]))
    out, stored, params = round_trip(codec, x, layout)
    assert params["precise"] == {"k": [1], "v": []} and params["four_bit"] == {"k": [2], "v": []}
    assert stored - plain_stored == 256 * 3 * 64 * ((3 - 2) + (4 - 2)) // 8
    assert np.array_equal(out[0, 1], three[0, 1])  # the 3-bit layer as a 3-bit layer
    assert rel_err(x[0, 2], out[0, 2]) < 0.6 * rel_err(x[0, 2], three[0, 2])
    others = [(0, 0), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert all(np.array_equal(out[h, n], plain[h, n]) for h, n in others)
    with pytest.raises(ValueError, match="both precise_k and four_bit_k"):
        OscarConfig(precise_k=[1, 2], four_bit_k=[2])
    pieces, _ = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), layout)
    payload = memoryview(b"".join(bytes(p) for p in pieces))
    dest = memoryview(np.empty_like(x).view(np.uint8).reshape(-1))
    for bad in ({**params, "four_bit": {"k": [1], "v": []}},  # a layer at two widths
                {**params, "four_bit": {"k": [2]}}, {**params, "four_bit": [2]},
                {k: v for k, v in params.items() if k not in ("precise", "precise_bits")}):
        with pytest.raises(CorruptBlockError):
            codec.decode(payload, bad, layout, dest)


def test_oscar_precise_layers_beyond_the_model_are_ignored_and_bad_ones_refused(tmp_path: Path) -> None:
    layout = KVLayout("bfloat16", (2, 2, 32, 3, 64), AXES)
    x = kv_like(layout.shape)
    _, _, params = round_trip(OscarCodec(OscarConfig(rotation_dir=tmp_path, precise_v=[1, 9])), x, layout)
    assert params["precise"] == {"k": [], "v": [1]}
    with pytest.raises(ValueError):
        OscarConfig(precise_k=[3, 3])
    with pytest.raises(ValueError):
        OscarConfig(precise_k=[-1])
    codec = OscarCodec(OscarConfig(rotation_dir=tmp_path, precise_v=[1]))
    pieces, good = codec.encode(memoryview(x.view(np.uint8).reshape(-1)), layout)
    payload = memoryview(b"".join(bytes(p) for p in pieces))
    dest = memoryview(np.empty_like(x).view(np.uint8).reshape(-1))
    for bad in ({**good, "precise": {"k": [], "v": [5]}}, {**good, "precise_bits": 2},
                {**good, "precise": {"v": [1]}}, {k: v for k, v in good.items() if k != "precise_bits"}):
        with pytest.raises(CorruptBlockError):
            codec.decode(payload, bad, layout, dest)


def test_oscar_after_a_restart_reads_its_rotation_once_however_many_threads_ask(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every I/O thread's first block after a restart needs the same rotation file: one thread reads
    it (np.load's header parsing is not thread-safe on CPython 3.11), the others find it cached."""
    x = kv_like(BLOCK.shape, seed=3)
    pieces, params = OscarCodec(OscarConfig(rotation_dir=tmp_path)).encode(memoryview(x.view(np.uint8).reshape(-1)),
                                                                         BLOCK)
    payload = memoryview(b"".join(bytes(p) for p in pieces))
    restarted = OscarCodec(OscarConfig(rotation_dir=tmp_path))
    from_blob = Rotation.from_blob
    inside, most, calls = [0], [0], [0]
    guard = threading.Lock()

    def slow_from_blob(blob: bytes) -> Rotation:
        with guard:
            inside[0] += 1
            calls[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # long enough for every other thread to arrive
        try:
            return from_blob(blob)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(Rotation, "from_blob", staticmethod(slow_from_blob))
    errors: list[BaseException] = []

    def decode() -> None:
        try:
            restarted.decode(payload, params, BLOCK, memoryview(np.empty_like(x).view(np.uint8).reshape(-1)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=decode) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and calls[0] == 1 and most[0] == 1
